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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List, Optional, Tuple

from ..toolchain import linking
from ..keys import targets


@dataclass
class LLVMArtifact:
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

    @property
    def text(self) -> str:
        return "\n\n".join(self.modules)

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
class PTXArtifact:
    """libNVVM's output: PTX modules, or one LTO-IR blob when lto is on."""

    ptx: Tuple[str, ...]
    ltoir: Optional[bytes]
    entry_name: str
    cooperative: bool = False  # link libcudadevrt (see LLVMArtifact)
    links: Tuple[linking.LinkInput, ...] = ()  # see LLVMArtifact

    stage: ClassVar[str] = "ptx"

    @property
    def nbytes(self) -> int:
        return sum(len(p) for p in self.ptx) + len(self.ltoir or b"") + sum(len(x.data) for x in self.links)

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
class CubinArtifact:
    """nvJitLink's output, its info log (resource usage) and, with LTO, the linked PTX."""

    cubin: bytes
    info_log: str
    linked_ptx: Optional[str]
    entry_name: str
    # what the kernel's external functions link (declare_device), linked here
    links: Tuple[linking.LinkInput, ...] = ()

    stage: ClassVar[str] = "cubin"

    @property
    def nbytes(self) -> int:
        return len(self.cubin) + len(self.info_log) + len(self.linked_ptx or "") + sum(
            len(x.data) for x in self.links)

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
class FatbinArtifact:
    """nvFatbin's output for one kernel: its cubins and, for forward
    compatibility, one PTX, as the driver loads them (it picks the cubin of
    the GPU's architecture, else compiles the PTX)."""

    fatbin: bytes
    members: Tuple[FatbinMember, ...]  # cubins by architecture, then the PTX
    entry_name: str

    stage: ClassVar[str] = "fatbin"

    @property
    def nbytes(self) -> int:
        return len(self.fatbin)

    def state(self) -> Tuple[Dict, List[bytes]]:
        return ({"entry_name": self.entry_name,
                 "members": [[m.kind, m.arch, m.token, m.digest, m.nbytes] for m in self.members]}, [self.fatbin])

    @classmethod
    def rebuild(cls, meta: Dict, parts: List[bytes]) -> "FatbinArtifact":
        members = tuple(FatbinMember(str(kind), int(arch), str(token), str(digest), int(size))
                        for kind, arch, token, digest, size in meta["members"])
        return cls(parts[0], members, meta["entry_name"])


# The artifacts that persist (typed IR does not: it is not portable), by stage
PERSISTED = {cls.stage: cls for cls in (LLVMArtifact, PTXArtifact, CubinArtifact, FatbinArtifact)}


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
