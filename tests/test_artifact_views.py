"""The views, the gpucache command and "compare with" read an artifact
through what its class declares (`gpucache_ext.pipeline.artifacts.Artifact`),
never through its stage's name: an invented text stage ("ttir", whose
artifact holds text as `LLVMArtifact` does) is shown, written out and
compared with nothing but its class and its stage's declaration.

The stage is declared for the test alone (one `StageSpec` more in
`STAGE_SPEC`, whose ``artifact`` names the class, as `codec.artifact_class`
reads it); no compile builds its entries, so the test hands the views one.
The tuples made from the declarations at import (the command's list of
stages) do not see it: the test reads the functions that take a stage.
"""

import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import ClassVar, Dict, List, Optional, Tuple

import pytest

from gpucache_ext.keys.stagespec import STAGE_SPEC, StageSpec
from gpucache_ext.pipeline import artifacts
from gpucache_ext.pipeline.artifacts import Artifact, Compared, Format, Listing
from gpucache_ext.store import codec

MODULE = 'module {\n  func.func @axpy(%a: f32) {\n    return\n  }\n}'


@dataclass
class TTIRArtifact(Artifact):
    """A made-up stage's artifact: text IR, held as NVVM IR is."""

    text: str
    entry_name: str = "axpy"

    stage: ClassVar[str] = "ttir"
    label: ClassVar[str] = "TTIR"
    format: ClassVar[Format] = Format("ttir", "ttir", "TTIR")
    compared: ClassVar[Optional[Compared]] = Compared("text", "TTIR")

    def as_text(self) -> str:
        return self.text

    # (the codec's side, which the views never call)
    def state(self) -> Tuple[Dict, List[bytes]]:
        return {"entry_name": self.entry_name}, [self.text.encode()]

    @classmethod
    def rebuild(cls, meta: Dict, parts: List[bytes]) -> "TTIRArtifact":
        return cls(parts[0].decode(), meta["entry_name"])

    @property
    def nbytes(self) -> int:
        return len(self.text)


@pytest.fixture
def ttir(monkeypatch):
    """The ttir stage, declared with its artifact class."""
    monkeypatch.setitem(STAGE_SPEC, "ttir", StageSpec("ttir", persisted=True, keyed_on_bytes=True,
                                                      artifact=f"{__name__}:TTIRArtifact"))
    codec.artifact_class.cache_clear()
    yield codec.artifact_class("ttir")
    codec.artifact_class.cache_clear()


def entry(text: str, token: str, config: str = "sm_86"):
    """An entry of the ttir stage, as a tier hands one out (the fields of `store.tiers.Entry` the views read)."""
    return SimpleNamespace(artifact=TTIRArtifact(text), token=token, kernel="tests.kernels.axpy",
                           signature="(float32,)", config=config, config_fields={"sm": 86}, nbytes=len(text),
                           created=time.time() - 60, seconds=0.01, reasons=("first compile of axpy",),
                           components={}, place=None)


def test_the_entry_view_shows_a_text_stage_under_its_label(ttir):
    from gpucache_ext.views.entry import EntryDetail, entry_html

    assert ttir.__name__ == "TTIRArtifact" and ttir.format.suffix == "ttir"
    shown = entry_html(EntryDetail("ttir", entry(MODULE, "ab" * 32), ("memory",)), time.time())
    assert '<details><summary>TTIR (5 lines)</summary><pre aria-label="TTIR">' in shown
    assert "func.func @axpy(%a: f32)" in shown and "SASS" not in shown
    # (not linked: its resources are those of the cubins built from it)
    assert "no cubin built from this entry is cached" in shown
    assert TTIRArtifact(MODULE).parts() == (Listing("TTIR", MODULE),)


def test_show_prints_a_text_stage_and_export_writes_it_with_its_ending(ttir):
    from gpucache_ext.cli.export import _file_name

    artifact = TTIRArtifact(MODULE)
    assert artifact.described("use --out FILE to save it") == MODULE  # (text: no size line)
    assert artifact.exported() == (Format("ttir", "ttir", "TTIR"), MODULE.encode())
    assert artifact.machine_code is None and artifact.link_log is None and artifact.contents() == ()
    assert _file_name({"kernel": "tests.kernels.axpy"}, "ttir") == "axpy.ttir"


def test_two_entries_of_a_text_stage_are_compared_line_by_line(ttir):
    from gpucache_ext.queries import compare_artifacts

    changed = MODULE.replace("return", "%b = arith.addf %a, %a : f32\n    return")
    comparison = compare_artifacts("ttir", entry(MODULE, "ab" * 32), entry(changed, "cd" * 32, "sm_86 opt=2"))
    assert comparison.left.listing == "TTIR sm_86" and comparison.right.arch == 86
    assert [row.right.strip() for row in comparison.rows if row.kind == "right only"] == [
        "%b = arith.addf %a, %a : f32"]
    assert comparison.summary() == "0 lines changed, 0 removed, 1 added (of 5 and 6)"


def test_a_stage_whose_class_declares_no_comparison_is_refused_naming_those_that_do(ttir, monkeypatch):
    from gpucache_ext.queries import compare_artifacts

    monkeypatch.setattr(TTIRArtifact, "compared", None)
    with pytest.raises(ValueError, match=r"'ttir' entries cannot be compared: compare mlir entries \(MLIR\) or "
                                         r"ptx entries \(PTX\) or "
                                         r"cubin entries \(SASS\)"):
        compare_artifacts("ttir", entry(MODULE, "ab" * 32), entry(MODULE, "cd" * 32))


def test_the_existing_stages_declare_their_formats_and_comparisons():
    """What the views and the command read of the existing stages' classes."""
    from gpucache_ext.queries import COMPARED_STAGES

    assert {stage: codec.artifact_class(stage).format.suffix
            for stage in ("llvm", "mlir", "ptx", "cubin", "fatbin")} == {
        "llvm": "ll", "mlir": "mlir", "ptx": "ptx", "cubin": "cubin", "fatbin": "fatbin"}
    assert COMPARED_STAGES == ("mlir", "ptx", "cubin")
    lto = artifacts.PTXArtifact((), b"\x7fNVVM", "k")
    assert lto.exported() == (artifacts.LTOIR, b"\x7fNVVM") and lto.as_text() is None
    assert lto.described("use --out FILE to save it") == "LTO-IR: 5 bytes"
    with pytest.raises(artifacts.NoListing, match="holds LTO-IR"):
        lto.listing(86)
    assert artifacts.PTXArtifact((".target sm_80\n",), None, "k").listing(86)[1:] == (80, "PTX sm_80")
