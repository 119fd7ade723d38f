"""The backend seam: a backend declares its chain of stages, and the driver
and the miss prediction walk whatever chain it declares.

The backend here is numba-cuda's with one more stage between lowering and
libNVVM ("checked", keyed on the bytes of the NVVM IR, passing them on
unchanged): the kind of edit a backend with an MLIR stage makes.  Adding it
is what docs/design.md says adding a stage is: one `StageSpec` more in
`keys/stagespec.py` (made here in a copy of the package, in a new process),
and a backend in a file of its own, registered by name, whose chain names
the stage and whose `build` builds it.  Compiles through it give numba-cuda's
bytes, cache every stage, cut off early after it, and are predicted as they
run; numba-cuda's own chain, in the same process, is as before.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from gpucache_ext import CompileConfig, KernelCache, backends
from gpucache_ext.backends.numba_cuda.backend import NumbaCuda
from gpucache_ext.keys.stagespec import DEFAULT_CHAIN, Chain
from gpucache_ext.pipeline.results import Outcome

from . import kernels
from .helpers import ROOT

DECLARED = ('    StageSpec("checked", persisted=True, keyed_on_bytes=True,\n'
            '              artifact="gpucache_ext.pipeline.artifacts:LLVMArtifact"),\n')

BACKEND = '''
import dataclasses
from gpucache_ext.backends.numba_cuda.backend import NumbaCuda
from gpucache_ext.keys.stagespec import DEFAULT_CHAIN, Chain

class Checked(NumbaCuda):
    name = "numba-cuda-checked"
    chain = Chain(("typing", "llvm", "checked", "ptx", "cubin"),
                  tools={**dict(DEFAULT_CHAIN.tools), "checked": ("llvmlite",)})
    builds = 0

    def build(self, stage, plan, upstream):
        if stage == "checked":
            type(self).builds += 1
            return dataclasses.replace(upstream)  # (the same NVVM IR, a new artifact)
        return super().build(stage, plan, upstream)
'''

SCRIPT = '''
import hashlib, json, sys
from gpucache_ext import CompileConfig, KernelCache, backends
from gpucache_ext.pipeline.results import Outcome
from tests import kernels

backends.register_backend("numba-cuda-checked", "checked_backend:Checked")
checked = backends.backend("numba-cuda-checked")

def cache(**kwargs):
    made = KernelCache(**kwargs)
    made.pipeline.backend = checked
    return made

def copy(cache):
    return cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))

def show(result):
    return {"stages": {s: [str(r.outcome), r.cutoff, r.tier, sorted(r.components)] for s, r in result.stages.items()},
            "bytes": hashlib.sha256(result.ptx.encode() + result.cubin).hexdigest()}

folder = sys.argv[1]
out = {}
memory = cache()
out["first"] = show(copy(memory))
out["again"] = show(copy(memory))
out["built"] = checked.builds
out["stats"] = [memory.stats()["checked"].hits, memory.stats()["checked"].misses]
out["plain"] = show(copy(KernelCache()))
first = copy(cache(directory=folder))
later = cache(directory=folder)  # (a new session's cache: typing is kept in memory alone)
later.evict("llvm", first.stages["llvm"].token)
predicted = later.explain(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))
out["predicted"] = [{s: str(o) for s, o in predicted.outcomes.items()}, dict(predicted.reused_if)]
cut = copy(later)
out["after_evict"] = show(cut)
out["built_after"] = checked.builds
from gpucache_ext.store.codec import read_header
disk = later.store.tiers[0]
path = next(p for p in disk.directory.rglob("*.entry") if "checked" in p.parts)
out["checked_header_tools"] = sorted(read_header(disk.keyring.open(path.read_bytes())[0])[0]["toolchain"])
from gpucache_ext.ipython.report import CellReport
plain = copy(KernelCache())
report = CellReport([plain, cut], explain=True)
out["report"] = [repr(report), report._repr_html_(), plain.explain(), cut.explain()]
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """The script's JSON, run against a copy of the package with the stage declared."""
    root = tmp_path_factory.mktemp("seam")
    package = root / "gpucache_ext"
    shutil.copytree(ROOT / "gpucache_ext", package, ignore=shutil.ignore_patterns("__pycache__"))
    specs = package / "keys" / "stagespec.py"
    text = specs.read_text()
    anchor = '    StageSpec("ptx", '
    assert text.count(anchor) == 1, "stagespec.py no longer declares ptx as this test expects"
    specs.write_text(text.replace(anchor, DECLARED + anchor))
    (root / "checked_backend.py").write_text(textwrap.dedent(BACKEND))
    # (run from the copy's folder, which comes first on the path; the tests' kernels from the project's)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(root / "cache")], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_declared_chain_is_walked_with_every_stage_cached(ran):
    first, again = ran["first"]["stages"], ran["again"]["stages"]
    assert list(first) == ["typing", "llvm", "checked", "ptx", "cubin"]
    assert {outcome for outcome, *_ in first.values()} == {"miss"}
    # ptx is keyed on the bytes of the stage before it in this chain
    assert "checked" in first["ptx"][3] and "llvm" not in first["ptx"][3]
    assert [again[s][0] for s in ("llvm", "checked", "ptx", "cubin")] == ["hit"] * 4
    assert ran["stats"] == [1, 1]
    # numba-cuda's own chain, in the same process: as before, the same bytes
    assert list(ran["plain"]["stages"]) == ["typing", "llvm", "ptx", "cubin"]
    assert "llvm" in ran["plain"]["stages"]["ptx"][3]
    assert ran["first"]["bytes"] == ran["plain"]["bytes"]


def test_the_stage_after_a_rebuild_to_the_same_bytes_is_a_cutoff_hit_as_predicted(ran):
    outcomes, reused_if = ran["predicted"]
    assert list(outcomes) == ["typing", "llvm", "checked", "ptx", "cubin"]
    assert outcomes["llvm"] == "miss" and reused_if == {"checked": "llvm", "ptx": "checked", "cubin": "ptx"}
    result = ran["after_evict"]["stages"]
    assert [result[s][0] for s in ("llvm", "checked", "ptx", "cubin")] == ["miss", "hit", "hit", "hit"]
    assert result["checked"][1:3] == [True, "disk"] and not result["ptx"][1]
    # built once in the memory cache's session, once in the disk cache's: never after the eviction
    assert ran["built"] == 1 and ran["built_after"] == 2
    assert ran["after_evict"]["bytes"] == ran["first"]["bytes"]
    # its entries name the tools its chain declares for it (the stage's own: none)
    assert ran["checked_header_tools"] == ["llvmlite"]


def test_a_report_shows_each_result_through_its_own_chain(ran):
    text, page, plain, cut = ran["report"]
    assert "checked" not in plain and re.search(r"\n  checked hit \(disk, same bytes\) ", cut)
    assert re.search(r"\n  llvm    miss ", cut)  # (the stage names in one column)
    assert "llvm was rebuilt to the same bytes as before, so this checked was found" in page
    assert "checked token" in text and text.count("llvm token") == 2


class Relabelled(NumbaCuda):
    """numba-cuda's stages, as another compiler would declare them: its own package in every stage's tools."""

    name = "numba-cuda-relabelled"
    chain = Chain(DEFAULT_CHAIN.stages, tools={stage: names + ("setuptools",) for stage, names in DEFAULT_CHAIN.tools})


def test_another_backends_entries_never_share_a_token_with_numba_cudas(tmp_path):
    backends.register_backend(Relabelled.name, f"{__name__}:Relabelled")
    try:
        other = KernelCache(directory=tmp_path)
        other.pipeline.backend = backends.backend(Relabelled.name)
        theirs = other.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))
    finally:
        backends._REGISTERED.pop(Relabelled.name)
        backends._MADE.pop(Relabelled.name, None)
    ours = KernelCache(directory=tmp_path).compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))
    assert all(done.outcome is Outcome.MISS for done in ours.stages.values())  # (the same folder: nothing shared)
    assert not set(done.token for done in ours.stages.values()) & set(done.token for done in theirs.stages.values())
    assert "setuptools" in theirs.stages["cubin"].components["toolchain"].shown
    assert "setuptools" not in ours.stages["cubin"].components["toolchain"].shown
    assert (ours.ptx, ours.cubin) == (theirs.ptx, theirs.cubin)


def test_a_chain_is_refused_where_the_walk_could_not_run_it():
    with pytest.raises(ValueError, match="not a per-target stage"):
        Chain(("typing", "llvm", "ttir", "ptx", "cubin"))
    with pytest.raises(ValueError, match="ends with ptx then cubin"):
        Chain(("typing", "llvm", "ptx"))
    with pytest.raises(ValueError, match="come last"):
        Chain(("typing", "ptx", "llvm", "cubin"))
    assert sys.modules["gpucache_ext.keys.stagespec"].DEFAULT_CHAIN.entry == "llvm"


def test_the_mlir_backend_without_numba_cuda_mlir_says_which_extra_brings_it(monkeypatch):
    import importlib.util

    from gpucache_ext import ConfigError

    found = importlib.util.find_spec
    monkeypatch.delitem(sys.modules, "numba_cuda_mlir", raising=False)  # (as where it is not installed)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "numba_cuda_mlir"
                        else found(name, *a))
    with pytest.raises(ConfigError, match=r'pip install "gpucache_ext\[cu12,mlir\]" \(Python 3.11 or later\)'):
        backends.backend("mlir").check_can_compile()
    assert backends.canonical_backend("Numba-CUDA-MLIR") == "mlir"
    with pytest.raises(ValueError, match="is no backend; use numba-cuda or mlir"):
        backends.canonical_backend("triton")
