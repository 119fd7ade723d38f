"""What a compile returns: per stage, how it went, and the artifacts."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from . import stages
from .config import STAGES, CompileConfig
from .tokens import Component, short_token


@dataclass
class LayerResult:
    """What happened at one stage of one compile."""

    stage: str
    token: str
    hit: bool
    tier: Optional[str]  # "memory", ...; None when compiled; "skipped" when not needed
    seconds: float  # spent here: the lookup on a hit, the compile on a miss
    reasons: Tuple[str, ...] = ()  # why it missed
    saved_seconds: float = 0.0  # on a hit: what compiling the entry took
    components: Dict[str, Component] = field(default_factory=dict, repr=False)

    @property
    def short_token(self) -> str:
        return short_token(self.token)


@dataclass
class CompileResult:
    """The artifacts of one kernel for one signature and config, and how they were found."""

    kernel: str
    signature: Tuple[Any, ...]
    config: CompileConfig
    layers: Dict[str, LayerResult]
    _llvm: stages.LLVMArtifact = field(repr=False)
    _ptx: stages.PTXArtifact = field(repr=False)
    _cubin: stages.CubinArtifact = field(repr=False)
    # When the cache audited this compile: its `gpucache_ext.audit.AuditOutcome`
    # (after a mismatch, the artifacts above are the fresh ones).
    audit: Any = field(default=None, repr=False)
    # Device arrays read as globals: the code holds their pointers, so the
    # result keeps them alive (as numba's code library does).
    referenced: Tuple[Any, ...] = field(default=(), repr=False)

    @property
    def links(self):
        """The code the cubin links besides the kernel's
        (`gpucache_ext.linking.LinkInput`: name, kind, bytes, digest): numba's
        shims, then what external (declare_device) functions link."""
        return tuple(self._ptx.links) + tuple(self._cubin.links)

    @property
    def llvm_ir(self) -> str:
        """The NVVM IR given to libNVVM (kernel plus linked device functions)."""
        return self._llvm.text

    @property
    def ptx(self) -> str:
        """The PTX; with lto, the PTX nvJitLink produced after link-time optimisation."""
        if self._ptx.ltoir is not None:
            return self._cubin.linked_ptx or ""
        return "\n".join(self._ptx.ptx)

    @property
    def ltoir(self) -> Optional[bytes]:
        """libNVVM's LTO-IR when config.lto is on, else None."""
        return self._ptx.ltoir

    @property
    def cubin(self) -> bytes:
        return self._cubin.cubin

    @property
    def link_log(self) -> str:
        """nvJitLink's info log: registers, spills, shared/local/constant memory."""
        return self._cubin.info_log

    @property
    def entry_name(self) -> str:
        """The kernel's symbol in the PTX and cubin."""
        return self._cubin.entry_name

    def artifacts(self) -> Dict[str, Any]:
        """The llvm, ptx and cubin stages' artifacts, by stage."""
        return {"llvm": self._llvm, "ptx": self._ptx, "cubin": self._cubin}

    @property
    def cooperative(self) -> bool:
        """True when the kernel synchronises its grid: launched cooperatively,
        linked with libcudadevrt."""
        return self._llvm.cooperative

    @property
    def call_helper(self):
        """numba's exception table for debug launches (None if not in memory)."""
        return self._llvm.call_helper

    @property
    def resources(self) -> Dict[str, int]:
        """Registers, shared/local/constant bytes, stack, spills, from nvJitLink's log."""
        return parse_resources(self._cubin.info_log)

    @property
    def seconds(self) -> float:
        """Time this compile spent in the stages (lookups and compiles)."""
        return sum(layer.seconds for layer in self.layers.values())

    @property
    def saved_seconds(self) -> float:
        """Compile time the hits saved (what those entries took to build)."""
        return sum(layer.saved_seconds for layer in self.layers.values())

    @property
    def hit(self) -> bool:
        """True when no stage had to compile."""
        return all(layer.hit for layer in self.layers.values())

    def explain(self) -> str:
        """One line per stage: hit or miss, tier, time, and why it missed."""
        lines = [f"{self.kernel} {self.signature_text} [{self.config.summary()}]"]
        for stage in STAGES:
            layer = self.layers[stage]
            state = f"hit ({layer.tier})" if layer.hit else "miss"
            line = f"  {stage:<6} {state:<16} {layer.seconds * 1e3:8.2f} ms  {layer.short_token}"
            if layer.reasons:
                line += "  " + "; ".join(layer.reasons)
            lines.append(line)
        return "\n".join(lines)

    @property
    def signature_text(self) -> str:
        return short_signature(self.signature)


def parse_resources(log: str) -> Dict[str, int]:
    """Resource usage from nvJitLink's verbose info log.

    The summary line reads "used 38 registers, used 1 barriers, 0 stack,
    2048 bytes smem, 568 bytes cmem[0], 8 bytes cmem[2], 0 bytes lmem"; spills
    come from ptxas' "N bytes spill stores, N bytes spill loads".
    """
    summaries = [line for line in log.splitlines() if re.search(r"used \d+ registers", line)]
    summary = summaries[-1] if summaries else ""
    modules = [line for line in log.splitlines() if "bytes gmem" in line]
    module = modules[-1] if modules else ""

    def number(pattern, text):
        match = re.search(pattern, text)
        return int(match.group(1)) if match else 0

    return {
        "registers": number(r"used (\d+) registers", summary),
        "barriers": number(r"used (\d+) barriers", summary),
        "stack_bytes": number(r"(\d+) stack", summary),
        "shared_bytes": number(r"(\d+) bytes smem", summary),
        "constant_bytes": sum(int(n) for n in re.findall(r"(\d+) bytes cmem\[\d+\]", summary)),
        # constant memory the module's globals take (numba's constant arrays), reported
        # on the linker's "N bytes gmem, N bytes cmem[3]" line: what the driver reports
        "user_constant_bytes": sum(int(n) for n in re.findall(r"(\d+) bytes cmem\[[1-9]\d*\]", module)),
        "local_bytes": number(r"(\d+) bytes lmem", summary),
        "spill_stores": number(r"(\d+) bytes spill stores", log),
        "spill_loads": number(r"(\d+) bytes spill loads", log),
    }


def short_type(ty) -> str:
    """numba's signature spelling of a type: float32[::1] rather than array(float32, 1d, C)."""
    ndim, layout, dtype = getattr(ty, "ndim", None), getattr(ty, "layout", None), getattr(ty, "dtype", None)
    if ndim is None or dtype is None or layout not in ("A", "C", "F"):
        return str(ty)
    dims = [":"] * ndim
    if ndim and layout == "C":
        dims[-1] = "::1"
    elif ndim and layout == "F":
        dims[0] = "::1"
    flags = ("readonly " if getattr(ty, "mutable", True) is False else "") + \
        ("unaligned " if getattr(ty, "aligned", True) is False else "")
    return f"{flags}{short_type(dtype) if hasattr(dtype, 'ndim') else dtype}[{', '.join(dims)}]"


def short_signature(argtypes) -> str:
    return "(" + ", ".join(short_type(t) for t in argtypes) + ")"


class SassUnavailable(RuntimeError):
    """SASS cannot be produced here (nvdisasm is missing or failed)."""


def disassemble(cubin: bytes) -> str:
    """The SASS of a cubin, from nvdisasm (the CUDA toolkit's, or the
    ``nvidia-cuda-nvdisasm`` wheel's); `SassUnavailable` says why not."""
    try:
        from cuda.pathfinder import find_nvidia_binary_utility

        path = find_nvidia_binary_utility("nvdisasm")
    except Exception:
        path = None
    if not path:
        raise SassUnavailable("nvdisasm was not found (it comes with the CUDA toolkit, or "
                              "pip install nvidia-cuda-nvdisasm)")
    from numba.cuda.codegen import run_nvdisasm

    class _Cubin:
        code = cubin

    try:
        return run_nvdisasm(_Cubin, ["-c"])
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise SassUnavailable(f"nvdisasm failed: {first}") from exc
