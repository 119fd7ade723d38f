"""The persistent tiers, by name: one factory that the cache, the magic and the
CLI share (as Triton names its cache manager "module:Class").

A tier kind is a `Tier` class with a ``from_settings(settings)`` classmethod
that makes the tier `TierSettings` ask for, or None where they configure none
(no folder, no URL).  The built-in kinds are registered by name: ``disk`` (the
folder, `DiskTier`) and ``shared`` (Redis, `RedisTier`).  Another is named as
"module:Class" (``KernelCache(tiers=["mypkg.tiers:ObjectStoreTier"])``, or
``GPUCACHE_TIERS=disk,mypkg.tiers:ObjectStoreTier``), or registered under a
name of its own with `register_tier`.  A tier a setting refuses (a shared tier
with no secret) is left out with a `SecurityWarning` and shown as refused.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Type, Union

from ..errors import SecurityWarning
from . import settings as tier_settings
from .disk import DEFAULT_MAX_BYTES, DiskTier
from .shared import RedisTier
from .signing import Keyring
from ..pipeline.results import TierInfo
from .tiers import Tier, TierRefused
from ..importing import import_named

# the persistent tiers a cache has unless told otherwise, in the order they are asked
DEFAULT_TIERS = ("disk", "shared")


@dataclasses.dataclass(frozen=True)
class TierSettings:
    """What the persistent tiers are made from; each kind reads what it
    needs.  ``keyring`` signs and checks entries; ``quiet``: a reader that
    says problems itself (the CLI) rather than warn."""

    keyring: Keyring
    directory: Optional[Path] = None  # the disk tier's folder (None: no disk tier)
    max_disk_bytes: Optional[int] = DEFAULT_MAX_BYTES
    redis_url: Optional[str] = None  # the shared tier's server (None: no shared tier)
    redis_prefix: Optional[str] = None
    redis_ttl: Any = None
    timeout: Optional[float] = None  # a server's answer (None: the tier's default)
    quiet: bool = False


_KINDS: Dict[str, Type[Tier]] = {"disk": DiskTier, "shared": RedisTier}


def register_tier(name: str, kind: Type[Tier]) -> None:
    """Make `kind` (a `Tier` class with ``from_settings``) a tier named `name`."""
    if not _a_tier_kind(kind):
        raise TypeError(f"tier {name!r}: {kind!r} is no Tier class with a from_settings(settings) classmethod; give "
                        "it one that returns the tier, or None where the settings configure none")
    _KINDS[name] = kind


def _a_tier_kind(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, Tier) and callable(getattr(kind, "from_settings", None))


def tier_kind(name: str) -> Type[Tier]:
    """The tier class `name` names: a registered name, or "module:Class"."""
    if name in _KINDS:
        return _KINDS[name]
    kind = import_named(name, "tier", f"is unknown; use one of {', '.join(sorted(_KINDS))}, or name a class "
                                      "as 'module:Class'")
    if not _a_tier_kind(kind):
        raise ValueError(f"tier {name!r} is no Tier class with a from_settings(settings) classmethod "
                         "(see gpucache_ext.store.registry)")
    return kind


def tier_names(text: Optional[str]) -> Tuple[str, ...]:
    """The tiers a setting such as ``GPUCACHE_TIERS`` lists ("disk,shared"); `DEFAULT_TIERS` where unset."""
    if text is None or not text.strip():
        return DEFAULT_TIERS
    return tuple(part.strip() for part in text.split(",") if part.strip())


def build_tiers(kinds: Sequence[Union[str, Tier]], settings: TierSettings
                ) -> Tuple[List[Tier], List[TierInfo]]:
    """The tiers `kinds` name (names, "module:Class", or tiers already made),
    in that order, and those the settings refused, as `tier_info` shows them."""
    tiers: List[Tier] = []
    refused: List[TierInfo] = []
    for kind in kinds:
        if isinstance(kind, Tier):
            tiers.append(kind)
            continue
        try:
            tier = tier_kind(kind).from_settings(settings)
        except TierRefused as exc:  # (a shared tier without a secret)
            if not settings.quiet:
                warnings.warn(str(exc), SecurityWarning, stacklevel=4)
            refused.append(TierInfo(exc.name, exc.location, signed=False, used=False, note=exc.why))
            continue
        if tier is not None:
            tiers.append(tier)
    return tiers, refused


def shared_settings(redis_url: Optional[str], **overrides) -> TierSettings:
    """Settings for the shared tier at `redis_url`, signed as a compile here signs (the environment's secrets)."""
    return TierSettings(keyring=tier_settings.keyring(), redis_url=redis_url, **overrides)
