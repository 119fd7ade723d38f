"""One compile's way through the stages: its tokens, its lookups, and the
stages it must build.

A `CompilePlan` is made per compile from the kernel's snapshot (its
`SourceIdentity`): it computes every stage's token, looks llvm up first and
works back to typing only where llvm missed, then looks ptx and cubin up by
the content digest of the artifact before them (early cutoff), and builds
what missed through its cache's one build driver (`KernelCache._build`:
single flight, the toolchain check, the digest, filing).  `Flights` is that
single flight.  The tokens of the stages after typing are memoised: an exact
repeat computes none.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, NamedTuple, Optional, Tuple

from . import definitions
from .audit import source_files_component
from .config import STAGES, CompileConfig
from .errors import UnsupportedKernelError
from .extensions import extensions_component
from .importing import lazy_module
from .results import CompileResult, Outcome, StageResult, short_signature
from .sources import SnapshotChanged, identify, library_reads_changed, rebind, signature_component
from .store.disk import DiskTier
from .tokens import Component, Token, component, make_token, short_token
from .toolchain import numba_settings, toolchain_component

if TYPE_CHECKING:
    from .cache import KernelCache

# numba-cuda's compiler, imported by the first compile (see `gpucache_ext.cache`)
stages = lazy_module("gpucache_ext.stages")


class Filing(NamedTuple):
    """What filing a stage's fresh entry records besides the artifact: what
    it was built for, and why (a `CompilePlan`'s, or a fatbin's)."""

    kernel: str
    signature_text: str
    config: Any  # a CompileConfig, or a fatbin's `_FatbinConfig`
    place: Optional[str]  # where the kernel was defined
    forced: bool
    why_forced: str
    # (a fatbin) member ("cubin sm_86", "PTX compute_80") -> why this compile rebuilt it (None: reused)
    members: Optional[Mapping[str, Optional[str]]] = None


class Built(NamedTuple):
    """A stage built and filed by `KernelCache._build`."""

    artifact: Any
    digest: Optional[str]
    token: Token  # the effective token (a per-target variant's, where the build read the target)
    seconds: float
    reasons: Tuple[str, ...]


class CompilePlan:
    """One compile: the tokens, the lookups, and the stages that must run."""

    def __init__(self, cache: KernelCache, pyfunc, argtypes, config: CompileConfig, link=(),
                 why_forced: str = "forced recompile", identity=None):
        self.cache = cache
        self.pyfunc = pyfunc
        self.argtypes = argtypes
        self.config = config
        # what the kernel reads, read once (an audit gives the snapshot of the compile it checks)
        self.identity = identity if identity is not None else \
            identify(pyfunc, with_location=config.debug or config.lineinfo)
        if self.identity.unlinked and not link:
            raise UnsupportedKernelError(self.identity.unlinked[0])
        if link and identity is None:  # the kernel's own link= code joins what its external functions link
            from .toolchain import linking

            origin = f"{self.identity.qualname} (link=): "
            self.identity.links = linking.canonical(
                list(self.identity.links) + [linking.read(item, origin) for item in link])
        self.link = link
        self.kernel = self.identity.qualname
        self.place = definitions.place_of(self.identity.code)  # (with kernel: its definition)
        self.signature_text = short_signature(argtypes)
        self.forced = False
        self.why_forced = why_forced  # what a forced compile's entries say of why they were built
        self.parts: Dict[str, Dict[str, Component]] = {}  # each stage's token components
        self.tokens = self._tokens()
        self.stages: Dict[str, StageResult] = {}

    def _tokens(self) -> Dict[str, Token]:
        config = self.config
        # the toolchain's fingerprint is remembered in the disk tier's folder
        memo = next((tier.directory for tier in self.cache.tiers if isinstance(tier, DiskTier)), None)
        self.extensions = extensions_component()  # numba's extension tables, where user code registered
        typing = make_token("typing", {
            **self.identity.components,
            **({"numba extensions": self.extensions} if self.extensions is not None else {}),
            "signature": signature_component(self.argtypes, self.signature_text[1:-1]),
            "toolchain": toolchain_component("typing"),
        })
        settings = self.settings = numba_settings()
        toolchains = {stage: toolchain_component(stage, memo) for stage in STAGES[1:]}
        links = tuple((link.digest, link.name) for link in self.identity.links)
        # what the later stages' tokens are made of besides typing's: the same
        # inputs give the same tokens (memoised: an exact repeat rebuilds none)
        key = (typing.hex, config, tuple(settings.items()), links,
               tuple(part.digest for part in toolchains.values()))
        tokens, self.parts = _memoised(_DOWNSTREAM_TOKENS, key, lambda: _downstream_tokens(
            typing, config, settings, toolchains, links))
        return {"typing": typing, **tokens}

    def content_token(self, stage: str, upstream_digest: str, extra: Optional[Mapping[str, Component]] = None
                      ) -> Token:
        """The token ptx and cubin entries are filed under: the stage's inputs,
        with the upstream artifact's digest in place of the upstream token."""
        key = (stage, self.tokens[stage].hex, upstream_digest,
               tuple((name, part.digest) for name, part in (extra or {}).items()))

        def make():
            parts = dict(self.parts[stage])
            parts[STAGES[STAGES.index(stage) - 1]] = Component(upstream_digest,
                                                                f"output {short_token(upstream_digest)}")
            parts.update(extra or {})
            return make_token(stage, parts)

        return _memoised(_CONTENT_TOKENS, key, make)

    def run(self, force=False, until: str = "cubin") -> CompileResult:
        """llvm is looked up by its token; ptx and cubin by their content
        tokens, which need the digest of the artifact before them: found
        (stored with its entry) or built.  A stage rebuilt to the same bytes
        as before thus leaves the stages after it hits (early cutoff).
        ``until="ptx"`` stops after ptx (a fatbin's PTX-only target): the
        result has no cubin."""
        return self.back(self.front(force), until)

    def front(self, force=False) -> "Found":
        """typing and llvm: the llvm artifact, found or built."""
        self.forced = force
        llvm = None if force else self._lookup("llvm", self.tokens["llvm"])
        if llvm is None:
            typed = None if force else self._lookup("typing", self.tokens["typing"])
            if typed is None:
                typed = self._compile("typing", self.tokens["typing"], self._run_typing)
            llvm = self._compile("llvm", self.tokens["llvm"], self._lower, typed.artifact)
        else:
            self._peek_typing()
        return llvm

    def typed(self) -> "Found":
        """The typing stage alone: found, or built and stored."""
        self.forced = False
        found = self._lookup("typing", self.tokens["typing"])
        return found if found is not None else self._compile("typing", self.tokens["typing"], self._run_typing)

    def back(self, llvm: "Found", until: str = "cubin") -> CompileResult:
        """ptx and cubin (or ptx alone) from `front`'s llvm artifact."""
        ptx = self._downstream("ptx", llvm, stages.run_ptx, self.config, self.kernel)
        cubin = None
        if until != "ptx":
            sources = stages.debug_source_files(llvm.artifact)
            extra = source_files_component(sources)

            def link(*args):
                cubin = stages.run_cubin(*args)
                if source_files_component(sources) != extra:  # (nvJitLink read them meanwhile)
                    raise SnapshotChanged(f"a source file of {self.kernel} changed while it was being linked")
                return cubin

            cubin = self._downstream("cubin", ptx, link, self.config, self.kernel, self.identity.links, extra=extra)
        built = STAGES[:STAGES.index(until) + 1]
        return CompileResult(self.kernel, self.argtypes, self.config,
                             {s: self.stages[s] for s in built},
                             llvm.artifact, ptx.artifact, cubin.artifact if cubin is not None else None,
                             generic_tokens={s: t.hex for s, t in self.tokens.items() if s in built},
                             place=self.place)

    def _downstream(self, stage, upstream: "Found", fn, *args, extra=None) -> "Found":
        """Look up `stage` by the content token of `upstream`'s artifact (and
        `extra` components), else build it."""
        token = self.content_token(stage, upstream.digest, extra)
        rebuilt = self.stages[upstream.stage].outcome is Outcome.MISS
        found = None if self.forced else self._lookup(stage, token, cutoff=rebuilt)
        if found is None:
            found = self._compile(stage, token, fn, upstream.artifact, *args, upstream=upstream.token,
                                  cutoff=rebuilt)
        return found

    def _lower(self, typed):
        """The llvm stage, lowered with the numba settings its token hashed:
        numba reads them from its config module as it lowers, where another
        thread may have set one meanwhile (then the compile starts again)."""
        llvm = stages.run_llvm(typed, self.config, self.identity.link_keys)
        if numba_settings(reload=False) != self.settings:
            raise SnapshotChanged(f"numba's settings changed while {self.kernel} was being lowered")
        self._check_library_reads("lowered")
        return llvm

    def _check_library_reads(self, doing: str) -> None:
        """numba reads a library module's attributes live as it types and
        lowers: one replaced since they were hashed (another thread, a
        reload) starts the compile again."""
        changed = library_reads_changed(self.identity)
        if changed is not None:
            raise SnapshotChanged(f"{changed} was replaced while {self.kernel} was being {doing}")

    def _run_typing(self):
        proxy_for = self.cache._fresh_proxies() if self.forced else self.cache._proxy_for
        pyfunc = rebind(self.identity, proxy_for)
        typed = stages.run_typing(pyfunc, self.argtypes, self.config, kernel=True,
                                  uid=stages.symbol_uid(self.identity.digest), qualname=self.kernel,
                                  fresh=self.forced, debug_filename=self.identity.debug_filename,
                                  def_line=self.identity.def_line)
        # keep the proxies the typed IR refers to alive as long as it is cached
        typed.proxies = tuple(proxy_for(dispatcher, dev) for dispatcher, dev in self.identity.devices)
        typed.snapshot_bytes = self.identity.snapshot_bytes
        self._check_library_reads("typed")
        return typed

    def _lookup(self, stage, token: Token, cutoff: bool = False, memory_only: bool = False) -> Optional["Found"]:
        start = time.perf_counter()
        entry, token, tier = self.cache.store.lookup(stage, token, self.config.cc, memory_only)
        if entry is None:
            return None
        self.cache.store.count(stage, True, tier, entry.seconds, cutoff=cutoff)
        self.stages[stage] = StageResult(stage, token.hex, Outcome.HIT, tier, time.perf_counter() - start,
                                         components=token.components, saved_seconds=entry.seconds,
                                         cutoff=cutoff)
        return Found(stage, entry.artifact, entry.digest, token.hex)

    def _peek_typing(self):
        """Report typing when a later stage hit: a hit if still cached, else not needed."""
        entry, token, tier = self.cache.store.lookup("typing", self.tokens["typing"], self.config.cc)
        if entry is not None:
            outcome, saved = Outcome.HIT, entry.seconds
            self.cache.store.count("typing", True, tier, saved)
        else:
            outcome, tier, saved = Outcome.NOT_NEEDED, None, 0.0
            self.cache.store.not_needed("typing")
        self.stages["typing"] = StageResult("typing", token.hex, outcome, tier, 0.0,
                                            components=token.components, saved_seconds=saved)

    def _compile(self, stage, generic: Token, fn, *args, upstream: str = "", cutoff: bool = False) -> "Found":
        """Build `stage` after a miss, through the cache's one driver
        (`KernelCache._build`): one thread at a time per entry, a thread that
        waited for another's build of it finding it, a hit."""
        filing = Filing(self.kernel, self.signature_text, self.config, self.place, self.forced, self.why_forced)
        found, built = self.cache._build(stage, generic, filing, lambda: fn(*args),
                                         lambda: self._lookup(stage, generic, cutoff=cutoff, memory_only=True),
                                         upstream=upstream)
        if found is not None:
            return found
        self.stages[stage] = StageResult(stage, built.token.hex, Outcome.MISS, None, built.seconds, built.reasons,
                                         components=built.token.components)
        return Found(stage, built.artifact, built.digest, built.token.hex)


def _downstream_tokens(typing: Token, config: CompileConfig, settings, toolchains, links):
    """The llvm, ptx and cubin tokens chained on `typing`, and each one's components."""
    tokens, all_parts = {}, {}
    upstream = typing
    for stage in STAGES[1:]:
        parts = {name: component(value) for name, value in config.stage_fields(stage).items()}
        # (llvm: with typing's own components, which only llvm entries take to disk)
        parts[upstream.stage] = Component(upstream.hex, upstream.short,
                                          tuple(sorted(upstream.components.items())) if stage == "llvm" else ())
        parts["toolchain"] = toolchains[stage]
        if stage == "llvm":
            parts["numba settings"] = component(dict(settings))
        if stage == "cubin" and links:
            # what external functions link keys the cubin alone (see linking)
            parts["linked code"] = component([digest for digest, _ in links], ", ".join(name for _, name in links))
        all_parts[stage] = parts
        tokens[stage] = upstream = make_token(stage, parts)
    return tokens, all_parts


# (pure functions of their keys, shared by every cache: bounded, oldest dropped first)
_DOWNSTREAM_TOKENS: Dict[tuple, tuple] = {}
_CONTENT_TOKENS: Dict[tuple, Token] = {}


def _memoised(memo: dict, key, make, limit: int = 4096):
    """memo[key], made by `make()` when missing; the oldest entry goes when full."""
    found = memo.get(key)
    if found is None:
        if len(memo) >= limit:
            memo.pop(next(iter(memo)))
        found = memo[key] = make()
    return found


class Flights:
    """Single flight: one build at a time of each (stage, token) in a cache.

    Threads compiling overlapping kernels and configs at once build each
    entry once: the first to miss builds it, the others wait for that entry
    alone (not for the cache), then find it.  Locks exist only while some
    thread holds or waits for them."""

    def __init__(self):
        self._lock = threading.Lock()
        self._held: Dict[Tuple[str, str], List] = {}  # key -> [lock, threads holding or waiting]

    @contextlib.contextmanager
    def hold(self, stage: str, token: str):
        key = (stage, token)
        with self._lock:
            held = self._held.get(key)
            if held is None:
                held = self._held[key] = [threading.Lock(), 0]
            held[1] += 1
        try:
            with held[0]:
                yield
        finally:
            with self._lock:
                held[1] -= 1
                if not held[1]:
                    del self._held[key]

    def __len__(self) -> int:
        """Entries being built or waited for now."""
        with self._lock:
            return len(self._held)


class Found(NamedTuple):
    """A stage's artifact in one compile, found or built: what the next stage needs."""

    stage: str
    artifact: Any
    digest: Optional[str]  # of its canonical bytes (None for typing)
    token: str  # the token it is filed under
