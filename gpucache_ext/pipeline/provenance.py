"""What `KernelCache.recompile` needs: the inputs each entry was built from.

Every compile records, for each stage's token, the inputs it hashed: the
snapshot of the code and what it reads (its `SourceIdentity`, which `rebind`
compiles), the argument types, the config, what it links and, for a fatbin,
its targets.  Snapshots hold array copies, so only the latest compiles'
are kept: at most `SNAPSHOT_LIMIT`, holding at most `SNAPSHOT_BYTES`; a token
whose snapshot was let go cannot be rebuilt exactly, and says so.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import Any, Dict, Iterable, NamedTuple, Optional, Tuple

from ..keys.config import CompileConfig, Targets
from ..keys.tokens import short_token

HISTORY_LIMIT = 4096  # entries whose inputs are remembered
SNAPSHOT_LIMIT = 256
SNAPSHOT_BYTES = 256 << 20


class Origin(NamedTuple):
    """The inputs of the compile that produced an entry, as it hashed them."""

    snapshot: int  # its `SourceIdentity`'s key in `Provenance`, while held (-1: none)
    argtypes: tuple
    config: CompileConfig
    link: tuple
    targets: Optional[Targets]  # a fatbin's targets; None for one target's stages


class Provenance:
    """Token -> `Origin`, and the latest snapshots they name; `lock` is the cache's."""

    def __init__(self, lock):
        self._lock = lock
        self._origins: "OrderedDict[str, Origin]" = OrderedDict()
        self._snapshots: "OrderedDict[int, Any]" = OrderedDict()
        self._snapshot_keys: Dict[int, int] = {}  # id of a held snapshot -> its key
        self._snapshot_bytes = 0
        self._snapshot_count = itertools.count()

    def hold(self, identity) -> int:
        """Hold `identity` among the latest snapshots (the oldest are let go); its key."""
        with self._lock:
            key = self._snapshot_keys.get(id(identity))
            if key is not None:  # (held already: a recompile's targets share one)
                self._snapshots.move_to_end(key)
                return key
            key = next(self._snapshot_count)
            self._snapshots[key] = identity
            self._snapshot_keys[id(identity)] = key
            self._snapshot_bytes += identity.snapshot_bytes
            while len(self._snapshots) > SNAPSHOT_LIMIT or self._snapshot_bytes > SNAPSHOT_BYTES:
                _, gone = self._snapshots.popitem(last=False)
                del self._snapshot_keys[id(gone)]
                self._snapshot_bytes -= gone.snapshot_bytes
            return key

    def remember(self, tokens: Iterable[str], origin: Origin) -> None:
        """Record the inputs the entries under `tokens` were built from."""
        with self._lock:
            for token in tokens:
                self._origins[token] = origin
                self._origins.move_to_end(token)
            while len(self._origins) > HISTORY_LIMIT:
                self._origins.popitem(last=False)

    def observe(self, request, identity, result) -> None:
        """Record a finished compile's inputs (a `Pipeline` observer): each
        stage's token for one target's; a fatbin's token with its targets,
        naming the snapshot its first target's compile holds."""
        if getattr(result, "fatbin_stage", None) is not None:
            first = self.origin(result.stages["cubin"].token)
            self.remember((result.fatbin_stage.token,), Origin(
                first.snapshot if first else -1, request.argtypes, request.config, tuple(request.link),
                result.targets))
        else:
            self.remember((stage.token for stage in result.stages.values()),
                          Origin(self.hold(identity), request.argtypes, request.config, tuple(request.link), None))

    def origin(self, token: str) -> Optional[Origin]:
        with self._lock:
            return self._origins.get(token)

    def inputs(self, token: str) -> Tuple[Origin, Any]:
        """(its `Origin`, the snapshot it names) of the entry under `token`,
        or a KeyError saying why they are not held (`problem`)."""
        with self._lock:
            origin = self._origins.get(token)
            identity = self._snapshots.get(origin.snapshot) if origin is not None else None
        if identity is None:
            raise KeyError(self._problem(token, origin))
        return origin, identity

    def problem(self, token: str) -> Optional[str]:
        """Why the inputs of `token` cannot be rebuilt exactly, or None where they can."""
        with self._lock:
            origin = self._origins.get(token)
            held = origin is not None and origin.snapshot in self._snapshots
        return None if held else self._problem(token, origin)

    @staticmethod
    def _problem(token: str, origin: Optional[Origin]) -> str:
        if origin is None:
            return (f"{short_token(token)} was not compiled by this process (another process, or this one "
                    "before a restart, made it): its inputs are not held here to rebuild it exactly; run "
                    "its cell again to compile the current state")
        return (f"the inputs of {short_token(token)} were let go (this process holds those of its latest "
                f"{SNAPSHOT_LIMIT} compiles): it cannot be rebuilt exactly; run its cell again to "
                "compile the current state")
