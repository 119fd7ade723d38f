"""The inspector's "Clear stage" action: its controls, the confirmation it
asks before clearing a persistent tier, and `Inspector.clear`.

Clearing drops a stage from this process's memory only, unless the
persistent tiers are chosen too ("from": each named by where it is, see
`tier_label`); those are shared by every notebook that uses them, so the
button first asks, naming the tiers and how many entries each will lose, and
only Confirm deletes.  `InspectorClearing` is a part of `Inspector` (a
mixin): it reads the inspector's cache and reports on its status line.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Dict, Iterable, List, Optional, Tuple, Union

import ipywidgets as W

from ..config import ALL_STAGES
from ..views.markup import esc
from ..views.security import entries_phrase

_EVERY_STAGE = "all"  # the clear-stage choice for every stage
_MEMORY_ONLY = ("memory",)  # the clear-tiers choice by default: this process's memory alone
_EVERY_TIER = "all"  # `Inspector.clear(tiers=...)`: memory and every persistent tier


def tier_label(tier) -> str:
    """A persistent tier as the inspector names it: its name and where it is
    (``disk (/home/me/.cache/gpucache)``, ``shared (redis://host:6379/0 prefix gpucache)``)."""
    location = str(getattr(tier, "location", "") or "")
    return tier.name if not location or location == tier.name else f"{tier.name} ({location})"


def _and(parts: List[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


class InspectorClearing:
    """`Inspector`'s clearing: memory only by default; persistent tiers after a confirmation."""

    def _make_clear_controls(self) -> None:
        """The clear controls (stage, tiers, button) and the confirmation they may ask."""
        self.clear_stage = W.Dropdown(description="clear",
                                      options=[(s, s) for s in ALL_STAGES] + [("all stages", _EVERY_STAGE)],
                                      value="cubin", tooltip="The stage to clear",
                                      layout=W.Layout(width="auto"))
        self.clear_tiers = W.Dropdown(description="from", options=[("memory only", _MEMORY_ONLY)],
                                      value=_MEMORY_ONLY,
                                      tooltip="Where to clear: this process's memory only, or the persistent "
                                              "tiers too (every notebook that uses them shares them; asks first)",
                                      layout=W.Layout(width="auto", max_width="100%"))
        self.clear_button = W.Button(description="Clear stage", icon="eraser", button_style="danger",
                                     tooltip="Drop every entry of the chosen stage from the chosen tiers "
                                             "(persistent tiers: after you confirm)")
        # the confirmation asked before persistent tiers are cleared
        self.clear_question = W.HTML()
        self.clear_confirm_button = W.Button(description="Confirm", icon="check", button_style="danger",
                                             tooltip="Delete the entries named on the left")
        self.clear_cancel_button = W.Button(description="Cancel", icon="times", tooltip="Delete nothing")
        self.clear_confirm = W.VBox([self.clear_question,
                                     W.HBox([self.clear_confirm_button, self.clear_cancel_button])],
                                    layout=W.Layout(display="none"))
        self._pending_clear: Optional[Tuple[Optional[str], Tuple[str, ...]]] = None  # (stage, tiers) to confirm

    def _persistent(self) -> "OrderedDict[str, list]":
        """The cache's persistent tiers by name, in its order."""
        found: "OrderedDict[str, list]" = OrderedDict()
        for tier in self.cache.tiers:
            found.setdefault(tier.name, []).append(tier)
        return found

    def _describe(self, name: str) -> str:
        """A tier named as the inspector shows it: "memory", "disk (/path)"..."""
        if name == "memory":
            return "memory"
        return ", ".join(tier_label(tier) for tier in self._persistent().get(name, ())) or name

    def _update_clear_tiers(self) -> None:
        """The "from" choices: memory only, memory and each persistent tier, memory and all of them."""
        names = list(self._persistent())
        options = [("memory only", _MEMORY_ONLY)]
        options += [(f"memory and {self._describe(name)}", ("memory", name)) for name in names]
        if len(names) > 1:
            options.append((f"memory, {_and([self._describe(name) for name in names])}",
                            ("memory",) + tuple(names)))
        if list(self.clear_tiers.options) == options:
            return
        self._updating = True
        try:
            wanted = self.clear_tiers.value
            self.clear_tiers.options = options
            self.clear_tiers.value = wanted if wanted in {value for _, value in options} else _MEMORY_ONLY
        finally:
            self._updating = False
        self._drop_pending()  # what it asked about is no longer offered as it was

    def _tier_names(self, tiers: Union[str, Iterable[str], None]) -> Tuple[str, ...]:
        """`tiers` as the cache's tier names, in its order ("memory" first);
        ValueError naming the choices for a name it does not have."""
        if tiers is None or tiers == _EVERY_TIER:
            return self.cache.tier_names()
        given = (tiers,) if isinstance(tiers, str) else tuple(tiers)
        try:
            if given:
                return self.cache.tier_names(given)
            message = f"tiers={tiers!r} is invalid: it names no tier"
        except ValueError as exc:
            message = str(exc)
        raise ValueError(f"{message} (or use {_EVERY_TIER!r} for every tier)")

    def _holding(self, stage: Optional[str], names: Tuple[str, ...]) -> Tuple[str, ...]:
        """The tiers of `names` that hold `stage` (None: any stage)."""
        persistent = self._persistent()
        return tuple(name for name in names if name == "memory" or any(
            stage is None or stage in tier.stages for tier in persistent.get(name, ())))

    def _stage(self, stage: Optional[str]) -> Optional[str]:
        """The stage to clear: None for every stage (None, "" or "all"); ValueError for no stage."""
        if stage in (None, "", _EVERY_STAGE):
            return None
        if stage not in ALL_STAGES:
            raise ValueError(f"stage={stage!r} is invalid; use one of {', '.join(ALL_STAGES)}, or {_EVERY_STAGE!r}")
        return stage

    def _held(self, stage: Optional[str], names: Tuple[str, ...]) -> Dict[str, int]:
        """How many entries of `stage` (None: every stage) each tier of `names` holds, as `stats` counts them."""
        stats = self.cache.stats()
        stages = ALL_STAGES if stage is None else (stage,)
        return {name: sum(stats[s].tiers[name].entries for s in stages if name in stats[s].tiers)
                for name in names}

    def request_clear(self, stage: Optional[str] = None,
                      tiers: Union[str, Iterable[str], None] = _MEMORY_ONLY) -> bool:
        """What the "Clear stage" button does: clear `stage` from memory at
        once; where `tiers` names a persistent tier holding the stage, show
        the confirmation (the tiers and the entries each will lose) instead,
        and clear only on `confirm_clear`.  True if it cleared now."""
        stage = self._stage(stage)
        names = self._tier_names(tiers)
        persistent = [name for name in self._holding(stage, names) if name != "memory"]
        if not persistent:
            self.clear(stage, names)
            return True
        held = self._held(stage, self._holding(stage, names))
        self._pending_clear = (stage, names)
        several = len(persistent) > 1
        question = (f"Clear {stage or 'every stage'} from {_and([self._describe(name) for name in held])}? "
                    "This drops " + _and([f"{entries_phrase(count)} from {self._describe(name)}"
                                          for name, count in held.items()])
                    + f". The {_and(persistent)} tier{'s are' if several else ' is'} shared by every notebook "
                    f"and process that uses {'them' if several else 'it'}: this cannot be undone.")
        self.clear_question.value = f'<span role="alert" class="gpucache-warn">{esc(question)}</span>'
        self.clear_confirm.layout.display = None
        self._set_status(f"clear {stage or 'every stage'}: waiting for Confirm or Cancel")
        return False

    def confirm_clear(self) -> Optional[Dict[str, int]]:
        """Clear what the confirmation asked about (the "Confirm" button);
        the entries dropped per tier, or None if nothing was asked."""
        if self._pending_clear is None:
            self._set_status("nothing to confirm: choose a stage and where, then Clear stage", error=True)
            return None
        stage, names = self._pending_clear
        return self.clear(stage, names)

    def cancel_clear(self) -> None:
        """Drop the confirmation and delete nothing (the "Cancel" button)."""
        if self._pending_clear is not None:
            stage = self._pending_clear[0]
            self._drop_pending()
            self._set_status(f"clear {stage or 'every stage'} cancelled: nothing deleted")

    def _drop_pending(self) -> None:
        self._pending_clear = None
        self.clear_question.value = ""
        self.clear_confirm.layout.display = "none"

    def _on_clear_choice(self, change):
        if not self._updating and self._pending_clear is not None:  # it asked about another choice
            self.cancel_clear()

    def clear(self, stage: Optional[str] = None,
              tiers: Union[str, Iterable[str], None] = _MEMORY_ONLY) -> Dict[str, int]:
        """Drop every entry of `stage` (None or "all": every stage) from
        `tiers` at once (no confirmation: naming the tiers here is it).

        `tiers`: this process's memory only (default), or names of the
        cache's tiers ("memory", "disk", "shared"), or "all": memory and
        every persistent tier.  The persistent tiers are shared by every
        notebook and process that uses them.  Returns the entries dropped per
        tier (of those holding the stage); the status line says the same.
        Counters are kept."""
        stage = self._stage(stage)
        names = self._tier_names(tiers)
        self._drop_pending()
        holding = self._holding(stage, names)
        kept_names = tuple(name for name in self._holding(stage, tuple(self._persistent())) if name not in names)
        before = self._held(stage, holding + kept_names)
        self.cache.clear(stage, tiers=names)
        after = self._held(stage, holding)
        dropped = {name: max(0, before[name] - after[name]) for name in holding}
        self._refresh_all()
        if holding:
            parts = [f"{count} from {self._describe(name)}" for name, count in dropped.items()]
            parts[0] = f"{entries_phrase(dropped[holding[0]])} dropped from {self._describe(holding[0])}"
            text = f"cleared {stage or 'every stage'}: {', '.join(parts)}"
        else:  # (a persistent tier alone, for a stage it does not hold)
            text = f"nothing cleared: {_and([self._describe(name) for name in names])} holds no {stage} entries"
        left = [f"{after[name]} still in {self._describe(name)} (not removable, or written meanwhile)"
                for name in holding if after[name]]
        kept = [f"{before[name]} in {self._describe(name)}" for name in kept_names if before[name]]
        if left:
            text += "; " + "; ".join(left)
        if kept:
            text += f"; not chosen, so kept: {_and(kept)}"
        self._set_status(text, error=bool(left))
        return dropped


__all__ = ["InspectorClearing", "tier_label"]
