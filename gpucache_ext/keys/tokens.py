"""Cache tokens: one hash over named components, in a fixed order.

Like JAX's cache key, a token is built from small named parts (the upstream
token, each config field the stage reads, the toolchain, the schema version),
each hashed on its own, so that a miss can be explained part by part.  Values
are serialised as sorted JSON, never with `repr` of arbitrary objects or
pickle, so the same inputs give the same token in every process.  Tokens are
computed from a stage's inputs; the inputs of ptx and cubin are the bytes of
the artifact they are built from, so their tokens hash its digest (see
`KernelCache`).
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Mapping, Optional, Tuple

from .reasons import Reason
from .. import memos

# Bump when the meaning of any token component changes.  3: ptx and cubin
# tokens hash the upstream artifact's digest, not the upstream token (early
# cutoff); 4: floats by their bits, ints by value, types by numba's complete
# keys, builtins and every value typing reads from one snapshot; 5: a linked
# .cu source's digest covers what NVRTC reads, by its search rules (the llvm
# and ptx artifacts carry such digests for numba's shim sources); 6: the uid in
# symbol names has 16 digits (`backends.numba_cuda.stages.numbering.symbol_uid`), and is
# written in a function's repr as a 12-digit address (`address_of`).  Entries of
# earlier schemas are never looked up again (misses).
SCHEMA_VERSION = 6


def _canonical(value: Any) -> Any:
    """Map a value onto JSON with one spelling per value."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):  # by value: int's own repr, never a subclass's __str__
        return {"int": int.__repr__(value)}
    if isinstance(value, float):  # by its bits: every NaN's sign and payload, and -0.0
        return {"float": struct.pack(">d", value).hex()}
    if isinstance(value, (tuple, list)):
        return [_canonical(v) for v in value]
    if isinstance(value, Mapping):
        return {"map": sorted([str(k), _canonical(v)] for k, v in value.items())}
    if isinstance(value, bytes):
        return {"bytes": hashlib.sha256(value).hexdigest()}
    raise TypeError(f"cannot hash a {type(value).__name__} into a token: {value!r}")


def digest(value: Any) -> str:
    """Stable hex digest of a JSON-able value (ints, floats, str, tuples, dicts, bytes)."""
    text = json.dumps(_canonical(value), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Component:
    """One named input of a token: its digest, and a short form for people.

    ``parts``: the named components its digest hashes, where it stands for a
    whole (a device function: what it reads), so that a change can be named
    inside it ("global ALPHA 1.5 -> 3.0 (read by activate)"); not compared."""

    digest: str
    shown: str
    parts: Tuple[Tuple[str, "Component"], ...] = field(default=(), compare=False)


def parts_digest(parts: Mapping[str, Component]) -> str:
    """The digest of a whole made of `parts` (a device function's identity)."""
    return digest({name: part.digest for name, part in parts.items()})


def component_json(part: Component) -> list:
    """A component as stored in an entry's header: [digest, shown(, parts)]."""
    if not part.parts:
        return [part.digest, part.shown]
    return [part.digest, part.shown, {name: component_json(inner) for name, inner in part.parts}]


def component_from_json(value) -> Component:
    """`component_json` read back; parts that do not hash to the digest (as
    a whole's, or as a token's) are dropped: they only explain, and must not
    explain wrongly."""
    stored, shown = value[0], value[1]
    parts = {name: component_from_json(inner) for name, inner in value[2].items()} if len(value) > 2 else {}
    if parts and parts_digest(parts) != stored and not (
            "stage" in parts and make_token(parts["stage"].shown, parts).hex == stored):
        parts = {}
    return Component(stored, shown, tuple(sorted(parts.items())))


def component(value: Any, shown: str | None = None) -> Component:
    """A component for a plain value; it is shown as itself unless told otherwise."""
    if type(value) not in _MEMOISED or len(_COMPONENT_MEMO) > 8192:
        return Component(digest(value), shown if shown is not None else _show(value))
    # Keyed by exact type and repr, so that 1 and True (equal as dict keys) stay
    # apart; only for types whose repr is their value (every NaN reprs "nan").
    key = (type(value), repr(value), shown)
    found = _COMPONENT_MEMO.get(key)
    if found is None:
        found = _COMPONENT_MEMO[key] = Component(digest(value), shown if shown is not None else _show(value))
    return found


_COMPONENT_MEMO: Dict[Any, Component] = memos.memo("tokens._COMPONENT_MEMO", {})
_MEMOISED = (str, int, bool, type(None))


def _show(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


# How many hex digits of a token or digest people see, everywhere (report,
# inspector, CLI, messages); the full hex is always available.
SHORT_TOKEN_DIGITS = 12


def short_token(hex_digest: str) -> str:
    """A token (or an entry file's name) as people see it: its first 12 hex digits."""
    return hex_digest[:SHORT_TOKEN_DIGITS]


def short_name(qualname: Optional[str]) -> str:
    """A kernel as people name it: its qualified name's last part (``axpy`` of ``__main__.axpy``)."""
    return (qualname or "").rsplit(".", 1)[-1]


def find_token(given: str, candidates: Iterable[Tuple[str, str, Any]], where: str = "") -> Tuple[str, Any]:
    """Of `candidates` ((stage, token or entry file name, value) triples), the
    one whose token is `given` or starts with it (6 hex digits at least), as
    (stage, value); ValueError naming the problem (not a token, no such entry
    `where`, more than one) otherwise."""
    prefix = given.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{6,64}", prefix):
        raise ValueError(f"{given!r} is not a token: give a token or at least its first 6 hex digits")
    found = [(stage, name, value) for stage, name, value in candidates if name.startswith(prefix)]
    if not found:
        raise ValueError(f"no entry with a token starting {prefix}{where}")
    if len(found) > 1:
        listed = ", ".join(f"{stage}:{short_token(name)}" for stage, name, _ in found[:8])
        raise ValueError(f"{prefix} is ambiguous ({len(found)} entries: {listed}); give more digits")
    return found[0][0], found[0][2]


@dataclass(frozen=True)
class Token:
    """A stage's cache token and the components it was built from."""

    stage: str
    hex: str
    components: Dict[str, Component] = field(compare=False, hash=False)

    @property
    def short(self) -> str:
        return short_token(self.hex)

    def __str__(self) -> str:
        return self.hex


def make_token(stage: str, components: Mapping[str, Component]) -> Token:
    """Hash named components into a token for `stage`."""
    parts = dict(components)
    parts.setdefault("schema", component(SCHEMA_VERSION))
    parts["stage"] = component(stage)
    hasher = hashlib.sha256()
    for name in sorted(parts):
        hasher.update(name.encode())
        hasher.update(b"\0")
        hasher.update(parts[name].digest.encode())
        hasher.update(b"\n")
    return Token(stage, hasher.hexdigest(), parts)


def extend_token(token: Token, extra: Mapping[str, Component]) -> Token:
    """A token with more components (used when a stage turns out to read the target)."""
    parts = dict(token.components)
    parts.update(extra)
    return make_token(token.stage, parts)


def explain_difference(
    wanted: Mapping[str, Component], nearest: Mapping[str, Component]
) -> Tuple[Reason, ...]:
    """Why `wanted` differs from `nearest`: one `Reason` per component that
    differs, and for a device function one per input of it that differs."""
    reasons = []
    for name in sorted(set(wanted) | set(nearest)):
        new, old = wanted.get(name), nearest.get(name)
        if new is not None and old is not None and new.digest == old.digest:
            continue
        if old is None:
            reasons.append(Reason.added(name, new.shown))
        elif new is None:
            reasons.append(Reason.removed(name, old.shown))
        elif new.shown != old.shown:
            reasons.append(Reason.changed(name, old.shown, new.shown))
        elif new.parts and old.parts and name.startswith("device function "):
            label = name[len("device function "):]
            inner = explain_difference(dict(new.parts), dict(old.parts))
            reasons.extend([reason.inside(label) for reason in inner]
                           or [Reason.changed(name)])
        else:
            reasons.append(Reason.changed(name))
    return tuple(reasons)
