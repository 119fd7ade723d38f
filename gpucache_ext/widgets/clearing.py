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

from typing import Dict, Iterable, Optional, Tuple, Union

import ipywidgets as W

from ..keys.stagespec import ALL_STAGES
from ..queries.clearing import (EVERY_STAGE as _EVERY_STAGE, MEMORY_ONLY as _MEMORY_ONLY, clear_stage,
                                clear_tiers, describe_tier, persistent_tiers, plan_clear, tier_label)
from ..keys.reasons import and_join
from ..views.markup import esc


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

    def _persistent(self):
        """The cache's persistent tiers by name, in its order."""
        return persistent_tiers(self.cache)

    def _describe(self, name: str) -> str:
        """A tier named as the inspector shows it: "memory", "disk (/path)"..."""
        return describe_tier(self.cache, name)

    def _update_clear_tiers(self) -> None:
        """The "from" choices: memory only, memory and each persistent tier, memory and all of them."""
        names = list(self._persistent())
        options = [("memory only", _MEMORY_ONLY)]
        options += [(f"memory and {self._describe(name)}", ("memory", name)) for name in names]
        if len(names) > 1:
            options.append((f"memory, {and_join([self._describe(name) for name in names])}",
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
        """`tiers` as the cache's tier names (`gpucache_ext.queries.clearing.clear_tiers`)."""
        return clear_tiers(self.cache, tiers)

    def _stage(self, stage: Optional[str]) -> Optional[str]:
        """The stage to clear: None for every stage (None, "" or "all"); ValueError for no stage."""
        return clear_stage(stage)

    def request_clear(self, stage: Optional[str] = None,
                      tiers: Union[str, Iterable[str], None] = _MEMORY_ONLY) -> bool:
        """What the "Clear stage" button does: clear `stage` from memory at
        once; where `tiers` names a persistent tier holding the stage, show
        the confirmation (the tiers and the entries each will lose) instead,
        and clear only on `confirm_clear`.  True if it cleared now."""
        plan = plan_clear(self.cache, stage, tiers)
        if not plan.persistent:
            self.clear(plan.stage, plan.names)
            return True
        self._pending_clear = (plan.stage, plan.names)
        self.clear_question.value = f'<span role="alert" class="gpucache-warn">{esc(plan.question())}</span>'
        self.clear_confirm.layout.display = None
        self._set_status(f"clear {plan.what}: waiting for Confirm or Cancel")
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
        plan = plan_clear(self.cache, stage, tiers)
        self._drop_pending()
        outcome = plan.run()
        self._refresh_all()
        self._set_status(outcome.text, error=outcome.error)
        return outcome.dropped


__all__ = ["InspectorClearing", "tier_label"]
