"""What the stages after typing produce, as plain data: NVVM IR, PTX (or
LTO-IR) and the cubin, with what each links; and the fatbin a list of
targets is assembled into.

Kept apart from `stages` (which imports numba-cuda to make them) so that
reading them back from the disk or shared tier (`codec`, the ``gpucache``
command) imports no numba.  `stages` re-exports them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Tuple

from .toolchain import linking
from . import targets


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

    @property
    def text(self) -> str:
        return "\n\n".join(self.modules)

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

    @property
    def nbytes(self) -> int:
        return sum(len(p) for p in self.ptx) + len(self.ltoir or b"") + sum(len(x.data) for x in self.links)


@dataclass
class CubinArtifact:
    """nvJitLink's output, its info log (resource usage) and, with LTO, the linked PTX."""

    cubin: bytes
    info_log: str
    linked_ptx: Optional[str]
    entry_name: str
    # what the kernel's external functions link (declare_device), linked here
    links: Tuple[linking.LinkInput, ...] = ()

    @property
    def nbytes(self) -> int:
        return len(self.cubin) + len(self.info_log) + len(self.linked_ptx or "") + sum(
            len(x.data) for x in self.links)


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

    @property
    def nbytes(self) -> int:
        return len(self.fatbin)
