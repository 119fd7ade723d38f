"""What a compile returns: per stage, how it went, and the artifacts."""

from __future__ import annotations

import enum
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Optional, Tuple

from .artifacts import CubinArtifact, LLVMArtifact, PTXArtifact
from ..keys.config import CompileConfig, Targets
from ..keys.stagespec import STAGE_SPEC
from ..toolchain.sass import SassUnavailable, disassemble  # noqa: F401  (their home is `sass`; importable here too)
from ..keys.tokens import Component, short_token
from ..units import format_seconds


class Outcome(str, enum.Enum):
    """How a stage went in one compile."""

    HIT = "hit"  # found in a tier
    MISS = "miss"  # compiled
    NOT_NEEDED = "not needed"  # a later stage hit, and this stage's entry was no longer cached

    def __str__(self) -> str:
        return self.value


class _Record:
    """A frozen record read by attribute (``stats["ptx"].hits``), which
    `as_dict` gives as plain data."""

    def as_dict(self) -> Dict[str, Any]:
        """Plain dicts and lists all the way down (for JSON); fields whose
        value is None are left out."""
        return _plain(self)


def _plain(value):
    if isinstance(value, _Record):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)
                if not f.name.startswith("_") and getattr(value, f.name) is not None}
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, enum.Enum):
        return value.value
    return value


@dataclass(frozen=True)
class StageResult:
    """What happened at one stage of one compile."""

    stage: str
    token: str
    outcome: Outcome
    tier: Optional[str]  # where a hit was found: "memory", "disk", ...; else None
    seconds: float  # spent here: the lookup on a hit, the compile on a miss
    reasons: Tuple[str, ...] = ()  # why it missed
    saved_seconds: float = 0.0  # on a hit: what compiling the entry took
    components: Dict[str, Component] = field(default_factory=dict, repr=False)
    # a hit right after the stage before was rebuilt to the same bytes as
    # before (early cutoff: its inputs are that stage's bytes)
    cutoff: bool = False
    # seconds waited for another process's build of this entry (a hit: the
    # entry it filed; a miss: the wait ran out, GPUCACHE_WAIT)
    waited: float = 0.0

    @property
    def hit(self) -> bool:
        """True when this stage did not compile: a hit, or not needed."""
        return self.outcome is not Outcome.MISS

    @property
    def short_token(self) -> str:
        return short_token(self.token)


@dataclass(frozen=True)
class TierStats(_Record):
    """One tier's part of a stage: hits found there and what it holds."""

    hits: int
    saved_seconds: float  # what the entries that hit here took to compile
    entries: int
    bytes: int  # the artifacts' bytes
    corrupt: Optional[int] = None  # persistent tiers: unreadable entries met
    rejected: Optional[int] = None  # persistent tiers: entries refused for their signature
    # persistent tiers: the refusals by reason (gpucache_ext.store.signing.REASONS)
    rejected_by: Optional[Mapping[str, int]] = None
    previous_secret: Optional[int] = None  # entries read that a retired secret signed
    unwritable: Optional[int] = None  # disk tier: writes skipped for an odd path (a directory where an entry goes)
    # persistent tiers: entries found here after waiting for another process's
    # build of them, and what those waits took (None: no waits)
    waits: Optional[int] = None
    waited_seconds: Optional[float] = None


@dataclass(frozen=True)
class TierInfo(_Record):
    """A persistent tier as a user should know it: where, whether its entries
    are signed, and what it refused (since the cache was made)."""

    name: str  # "disk", "shared"
    location: str  # a folder, or a Redis URL (password hidden) and key prefix
    signed: bool  # entries signed with a secret and required to be
    used: bool  # False: configured but left out (a shared tier without a secret)
    note: str = ""  # what the user should know, and the fix (the state itself is `state`)
    rejected: Mapping[str, int] = field(default_factory=dict)  # refusals by reason
    previous_secret: int = 0  # entries read that a retired secret signed

    @property
    def state(self) -> str:
        """"signed", "unsigned" or "not used", for reports."""
        return "not used" if not self.used else ("signed" if self.signed else "unsigned")


@dataclass(frozen=True)
class StageStats(_Record):
    """One stage's counters since the cache was made, and what its memory tier holds."""

    hits: int
    misses: int
    not_needed: int  # typing, when a later stage hit and the typed IR was no longer cached
    cutoffs: int  # hits right after the stage before rebuilt to the same bytes (ptx, cubin)
    entries: int  # in memory
    bytes: int  # in memory
    evictions: int  # to make room in memory, or asked for with `KernelCache.evict`
    compile_seconds: float  # spent on misses
    saved_seconds: float  # what the hits' entries took to compile
    audits: int
    audit_mismatches: int
    tiers: Mapping[str, TierStats]

    @property
    def lookups(self) -> int:
        return self.hits + self.misses


@dataclass(frozen=True, eq=False)
class CacheStats(Mapping):
    """Per stage `StageStats`: ``stats["ptx"].hits``."""

    stages: Mapping[str, StageStats]
    # launches that re-checked a kernel's inputs and found them unchanged
    # (`KernelCache.still_current`): no stage was looked up, so no hit is counted
    launch_checks: int = 0
    # the persistent tiers: signed or not, what they refused (`KernelCache.tier_info`)
    tiers: Tuple[TierInfo, ...] = ()

    def __getitem__(self, stage):
        return self.stages[stage]

    def __iter__(self):
        return iter(self.stages)

    def __len__(self) -> int:
        return len(self.stages)

    def tier_names(self) -> List[str]:
        """Every tier some stage has, memory first."""
        names: List[str] = []
        for stage in self.stages.values():
            for name in stage.tiers:
                if name not in names:
                    names.append(name)
        if "memory" in names:
            names.remove("memory")
            names.insert(0, "memory")
        return names

    def as_dict(self) -> Dict[str, Any]:
        """Per stage, plain dicts (`StageStats.as_dict`)."""
        return {stage: value.as_dict() for stage, value in self.stages.items()}


@dataclass(frozen=True)
class EntryInfo(_Record):
    """One cached artifact as `KernelCache.entries` lists it."""

    stage: str
    token: str
    kernel: str  # qualified name
    signature: str
    config: str  # summary
    config_fields: Mapping[str, Any]  # every field of the config it was built with
    tiers: Tuple[str, ...]  # where it is, memory first
    bytes: int  # the artifact's bytes
    created: float
    seconds: float  # what compiling it took
    reasons: Tuple[str, ...]  # why it was built
    # where its kernel was defined (`gpucache_ext.pipeline.definitions`); None if unknown
    place: Optional[str] = None


@dataclass
class CompileResult:
    """The artifacts of one kernel for one signature and config, and how they were found."""

    kernel: str
    signature: Tuple[Any, ...]
    config: CompileConfig
    stages: Dict[str, StageResult]  # per stage, in pipeline order
    _llvm: LLVMArtifact = field(repr=False)  # (the chain's entry stage's: numba-cuda-mlir's, an MLIRArtifact)
    _ptx: PTXArtifact = field(repr=False)
    _cubin: CubinArtifact = field(repr=False)
    # When the cache audited this compile: its `gpucache_ext.pipeline.audit.AuditOutcome`
    # (after a mismatch, the artifacts above are the fresh ones).
    audit: Any = field(default=None, repr=False)
    # Device arrays read as globals: the code holds their pointers, so the
    # result keeps them alive (as numba's code library does).
    referenced: Tuple[Any, ...] = field(default=(), repr=False)
    # Each stage's generic token (before per-target variants), from the inputs alone:
    # what `KernelCache.still_current` compares.
    generic_tokens: Dict[str, str] = field(default_factory=dict, repr=False)
    # where the kernel was defined (`gpucache_ext.pipeline.definitions`): with `kernel`,
    # the definition its entries are listed under; None if unknown
    place: Optional[str] = field(default=None, repr=False)
    # guards the three artifacts: an audit that finds a mismatch replaces them
    # (`replace_artifacts`) while a kernel may be reading them
    _lock: Any = field(default_factory=threading.Lock, init=False, repr=False, compare=False)

    @property
    def links(self):
        """The code the cubin links besides the kernel's
        (`gpucache_ext.toolchain.linking.LinkInput`: name, kind, bytes, digest): numba's
        shims, then what external (declare_device) functions link."""
        return tuple(self._ptx.links) + tuple(self._cubin.links)

    @property
    def llvm_ir(self) -> str:
        """The NVVM IR given to libNVVM (kernel plus linked device functions);
        "" for a compiler that keeps no NVVM IR (numba-cuda-mlir: `mlir`)."""
        return self._llvm.text if self._llvm.stage == "llvm" else ""

    @property
    def mlir(self) -> str:
        """numba-cuda-mlir's MLIR module, as text ("" for numba-cuda, which has none)."""
        return self._llvm.text if self._llvm.stage == "mlir" else ""

    @property
    def ptx(self) -> str:
        """The PTX; with lto, the PTX nvJitLink produced after link-time optimisation."""
        with self._lock:
            ptx, cubin = self._ptx, self._cubin
        if ptx.ltoir is not None:
            return cubin.linked_ptx or ""
        return "\n".join(ptx.ptx)

    @property
    def ltoir(self) -> Optional[bytes]:
        """libNVVM's LTO-IR when config.lto is on, else None."""
        return self._ptx.ltoir

    @property
    def cubin(self) -> bytes:
        return self._cubin.cubin

    @property
    def link_log(self) -> str:
        """nvJitLink's info log: registers, spills, shared/local/constant
        memory ("" for a target built for its PTX alone: nothing was linked)."""
        return self._cubin.info_log if self._cubin is not None else ""

    @property
    def entry_name(self) -> str:
        """The kernel's symbol in the PTX and cubin."""
        return self._cubin.entry_name

    def artifacts(self) -> Dict[str, Any]:
        """The artifacts of the chain's entry stage (llvm, or mlir), ptx and
        cubin, by stage (the three of one compile)."""
        with self._lock:
            return {self._llvm.stage: self._llvm, "ptx": self._ptx, "cubin": self._cubin}

    def replace_artifacts(self, fresh: "CompileResult") -> None:
        """Take `fresh`'s artifacts (an audit found this result's wrong): the
        three at once, under the result's lock, so that no reader of
        `artifacts` sees one compile's llvm with another's cubin."""
        with self._lock:
            self._llvm, self._ptx, self._cubin = fresh._llvm, fresh._ptx, fresh._cubin

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
    def cubins(self) -> Dict[int, bytes]:
        """Each target's cubin, by target (86 for sm_86): here the one."""
        return {self.config.sm: self.cubin}

    @property
    def resources_by_arch(self) -> Dict[int, Dict[str, int]]:
        """Each target's resources (as ``resources``) and its cubin's size
        (``cubin_bytes``), by target: here the one."""
        return {self.config.sm: {**self.resources, "cubin_bytes": len(self.cubin)}}

    @property
    def cubin_targets(self) -> Dict[int, "CompileResult"]:
        """The compile of each target that has a cubin, by target: here this one."""
        return {self.config.sm: self}

    def every_stage(self) -> List[StageResult]:
        """Every stage this compile went through (a fatbin's: each target's, then its own)."""
        return list(self.stages.values())

    @property
    def seconds(self) -> float:
        """Time this compile spent in the stages (lookups and compiles)."""
        return sum(stage.seconds for stage in self.every_stage())

    @property
    def saved_seconds(self) -> float:
        """Compile time the hits saved (what those entries took to build)."""
        return sum(stage.saved_seconds for stage in self.every_stage())

    @property
    def hit(self) -> bool:
        """True when no stage had to compile."""
        return all(stage.hit for stage in self.every_stage())

    def applied_summary(self) -> str:
        """The config's summary as ptxas applied it: "sm_86 max_registers=16
        (raised to 24 by ptxas)" where the cap was below the target's floor."""
        return applied_summary(self.config.summary(), self.link_log)

    def explain(self) -> str:
        """One line per stage: hit or miss, tier, time, and why it missed."""
        lines = [f"{self.kernel} {self.signature_text} [{self.applied_summary()}]"]
        lines += [_stage_line(done, "  ") for done in self.stages.values() if STAGE_SPEC[done.stage].per_target]
        return "\n".join(lines)

    @property
    def signature_text(self) -> str:
        return short_signature(self.signature)


_STAGE_WIDTH = max(map(len, STAGE_SPEC))  # (the stage names in one column)


def _stage_line(done: StageResult, indent: str, joined: str = "  ") -> str:
    """One stage of `explain`: outcome, time, token, then why it missed (after `joined`)."""
    where = ", ".join([str(done.tier)] + (["same bytes"] if done.cutoff else [])
                      + ([f"built by another process, waited {format_seconds(done.waited)}"] if done.waited else []))
    state = {Outcome.HIT: f"hit ({where})", Outcome.MISS: "miss", Outcome.NOT_NEEDED: "not needed"}[done.outcome]
    line = f"{indent}{done.stage:<{_STAGE_WIDTH}} {state:<16} {done.seconds * 1e3:8.2f} ms  {done.short_token}"
    return line + (joined + "; ".join(done.reasons) if done.reasons else "")


@dataclass
class FatbinResult(CompileResult):
    """One kernel built for several targets (`KernelCache.compile_fatbin`):
    every target's `CompileResult` and the fatbin assembled from them.

    As a `CompileResult` it is its lowest cubin target's (``config``,
    ``ptx``, ``cubin``, ``resources``...; ``stages`` adds "fatbin"), so code
    written for one target keeps working; ``per_target`` holds them all,
    ``fatbin`` the bytes to ship or load.
    """

    targets: Optional[Targets] = None
    # by target: a CompileResult per cubin target, and one whose stages stop
    # at ptx for a PTX target that is not a cubin target
    per_target: Dict[int, CompileResult] = field(default_factory=dict, repr=False)
    fatbin_stage: Optional[StageResult] = None
    _fatbin: Any = field(default=None, repr=False)  # artifacts.FatbinArtifact
    # why the fatbin carries no PTX although none was asked to be left out
    ptx_note: str = ""

    @property
    def fatbin(self) -> bytes:
        """The fatbinary: every target's cubin, and the PTX (see ``members``)."""
        return self._fatbin.fatbin

    @property
    def members(self):
        """What the fatbin holds (`artifacts.FatbinMember`): cubins by architecture, then the PTX."""
        return self._fatbin.members

    @property
    def cubins(self) -> Dict[int, bytes]:
        """Each cubin target's cubin, by target (86 for sm_86)."""
        return {sm: self.per_target[sm].cubin for sm in self.targets.sms}

    @property
    def resources_by_arch(self) -> Dict[int, Dict[str, int]]:
        """Each cubin target's resources (as ``resources``) and its cubin's
        size (``cubin_bytes``), by target."""
        return {sm: each.resources_by_arch[sm] for sm, each in self.cubin_targets.items()}

    @property
    def cubin_targets(self) -> Dict[int, CompileResult]:
        """Each cubin target's compile, by target (not a target built for its PTX alone)."""
        return {sm: self.per_target[sm] for sm in self.targets.sms}

    def every_stage(self) -> List[StageResult]:
        """Each target's stages (so ``seconds``, ``saved_seconds`` and ``hit``
        count every target), then the fatbin's."""
        return [stage for sm in sorted(self.per_target) for stage in self.per_target[sm].every_stage()] \
            + [self.fatbin_stage]

    def explain(self) -> str:
        """Per target, one line per stage; then the fatbin."""
        lines = [f"{self.kernel} {self.signature_text} [{self.targets.describe(self.config)}]"]
        for sm in sorted(self.per_target):
            raised = raised_register_cap(self.per_target[sm].link_log)
            lines.append(f"  sm_{sm}{'' if sm in self.targets.sms else ' (PTX only)'}"
                         + (f" max_registers={raised[0]} (raised to {raised[1]} by ptxas)" if raised else ""))
            lines += [_stage_line(stage, "    ") for stage in self.per_target[sm].every_stage()]
        members = ", ".join(member.name for member in self.members)
        line = _stage_line(self.fatbin_stage, "  ", f"  {members}; ")  # (the reasons after its members)
        lines.append(line if self.fatbin_stage.reasons else f"{line}  {members}")
        if self.ptx_note:
            lines.append(f"  no PTX: {self.ptx_note}")
        return "\n".join(lines)


# ptxas's warnings where a register cap is below the target's floor, and its
# note of the cap it applied: "For profile sm_86 adjusting per thread register
# count of 16 to lower bound of 24", "Overriding maximum register limit 256
# for '...' with  24 of maxrregcount option"
_RAISED_CAP = re.compile(r"adjusting per thread register count of (\d+) to lower bound of (\d+)")
_APPLIED_CAP = re.compile(r"with\s+(\d+) of maxrregcount option")


def raised_register_cap(log: str) -> Optional[Tuple[int, int]]:
    """(the cap asked for, the cap ptxas applied) where ptxas raised a
    register cap to its floor for the target; None where it did not."""
    found = _RAISED_CAP.findall(log or "")
    return (int(found[-1][0]), int(found[-1][1])) if found else None


def applied_summary(summary: str, log: str) -> str:
    """A config summary ("sm_86 max_registers=16") with what ptxas did to
    the register cap said where it raised it ("max_registers=16 (raised to
    24 by ptxas)"): the cap asked for is not the cap applied."""
    raised = raised_register_cap(log)
    if raised is None:
        return summary
    asked, applied = raised
    return re.sub(rf"\bmax_registers={asked}\b", f"max_registers={asked} (raised to {applied} by ptxas)", summary)


def parse_resources(log: str) -> Dict[str, int]:
    """Resource usage from nvJitLink's verbose info log.

    The summary line reads "used 38 registers, used 1 barriers, 0 stack,
    2048 bytes smem, 568 bytes cmem[0], 8 bytes cmem[2], 0 bytes lmem"; spills
    come from ptxas' "N bytes spill stores, N bytes spill loads";
    ``max_registers`` is the register cap ptxas applied (0: none), which is
    its floor for the target where the cap asked for was lower.
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
        "max_registers": int(_APPLIED_CAP.findall(log)[-1]) if _APPLIED_CAP.search(log) else 0,
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
