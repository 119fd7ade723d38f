"""What the stages after typing produce, as plain data: NVVM IR, PTX (or
LTO-IR) and the cubin, with what each links; and the fatbin a list of
targets is assembled into.

Kept apart from `stages` (which imports numba-cuda to make them) so that
reading them back from the disk or shared tier (`codec`, the ``gpucache``
command) imports no numba.  `stages` re-exports them.

Each artifact that persists says once what it is made of, as numba's
``_reduce_states``/``_rebuild`` do: `state` gives its metadata (JSON) and
payload parts (bytes, linked inputs last), `rebuild` makes it again from
them.  The codec stores exactly that, and the next stage's content digest
hashes exactly that (`codec.content_digest`), so the metadata's keys and the
parts' order are part of every token: change them and every entry is rebuilt.

Each also says how people read it (`Artifact`): the entry view, the
inspector's "compare with" and the ``gpucache`` command's show, export and
diff ask the artifact, or its stage's class (`codec.artifact_class`: the one
its `StageSpec.artifact` names), and name no stage.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List, NamedTuple, Optional, Tuple, Union

from ..toolchain import linking
from ..keys import targets
from ..units import format_bytes


class Format(NamedTuple):
    """How an artifact is written to a file (``gpucache export``): its name
    (the report's "format"), the file name's ending, and what people call it."""

    name: str  # "llvm", "ltoir"
    suffix: str  # "ll"
    title: str  # "LLVM IR"


class Compared(NamedTuple):
    """How two entries of a stage are compared side by side: how their
    listings split into lines (`toolchain.sass.side_by_side`'s kind: "text",
    "ptx" by instruction, "sass") and what the listing is called."""

    kind: str
    title: str  # "PTX", "SASS"


# The parts of an artifact as the entry view shows them (`Artifact.parts`)

@dataclass(frozen=True)
class Listing:
    """A text the artifact holds, under its heading: "PTX", "link log (nvJitLink)"."""

    label: str
    text: str


@dataclass(frozen=True)
class Note:
    """A sentence said of the artifact (a binary part, by its size); `aside`: in passing."""

    text: str
    aside: bool = True


@dataclass(frozen=True)
class Members:
    """What a fatbin holds: its `FatbinMember`s, shown as a table."""

    members: Tuple["FatbinMember", ...]


Part = Union[Listing, Note, Members]


class NoListing(ValueError):
    """An artifact holds no text to compare, and why ("holds LTO-IR (binary), ...")."""


class Artifact:
    """How people read an artifact: what the entry view, the inspector's
    "compare with" and the ``gpucache`` command's show, export and diff
    ask of it, so that none of them names a stage.

    A new stage whose artifact is text (an IR such as MLIR, held as
    `LLVMArtifact` holds NVVM IR) is shown, listed, exported and compared
    with no edit to the views, the command or the widgets once its class
    (named by its stage's declaration: ``StageSpec(..., artifact="module:Class")``)
    subclasses `Artifact` and provides, besides the codec's `state`,
    `rebuild` and `nbytes`:

    - ``stage``: its stage's name;
    - ``label``: the heading of its text in the entry view (of binary code: what it is);
    - ``format``: how export writes it (`Format`: name, file name ending, title);
    - ``as_text()``: its text;
    - ``compared`` (optional): how two of its entries are compared side by
      side (`Compared`, e.g. ``Compared("text", "MLIR")``); None: they are not.

    The rest is made from those: `exported` writes its text as UTF-8, `parts`
    shows it under `label`, `described` (``gpucache show``) prints it, and
    `listing` gives it for a diff.  An artifact that holds binary code (a
    cubin, a fatbin, LTO-IR) says so by overriding them; `machine_code` (what
    nvdisasm reads: shown and compared as SASS), `link_log` (the linker's
    log: what it uses) and `contents` (the images it holds) are a cubin's and
    a fatbin's alone.
    """

    stage: ClassVar[str]
    label: ClassVar[str]
    format: ClassVar[Format]
    compared: ClassVar[Optional[Compared]] = None

    def as_text(self) -> Optional[str]:
        """Its text, as people read it; None where it holds binary code."""
        raise NotImplementedError

    def exported(self) -> Tuple[Format, bytes]:
        """What export (and ``show --out``) writes: its format and bytes."""
        return self.format, self.as_text().encode()

    def parts(self) -> Tuple[Part, ...]:
        """What the entry view shows of it, in order (a cubin's SASS goes first: `machine_code`)."""
        return (Listing(self.label, self.as_text()),)

    def described(self, saved: str) -> str:
        """What ``gpucache show`` prints of it; `saved`: where its bytes were
        written, or how to write them (said of binary code)."""
        return self.as_text()

    def listing(self, sm: Optional[int]) -> Tuple[str, Optional[int], str]:
        """(its listing, the SM it is for, what the listing is called) for a
        side-by-side diff, `sm` the target of the config it was built with;
        `NoListing` where it has none."""
        text = self.as_text()
        if text is None:
            raise NoListing(f"holds {self.exported()[0].title} (binary), not text")
        return text, sm, f"{self.compared.title} sm_{sm}"

    @property
    def machine_code(self) -> Optional[bytes]:
        """What nvdisasm reads (a cubin): its SASS is shown and compared; None for the others."""
        return None

    @property
    def link_log(self) -> Optional[str]:
        """Its linker's log (a cubin's), which says what it uses: registers,
        shared memory, spills (`results.parse_resources`); None where it was not linked."""
        return None

    def contents(self) -> Tuple["FatbinMember", ...]:
        """The images it holds (a fatbin's members); none for the others."""
        return ()


@dataclass
class LLVMArtifact(Artifact):
    """NVVM IR of a kernel and everything it links, after kernel fixup."""

    modules: Tuple[str, ...]
    entry_name: str
    target_reads: targets.TargetReads
    # numba's exception table for the kernel (raises in debug launches);
    # in memory only, not part of the artifact's bytes.
    call_helper: Any = field(default=None, repr=False, compare=False)
    # Grid synchronisation (cuda.cg.this_grid): the cubin links libcudadevrt
    # and the kernel is launched cooperatively.
    cooperative: bool = False
    # numba's own helpers the code needs (its float16 shims), read when the
    # kernel was lowered; what external functions link keys the cubin instead
    # (`linking`).
    links: Tuple[linking.LinkInput, ...] = ()

    stage: ClassVar[str] = "llvm"
    label: ClassVar[str] = "NVVM IR (LLVM)"
    format: ClassVar[Format] = Format("llvm", "ll", "LLVM IR")

    @property
    def text(self) -> str:
        return "\n\n".join(self.modules)

    def as_text(self) -> str:
        return self.text

    def state(self) -> Tuple[Dict, List[bytes]]:
        return ({"entry_name": self.entry_name, "cooperative": self.cooperative,
                 "target_reads": targets.reads_key(self.target_reads), "links": _links_meta(self.links)},
                [m.encode() for m in self.modules] + _links_data(self.links))

    @classmethod
    def rebuild(cls, meta: Dict, parts: List[bytes]) -> "LLVMArtifact":
        parts, links = _split_links(meta, parts)
        return cls(tuple(p.decode() for p in parts), meta["entry_name"], targets.reads_from_key(meta["target_reads"]),
                   cooperative=bool(meta.get("cooperative", False)), links=links)

    @property
    def nbytes(self) -> int:
        return sum(len(m) for m in self.modules) + sum(len(x.data) for x in self.links)


@dataclass
class MLIRArtifact(Artifact):
    """numba-cuda-mlir's lowering of a kernel: one MLIR module as text (its
    gpu.module names the target, the optimisation level and fast math), from
    which the ptx stage compiles (it is parsed again: the text is all it reads)."""

    text: str
    entry_name: str
    target_reads: targets.TargetReads
    cooperative: bool = False  # (numba-cuda-mlir's cooperative kernels are refused: `backends.numba_cuda_mlir`)
    call_helper: Any = field(default=None, repr=False, compare=False)  # (none: no exception table)

    stage: ClassVar[str] = "mlir"
    label: ClassVar[str] = "MLIR"
    format: ClassVar[Format] = Format("mlir", "mlir", "MLIR")
    compared: ClassVar[Optional[Compared]] = Compared("text", "MLIR")

    def as_text(self) -> str:
        return self.text

    def state(self) -> Tuple[Dict, List[bytes]]:
        return ({"entry_name": self.entry_name, "target_reads": targets.reads_key(self.target_reads)},
                [self.text.encode()])

    @classmethod
    def rebuild(cls, meta: Dict, parts: List[bytes]) -> "MLIRArtifact":
        return cls(parts[0].decode(), meta["entry_name"], targets.reads_from_key(meta["target_reads"]))

    @property
    def nbytes(self) -> int:
        return len(self.text)


@dataclass
class PTXArtifact(Artifact):
    """libNVVM's output: PTX modules, or one LTO-IR blob when lto is on."""

    ptx: Tuple[str, ...]
    ltoir: Optional[bytes]
    entry_name: str
    cooperative: bool = False  # link libcudadevrt (see LLVMArtifact)
    links: Tuple[linking.LinkInput, ...] = ()  # see LLVMArtifact

    stage: ClassVar[str] = "ptx"
    label: ClassVar[str] = "PTX"
    format: ClassVar[Format] = Format("ptx", "ptx", "PTX")
    compared: ClassVar[Optional[Compared]] = Compared("ptx", "PTX")

    @property
    def nbytes(self) -> int:
        return sum(len(p) for p in self.ptx) + len(self.ltoir or b"") + sum(len(x.data) for x in self.links)

    def as_text(self) -> Optional[str]:
        return "\n".join(self.ptx) if self.ltoir is None else None

    def exported(self) -> Tuple[Format, bytes]:
        return (LTOIR, self.ltoir) if self.ltoir is not None else super().exported()

    def parts(self) -> Tuple[Part, ...]:
        return (((Listing(self.label, "\n".join(self.ptx)),) if self.ptx else ())
                + ((Note(f"LTO-IR: {format_bytes(len(self.ltoir))} (binary; the PTX after link-time "
                         "optimisation is in the cubin entries built from it)", aside=False),)
                   if self.ltoir is not None else ()))

    def described(self, saved: str) -> str:
        return f"LTO-IR: {len(self.ltoir)} bytes" if self.ltoir is not None else self.as_text()

    def listing(self, sm: Optional[int]) -> Tuple[str, Optional[int], str]:
        if self.ltoir is not None:
            raise NoListing("holds LTO-IR (binary), not PTX: compare the cubin entries built from it")
        text = self.as_text()
        target = _PTX_TARGET.search(text)
        arch = int(target.group(1)) if target else sm
        return text, arch, f"PTX sm_{arch}"

    def state(self) -> Tuple[Dict, List[bytes]]:
        parts = [p.encode() for p in self.ptx] + ([self.ltoir] if self.ltoir is not None else [])
        return ({"entry_name": self.entry_name, "ptx_count": len(self.ptx), "ltoir": self.ltoir is not None,
                 "cooperative": self.cooperative, "links": _links_meta(self.links)},
                parts + _links_data(self.links))

    @classmethod
    def rebuild(cls, meta: Dict, parts: List[bytes]) -> "PTXArtifact":
        parts, links = _split_links(meta, parts)
        count = meta["ptx_count"]
        return cls(tuple(p.decode() for p in parts[:count]), parts[count] if meta["ltoir"] else None,
                   meta["entry_name"], bool(meta.get("cooperative", False)), links)


@dataclass
class CubinArtifact(Artifact):
    """nvJitLink's output, its info log (resource usage) and, with LTO, the linked PTX."""

    cubin: bytes
    info_log: str
    linked_ptx: Optional[str]
    entry_name: str
    # what the kernel's external functions link (declare_device), linked here
    links: Tuple[linking.LinkInput, ...] = ()

    stage: ClassVar[str] = "cubin"
    label: ClassVar[str] = "cubin"
    format: ClassVar[Format] = Format("cubin", "cubin", "cubin ELF")
    compared: ClassVar[Optional[Compared]] = Compared("sass", "SASS")

    @property
    def nbytes(self) -> int:
        return len(self.cubin) + len(self.info_log) + len(self.linked_ptx or "") + sum(
            len(x.data) for x in self.links)

    def as_text(self) -> None:
        return None

    def exported(self) -> Tuple[Format, bytes]:
        return self.format, self.cubin

    def parts(self) -> Tuple[Part, ...]:
        return (((Listing("PTX after link-time optimisation", self.linked_ptx),) if self.linked_ptx else ())
                + (Listing("link log (nvJitLink)", self.info_log),
                   Note(f"cubin: {format_bytes(len(self.cubin))}, entry {self.entry_name}")))

    def described(self, saved: str) -> str:
        return f"{self.info_log}\ncubin: {len(self.cubin)} bytes ({saved})"

    def listing(self, sm: Optional[int]) -> Tuple[str, Optional[int], str]:
        """Its SASS (nvdisasm); `toolchain.sass.SassUnavailable` where there is none."""
        from ..toolchain.sass import disassembly

        found = disassembly(self.cubin)
        return found.text, found.arch, found.label

    @property
    def machine_code(self) -> bytes:
        return self.cubin

    @property
    def link_log(self) -> str:
        return self.info_log or ""

    def state(self) -> Tuple[Dict, List[bytes]]:
        parts = [self.cubin, self.info_log.encode()] + (
            [self.linked_ptx.encode()] if self.linked_ptx is not None else [])
        return ({"entry_name": self.entry_name, "linked_ptx": self.linked_ptx is not None,
                 "links": _links_meta(self.links)}, parts + _links_data(self.links))

    @classmethod
    def rebuild(cls, meta: Dict, parts: List[bytes]) -> "CubinArtifact":
        parts, links = _split_links(meta, parts)
        return cls(parts[0], parts[1].decode(), parts[2].decode() if meta["linked_ptx"] else None,
                   meta["entry_name"], links)


@dataclass(frozen=True)
class FatbinMember:
    """One image in a fatbin: a cubin for a real architecture, or PTX for a virtual one."""

    kind: str  # "cubin" or "ptx"
    arch: int  # 86 for sm_86 / compute_86
    token: str  # the entry it was read from
    digest: str  # SHA-256 of the image's bytes, as added
    nbytes: int  # the image's bytes as added

    @property
    def name(self) -> str:
        """"sm_86" for a cubin, "compute_80" for PTX."""
        return f"{'sm' if self.kind == 'cubin' else 'compute'}_{self.arch}"


@dataclass
class FatbinArtifact(Artifact):
    """nvFatbin's output for one kernel: its cubins and, for forward
    compatibility, one PTX, as the driver loads them (it picks the cubin of
    the GPU's architecture, else compiles the PTX)."""

    fatbin: bytes
    members: Tuple[FatbinMember, ...]  # cubins by architecture, then the PTX
    entry_name: str

    stage: ClassVar[str] = "fatbin"
    label: ClassVar[str] = "fatbin"
    format: ClassVar[Format] = Format("fatbin", "fatbin", "fatbin")

    @property
    def nbytes(self) -> int:
        return len(self.fatbin)

    def as_text(self) -> None:
        return None

    def exported(self) -> Tuple[Format, bytes]:
        return self.format, self.fatbin

    def parts(self) -> Tuple[Part, ...]:
        return (Members(self.members),
                Note(f"fatbin: {format_bytes(len(self.fatbin))}, entry {self.entry_name}"))

    def described(self, saved: str) -> str:
        return f"holds {members_text(self.members)}\nfatbin: {len(self.fatbin)} bytes ({saved})"

    def contents(self) -> Tuple[FatbinMember, ...]:
        return self.members

    def state(self) -> Tuple[Dict, List[bytes]]:
        return ({"entry_name": self.entry_name,
                 "members": [[m.kind, m.arch, m.token, m.digest, m.nbytes] for m in self.members]}, [self.fatbin])

    @classmethod
    def rebuild(cls, meta: Dict, parts: List[bytes]) -> "FatbinArtifact":
        members = tuple(FatbinMember(str(kind), int(arch), str(token), str(digest), int(size))
                        for kind, arch, token, digest, size in meta["members"])
        return cls(parts[0], members, meta["entry_name"])



# what a PTX stage built with lto exports instead of PTX
LTOIR = Format("ltoir", "ltoir", "LTO-IR")
_PTX_TARGET = re.compile(r"^\s*\.target\s+sm_(\d+)", re.M)


def members_text(members) -> str:
    """A fatbin's members in words: "sm_80 (cubin, 7.3 KiB), compute_80 (ptx, 2.1 KiB)"."""
    return ", ".join(f"{m.name} ({m.kind}, {format_bytes(m.nbytes)})" for m in members)


def _links_meta(links) -> List[Dict]:
    return [link.describe() for link in links]


def _links_data(links) -> List[bytes]:
    return [link.data for link in links]


def _split_links(meta: Dict, parts: List[bytes]) -> Tuple[List[bytes], Tuple[linking.LinkInput, ...]]:
    """The artifact's own parts, and the linked inputs stored after them."""
    described = meta.get("links", [])
    if not described:
        return parts, ()
    own, data = parts[:len(parts) - len(described)], parts[len(parts) - len(described):]
    return own, tuple(linking.LinkInput(str(d["name"]), str(d["kind"]), blob, str(d["digest"]))
                      for d, blob in zip(described, data))
