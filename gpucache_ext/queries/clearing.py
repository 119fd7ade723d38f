"""What clearing a stage from some tiers would drop, and doing it.

The inspector's "Clear stage" action and ``%gpucache clear`` both clear
this process's memory alone unless the persistent tiers are named; those
are shared by every notebook and process that uses them, so both ask first,
naming each tier (by where it is) and how many entries it will lose.  The
plan (`plan_clear`) is what they ask about, and `ClearPlan.run` what they do
once confirmed; the words are the same in both places.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, Iterable, Optional, Tuple, Union

from ..keys.stagespec import ALL_STAGES
from ..keys.reasons import and_join
from ..units import entries_phrase

EVERY_STAGE = "all"  # the stage to clear: every stage
MEMORY_ONLY = ("memory",)  # the tiers cleared unless others are named: this process's memory alone
EVERY_TIER = "all"  # memory and every persistent tier


def tier_label(tier) -> str:
    """A persistent tier named with where it is
    (``disk (/home/me/.cache/gpucache)``, ``shared (redis://host:6379/0 prefix gpucache)``)."""
    location = str(getattr(tier, "location", "") or "")
    return tier.name if not location or location == tier.name else f"{tier.name} ({location})"


def persistent_tiers(cache) -> "OrderedDict[str, list]":
    """The cache's persistent tiers by name, in its order."""
    found: "OrderedDict[str, list]" = OrderedDict()
    for tier in cache.tiers:
        found.setdefault(tier.name, []).append(tier)
    return found


def describe_tier(cache, name: str) -> str:
    """A tier by name as users read it: "memory", "disk (/path)"..."""
    if name == "memory":
        return "memory"
    return ", ".join(tier_label(tier) for tier in persistent_tiers(cache).get(name, ())) or name


def clear_stage(stage: Optional[str]) -> Optional[str]:
    """The stage to clear: None for every stage (None, "" or "all"); ValueError for no stage."""
    if stage in (None, "", EVERY_STAGE):
        return None
    if stage not in ALL_STAGES:
        raise ValueError(f"stage={stage!r} is invalid; use one of {', '.join(ALL_STAGES)}, or {EVERY_STAGE!r}")
    return stage


def clear_tiers(cache, tiers: Union[str, Iterable[str], None]) -> Tuple[str, ...]:
    """`tiers` as the cache's tier names, in its order ("memory" first; None
    or "all": every tier); ValueError naming the choices for a name it does not have."""
    if tiers is None or tiers == EVERY_TIER:
        return cache.tier_names()
    given = (tiers,) if isinstance(tiers, str) else tuple(tiers)
    try:
        if given:
            return cache.tier_names(given)
        message = f"tiers={tiers!r} is invalid: it names no tier"
    except ValueError as exc:
        message = str(exc)
    raise ValueError(f"{message} (or use {EVERY_TIER!r} for every tier)")


def _holding(cache, stage: Optional[str], names: Tuple[str, ...]) -> Tuple[str, ...]:
    """The tiers of `names` that hold `stage` (None: any stage)."""
    persistent = persistent_tiers(cache)
    return tuple(name for name in names if name == "memory" or any(
        stage is None or stage in tier.stages for tier in persistent.get(name, ())))


def _held(cache, stage: Optional[str], names: Tuple[str, ...]) -> Dict[str, int]:
    """How many entries of `stage` (None: every stage) each tier of `names` holds, as `stats` counts them."""
    stats = cache.stats()
    stages = ALL_STAGES if stage is None else (stage,)
    return {name: sum(stats[s].tiers[name].entries for s in stages if s in stats and name in stats[s].tiers)
            for name in names}


@dataclass(frozen=True)
class ClearOutcome:
    """What a clear dropped: entries per tier, and the sentence that says so
    (`error`: some entries are still there, or the tiers held nothing to clear)."""
    dropped: Dict[str, int]
    text: str
    error: bool = False


@dataclass(frozen=True)
class ClearPlan:
    """Clearing `stage` (None: every stage) from the tiers `names`."""
    cache: object
    stage: Optional[str]
    names: Tuple[str, ...]

    @property
    def what(self) -> str:
        return self.stage or "every stage"

    @property
    def holding(self) -> Tuple[str, ...]:
        """The chosen tiers that hold the stage."""
        return _holding(self.cache, self.stage, self.names)

    @property
    def persistent(self) -> Tuple[str, ...]:
        """The chosen persistent tiers that hold the stage: clearing them needs a confirmation."""
        return tuple(name for name in self.holding if name != "memory")

    def held(self) -> Dict[str, int]:
        """How many entries each chosen tier holding the stage would lose."""
        return _held(self.cache, self.stage, self.holding)

    def question(self) -> str:
        """What to confirm: the tiers, the entries each loses, and that others share them."""
        held = self.held()
        persistent = list(self.persistent)
        several = len(persistent) > 1
        describe = lambda name: describe_tier(self.cache, name)  # noqa: E731
        return (f"Clear {self.what} from {and_join([describe(name) for name in held])}? "
                "This drops " + and_join([f"{entries_phrase(count)} from {describe(name)}"
                                          for name, count in held.items()])
                + f". The {and_join(persistent)} tier{'s are' if several else ' is'} shared by every notebook "
                f"and process that uses {'them' if several else 'it'}: this cannot be undone.")

    def run(self) -> ClearOutcome:
        """Clear now (counters are kept) and say what was dropped from each tier,
        what is still there and what was not chosen, so kept."""
        cache, stage = self.cache, self.stage
        describe = lambda name: describe_tier(cache, name)  # noqa: E731
        holding = self.holding
        kept_names = tuple(name for name in _holding(cache, stage, tuple(persistent_tiers(cache)))
                           if name not in self.names)
        before = _held(cache, stage, holding + kept_names)
        cache.clear(stage, tiers=self.names)
        after = _held(cache, stage, holding)
        dropped = {name: max(0, before[name] - after[name]) for name in holding}
        if holding:
            parts = [f"{count} from {describe(name)}" for name, count in dropped.items()]
            parts[0] = f"{entries_phrase(dropped[holding[0]])} dropped from {describe(holding[0])}"
            text = f"cleared {self.what}: {', '.join(parts)}"
        else:  # (a persistent tier alone, for a stage it does not hold)
            text = f"nothing cleared: {and_join([describe(name) for name in self.names])} holds no {stage} entries"
        left = [f"{after[name]} still in {describe(name)} (not removable, or written meanwhile)"
                for name in holding if after[name]]
        kept = [f"{before[name]} in {describe(name)}" for name in kept_names if before[name]]
        if left:
            text += "; " + "; ".join(left)
        if kept:
            text += f"; not chosen, so kept: {and_join(kept)}"
        return ClearOutcome(dropped, text, error=bool(left))


def plan_clear(cache, stage: Optional[str] = None,
               tiers: Union[str, Iterable[str], None] = MEMORY_ONLY) -> ClearPlan:
    """The plan to clear `stage` (None or "all": every stage) from `tiers`
    (memory only by default; names of the cache's tiers, or "all");
    ValueError naming the choices for a stage or tier it does not know."""
    return ClearPlan(cache, clear_stage(stage), clear_tiers(cache, tiers))


__all__ = ["ClearOutcome", "ClearPlan", "EVERY_STAGE", "EVERY_TIER", "MEMORY_ONLY", "clear_stage",
           "clear_tiers", "describe_tier", "persistent_tiers", "plan_clear", "tier_label"]
