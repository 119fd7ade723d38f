"""`KernelCache`: one cache per stage, looked up by tokens computed from inputs.

A compile computes every stage's token from its inputs first (source
identity, signature, config, toolchain), then looks the stages up from the
last one backwards and compiles only from the first missing stage on.  An
exact repeat is answered from the tiers without compiling anything.

Typing and lowering may read the target (see `targets`).  Their tokens do
not include ``sm``: an entry built without asking about the target serves
every target; one that asked is filed under the token plus the questions and
answers (``cc>=(7, 5)``), and the generic token holds a marker listing those
variants.  A lookup picks the variant whose answers hold for the requested
target.  Downstream tokens hash the upstream *generic* token plus ``sm`` (ptx
and cubin read it anyway), so every token stays a pure function of the inputs.

Each miss is explained against the nearest earlier entry of the same kernel:
which token components differ.
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from . import stages, targets
from .config import STAGES, CompileConfig
from .sources import identify, python_function, rebind
from .tokens import Component, Token, component, explain_difference, extend_token, make_token
from .toolchain import numba_settings, toolchain_component

DEFAULT_MAX_ENTRIES = {"typing": 256, "llvm": 512, "ptx": 1024, "cubin": 1024}
_HISTORY_LIMIT = 4096


@dataclass
class Entry:
    """One cached artifact (or a marker saying the artifact is per target)."""

    token: str
    kernel: str
    artifact: Any
    components: Dict[str, Component]
    nbytes: int
    seconds: float
    created: float = field(default_factory=time.time)
    # A marker: the artifact is filed per target, under these variants.
    variants: Optional[List[targets.TargetReads]] = None

    @property
    def is_marker(self) -> bool:
        return self.variants is not None


class MemoryTier:
    """A bounded LRU map from token to `Entry` for one stage."""

    name = "memory"

    def __init__(self, max_entries: int, max_bytes: Optional[int] = None):
        if max_entries < 1:
            raise ValueError(f"max_entries={max_entries!r} is invalid; use an int >= 1")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.entries: "OrderedDict[str, Entry]" = OrderedDict()
        self.bytes = 0
        self.evictions = 0

    def get(self, token: str) -> Optional[Entry]:
        entry = self.entries.get(token)
        if entry is not None:
            self.entries.move_to_end(token)
        return entry

    def put(self, entry: Entry) -> None:
        old = self.entries.pop(entry.token, None)
        if old is not None:
            self.bytes -= old.nbytes
        self.entries[entry.token] = entry
        self.bytes += entry.nbytes
        while len(self.entries) > self.max_entries or (
            self.max_bytes is not None and self.bytes > self.max_bytes and len(self.entries) > 1
        ):
            _, evicted = self.entries.popitem(last=False)
            self.bytes -= evicted.nbytes
            self.evictions += 1

    def clear(self) -> None:
        self.entries.clear()
        self.bytes = 0

    def artifact_count(self) -> int:
        return sum(1 for e in self.entries.values() if not e.is_marker)


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
        return self.token[:12]


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
        return "(" + ", ".join(str(t) for t in self.signature) + ")"


def parse_resources(log: str) -> Dict[str, int]:
    """Resource usage from nvJitLink's verbose info log.

    The summary line reads "used 38 registers, used 1 barriers, 0 stack,
    2048 bytes smem, 568 bytes cmem[0], 8 bytes cmem[2], 0 bytes lmem"; spills
    come from ptxas' "N bytes spill stores, N bytes spill loads".
    """
    summaries = [line for line in log.splitlines() if re.search(r"used \d+ registers", line)]
    summary = summaries[-1] if summaries else ""

    def number(pattern, text):
        match = re.search(pattern, text)
        return int(match.group(1)) if match else 0

    return {
        "registers": number(r"used (\d+) registers", summary),
        "barriers": number(r"used (\d+) barriers", summary),
        "stack_bytes": number(r"(\d+) stack", summary),
        "shared_bytes": number(r"(\d+) bytes smem", summary),
        "constant_bytes": sum(int(n) for n in re.findall(r"(\d+) bytes cmem\[\d+\]", summary)),
        "local_bytes": number(r"(\d+) bytes lmem", summary),
        "spill_stores": number(r"(\d+) bytes spill stores", log),
        "spill_loads": number(r"(\d+) bytes spill loads", log),
    }


class _LayerStats:
    __slots__ = ("hits", "misses", "compile_seconds")

    def __init__(self):
        self.hits = 0
        self.misses = 0
        self.compile_seconds = 0.0


class KernelCache:
    """A staged kernel cache with one memory tier per stage.

    ``max_entries`` bounds each stage's tier: an int for all stages or a dict
    ``{stage: int}``; ``max_bytes`` likewise bounds their sizes (None: no
    byte bound).  Safe to use from several threads.
    """

    def __init__(self, max_entries=None, max_bytes=None):
        limits = _per_stage(max_entries, DEFAULT_MAX_ENTRIES, "max_entries")
        byte_limits = _per_stage(max_bytes, dict.fromkeys(STAGES), "max_bytes")
        self._tiers = {s: MemoryTier(limits[s], byte_limits[s]) for s in STAGES}
        self._stats = {s: _LayerStats() for s in STAGES}
        self._history = {s: OrderedDict() for s in STAGES}  # token -> (kernel, components)
        self._proxies: "OrderedDict[str, stages.DeviceProxy]" = OrderedDict()
        self._misses = deque(maxlen=256)
        self._lock = threading.RLock()

    # -- public API --------------------------------------------------------
    def compile(self, func, sig, config: Optional[CompileConfig] = None, *,
                force: bool = False) -> CompileResult:
        """Compile `func` (a Python function or numba.cuda.jit dispatcher) for
        the argument types `sig` and `config`, reusing every cached stage.

        The dispatcher's own options are not read: `config` decides.  With
        ``force``, every stage is compiled again and its entry replaced.
        """
        config = CompileConfig() if config is None else config
        if not isinstance(config, CompileConfig):
            raise TypeError(f"config must be a CompileConfig, got {type(config).__name__}")
        pyfunc = python_function(func)
        argtypes = stages.normalize_signature(sig)
        plan = _Plan(self, pyfunc, argtypes, config)
        return plan.run(force)

    def tokens(self, func, sig, config: Optional[CompileConfig] = None) -> Dict[str, Token]:
        """Each stage's token for these inputs, computed without compiling.

        These are the generic tokens: where typing or lowering turn out to read
        the target, the entry is filed under the token plus ``sm``.
        """
        config = CompileConfig() if config is None else config
        plan = _Plan(self, python_function(func), stages.normalize_signature(sig), config)
        return dict(plan.tokens)

    def explain(self, func, sig, config: Optional[CompileConfig] = None) -> Dict[str, Tuple[str, ...]]:
        """Why each stage would miss for these inputs, without compiling or counting.

        Returns {stage: reasons}; an empty tuple means the stage would hit.
        """
        config = CompileConfig() if config is None else config
        plan = _Plan(self, python_function(func), stages.normalize_signature(sig), config)
        reasons = {}
        for stage in STAGES:
            entry, token = self._lookup(stage, plan.tokens[stage], config.cc)
            reasons[stage] = () if entry is not None else self._explain(stage, token, plan.kernel,
                                                                        record=False)
        return reasons

    def stats(self) -> Dict[str, Dict[str, int]]:
        """Per stage: hits, misses, entries, bytes (and evictions, compile seconds)."""
        with self._lock:
            return {
                stage: {
                    "hits": self._stats[stage].hits,
                    "misses": self._stats[stage].misses,
                    "entries": self._tiers[stage].artifact_count(),
                    "bytes": self._tiers[stage].bytes,
                    "evictions": self._tiers[stage].evictions,
                    "compile_seconds": round(self._stats[stage].compile_seconds, 6),
                }
                for stage in STAGES
            }

    def clear(self, stage: Optional[str] = None) -> None:
        """Drop the entries of one stage, or of all stages (counters are kept)."""
        stages_to_clear = STAGES if stage is None else (_check_stage(stage),)
        with self._lock:
            for s in stages_to_clear:
                self._tiers[s].clear()
            if stage is None:
                self._proxies.clear()

    def recent_misses(self):
        """The latest misses, newest last: dicts with kernel, stage, token, reasons."""
        with self._lock:
            return list(self._misses)

    # -- internals used by _Plan --------------------------------------------
    def _lookup(self, stage: str, token: Token, cc) -> Tuple[Optional[Entry], Token]:
        """Find `token`, or the variant of it that holds for target `cc`."""
        with self._lock:
            tier = self._tiers[stage]
            entry = tier.get(token.hex)
            if entry is None or not entry.is_marker:
                return entry, token
            for reads in entry.variants:
                if targets.holds_for(reads, cc):
                    variant = _with_reads(token, reads)
                    found = tier.get(variant.hex)
                    if found is not None:
                        return found, variant
            return None, token

    def _store(self, stage, token: Token, kernel, artifact, nbytes, seconds, reads):
        """File a fresh artifact; returns (effective token, reasons it missed)."""
        with self._lock:
            tier = self._tiers[stage]
            if reads:
                marker = tier.get(token.hex)
                variants = list(marker.variants) if marker is not None and marker.is_marker else []
                if reads not in variants:
                    variants.append(reads)
                tier.put(Entry(token.hex, kernel, None, token.components, 0, 0.0, variants=variants))
                token = _with_reads(token, reads)
            reasons = self._explain(stage, token, kernel)
            tier.put(Entry(token.hex, kernel, artifact, token.components, nbytes, seconds))
            self._remember(stage, token, kernel)
            self._stats[stage].compile_seconds += seconds
            return token, reasons

    def _remember(self, stage, token: Token, kernel):
        history = self._history[stage]
        history[token.hex] = (kernel, token.components)
        history.move_to_end(token.hex)
        while len(history) > _HISTORY_LIMIT:
            history.popitem(last=False)

    def _count(self, stage, hit):
        with self._lock:
            if hit:
                self._stats[stage].hits += 1
            else:
                self._stats[stage].misses += 1

    def _explain(self, stage, token: Token, kernel, record=True) -> Tuple[str, ...]:
        with self._lock:
            best = None
            for old_token, (old_kernel, old_components) in self._history[stage].items():
                if old_kernel != kernel:
                    continue
                reasons = _reasons(stage, token.components, old_components)
                if best is None or len(reasons) < len(best):
                    best = reasons
            if best is None:
                reasons = (f"first compile of {kernel.rsplit('.', 1)[-1]}",)
            elif not best:
                reasons = ("entry was evicted or cleared",)
            else:
                reasons = best
            if record:
                self._misses.append({"kernel": kernel, "stage": stage, "token": token.hex,
                                     "reasons": reasons, "time": time.time()})
            return reasons

    def _proxy_for(self, dispatcher, identity):
        key = identity.digest
        with self._lock:
            proxy = self._proxies.get(key)
            if proxy is None:
                pyfunc = rebind(identity, self._proxy_for)
                proxy = stages.DeviceProxy(dispatcher, pyfunc, key)
                self._proxies[key] = proxy
            self._proxies.move_to_end(key)
            while len(self._proxies) > 4 * self._tiers["typing"].max_entries:
                self._proxies.popitem(last=False)
            return proxy


def _with_reads(token: Token, reads: targets.TargetReads) -> Token:
    return extend_token(token, {"target": component(targets.reads_key(reads), targets.describe(reads))})


def _reasons(stage, wanted: Mapping[str, Component], old: Mapping[str, Component]):
    reasons = []
    for reason in explain_difference(wanted, old):
        name = reason.split(" ", 1)[0]
        if name in STAGES and name != stage:
            reasons.append(f"{name} input changed")
        else:
            reasons.append(reason)
    return tuple(reasons)


def _per_stage(value, default, name):
    if value is None:
        return dict(default)
    if isinstance(value, int) and not isinstance(value, bool):
        return dict.fromkeys(STAGES, value)
    if isinstance(value, Mapping):
        unknown = set(value) - set(STAGES)
        if unknown:
            raise ValueError(f"{name} has unknown stages {sorted(unknown)}; use {list(STAGES)}")
        merged = dict(default)
        merged.update(value)
        return merged
    raise TypeError(f"{name} must be None, an int or a dict {{stage: int}}, got {value!r}")


def _check_stage(stage):
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; use one of {list(STAGES)}")
    return stage


class _Plan:
    """One compile: the tokens, the lookups, and the stages that must run."""

    def __init__(self, cache: KernelCache, pyfunc, argtypes, config: CompileConfig):
        self.cache = cache
        self.pyfunc = pyfunc
        self.argtypes = argtypes
        self.config = config
        self.identity = identify(pyfunc, with_location=config.debug or config.lineinfo)
        self.kernel = self.identity.qualname
        self.tokens = self._tokens()
        self.layers: Dict[str, LayerResult] = {}

    def _tokens(self) -> Dict[str, Token]:
        config = self.config
        typing = make_token("typing", {
            **self.identity.components,
            "signature": component([str(t) for t in self.argtypes], ", ".join(map(str, self.argtypes))),
            "toolchain": toolchain_component("typing"),
        })
        tokens = {"typing": typing}
        upstream = typing
        for stage in STAGES[1:]:
            parts = {name: component(value) for name, value in config.stage_fields(stage).items()}
            parts[upstream.stage] = Component(upstream.hex, upstream.short)
            parts["toolchain"] = toolchain_component(stage)
            if stage == "llvm":
                parts["numba settings"] = component(numba_settings())
            tokens[stage] = upstream = make_token(stage, parts)
        return tokens

    def run(self, force=False) -> CompileResult:
        self.forced = force
        found = {stage: None if force else self._lookup(stage) for stage in ("cubin", "ptx", "llvm")}
        if found["llvm"] is None:
            typed = None if force else self._lookup("typing")
            if typed is None:
                typed = self._compile("typing", self._run_typing)
            found["llvm"] = self._compile("llvm", stages.run_llvm, typed, self.config)
        else:
            self._peek_typing()
        if found["ptx"] is None:
            found["ptx"] = self._compile("ptx", stages.run_ptx, found["llvm"], self.config, self.kernel)
        if found["cubin"] is None:
            found["cubin"] = self._compile("cubin", stages.run_cubin, found["ptx"], self.config, self.kernel)
        return CompileResult(self.kernel, self.argtypes, self.config,
                             {s: self.layers[s] for s in STAGES},
                             found["llvm"], found["ptx"], found["cubin"])

    def _run_typing(self):
        pyfunc = rebind(self.identity, self.cache._proxy_for)
        typed = stages.run_typing(pyfunc, self.argtypes, self.config, kernel=True,
                                  uid=stages.symbol_uid(self.identity.digest), qualname=self.kernel)
        typed.proxies = tuple(self._proxies_of(self.identity))
        return typed

    def _proxies_of(self, identity):
        for dispatcher, dev in identity.devices.values():
            yield self.cache._proxy_for(dispatcher, dev)
        for attrs in identity.module_devices.values():
            for dispatcher, dev in attrs.values():
                yield self.cache._proxy_for(dispatcher, dev)

    def _lookup(self, stage):
        start = time.perf_counter()
        entry, token = self.cache._lookup(stage, self.tokens[stage], self.config.cc)
        if entry is None:
            return None
        self.cache._count(stage, True)
        self.layers[stage] = LayerResult(stage, token.hex, True, "memory", time.perf_counter() - start,
                                         components=token.components, saved_seconds=entry.seconds)
        return entry.artifact

    def _peek_typing(self):
        """Report typing when a later stage hit: a hit if still cached, else not needed."""
        entry, token = self.cache._lookup("typing", self.tokens["typing"], self.config.cc)
        if entry is not None:
            self.cache._count("typing", True)
            tier, saved = "memory", entry.seconds
        else:
            tier, saved = "skipped", 0.0
        self.layers["typing"] = LayerResult("typing", token.hex, True, tier, 0.0,
                                            components=token.components, saved_seconds=saved)

    def _compile(self, stage, fn, *args):
        generic = self.tokens[stage]
        self.cache._count(stage, False)
        start = time.perf_counter()
        artifact = fn(*args)
        seconds = time.perf_counter() - start
        reads = getattr(artifact, "target_reads", targets.NO_READS)
        token, reasons = self.cache._store(stage, generic, self.kernel, artifact, artifact.nbytes,
                                           seconds, reads)
        if self.forced:
            reasons = ("forced recompile",)
        self.layers[stage] = LayerResult(stage, token.hex, False, None, seconds, reasons,
                                         components=token.components)
        return artifact
