"""The cache inspector: a live ipywidgets view of a `KernelCache` (the controller).

``gpucache_ext.inspector(cache=None)`` (what ``%gpucache`` shows) returns one
widget per cache.  It shows

* per stage (typing, llvm, ptx, cubin) hits, misses, hit rate, hits cut off
  (ptx and cubin found because the stage before was rebuilt to the same bytes),
  entries, bytes, evictions, compile time spent and saved, and the same per tier;
* the persistent tiers: where each is, whether its entries are signed (or
  why it is not used), what it refused by reason, and entries a previous
  secret signed (`gpucache_ext.views.tier_security_html`);
* a small chart of hits and misses per stage over the session's cells;
* the cached entries (kernel, signature, config, stage, token, tier, size,
  age, why it was built), filtered by kernel and stage; each kernel definition
  under one name through its versions, definitions that share a name told
  apart (``a.axpy`` and ``b.axpy``; ``axpy@In[5]`` for one of two cells
  defining ``axpy``, see `gpucache_ext.pipeline.definitions`);
* the selected entry: its config and which stages read each field, its token
  components, its artifacts (typed IR, NVVM IR, PTX, SASS with its
  architecture, or why nvdisasm cannot read it, the link log), its resources,
  and why it was built, side by side with the nearest other entry of the same
  kernel and stage;
* for a ptx or cubin entry, "compare with": another entry of the same kernel
  and stage, and the two entries' PTX or SASS side by side
  (`gpucache_ext.queries.compare_entries`);
* the selected entry's kernel, where it has several cubins: each variant's
  resources side by side (per target and config), and how they moved between
  variants one config field apart (`gpucache_ext.queries.resource_moves`);
* actions: clear a stage, evict the entry, recompile it.  Clearing drops the
  stage from this process's memory only, unless the persistent tiers are
  chosen too ("from": each named by where it is); those are shared by every
  notebook that uses them, so that first asks, naming the tiers and how many
  entries each will lose, and only Confirm deletes (``Inspector.clear`` does
  it at once from code: ``clear("cubin", tiers=("memory", "disk"))``; see
  `gpucache_ext.widgets.clearing`).

The widget refreshes after every cell (an IPython ``post_run_cell`` hook,
installed by ``%load_ext gpucache_ext`` or by the first ``inspector()``) and
after each action; every place it is displayed shows the same model, so all
of them update.  Displayed where widgets cannot render (a terminal IPython, an
exported notebook, a frontend without the widget manager) it falls back to
plain text and static HTML (`_repr_mimebundle_`), as `CacheSnapshot` does.

The widget reads the cache (stats, entries, and the core's queries: nearest
entry, what an entry built) and hands what it read to the pure renderers of
`gpucache_ext.views`; it keeps no copy of any core algorithm.
"""

from __future__ import annotations

import sys
import time
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Tuple

import ipywidgets as W

from ..backends import chain_of
from ..keys.stagespec import ALL_STAGES, STAGE_SPEC
from ..pipeline.artifacts import Artifact
from .clearing import InspectorClearing
from ..queries import (COMPARED_STAGES, Sources, built_from, comparable_entries, compare_entries, fatbin_rows,
                       nearest_entry, resource_moves, resource_rows, variant_occupancy)
from ..keys.reasons import own
from ..units import format_seconds
from ..toolchain.sass import Sass, SassUnavailable, disassembly
from ..pipeline.history import CellHistory
from ..keys.tokens import short_token
from ..views.chart import chart_svg
from ..views.compare import compare_choices, comparison_html, comparison_note_html
from ..views.entries import ENTRY_COLUMNS, MAX_LIST_ROWS, entry_cells, entry_line, entry_widths, kernel_labels
from ..views.entry import EntryDetail, entry_html
from ..views.markup import esc, short_kernel
from ..views.security import tier_security_html
from ..views.snapshot import CacheSnapshot, StatsView
from ..views.style import STYLE
from ..views.summary import saved_seconds, storage_summary, summary_html
from ..views.variants import resource_variants_html
from .. import memos

sass_cache: "OrderedDict[str, Tuple[Optional[Sass], Optional[str]]]" = memos.memo(
    "widgets.inspector.sass_cache", OrderedDict())


def sass_view(token: str, cubin: bytes) -> Tuple[Optional[Sass], Optional[str]]:
    """(the cubin's `Sass`, None) via nvdisasm, or (None, a one-line note why not)."""
    if token in sass_cache:
        return sass_cache[token]
    try:
        found = (disassembly(cubin), None)
    except SassUnavailable as exc:  # a missing nvdisasm, or one that cannot read the arch, must not break the view
        found = (None, f"SASS: {exc}")
    sass_cache[token] = found
    while len(sass_cache) > 32:
        sass_cache.popitem(last=False)
    return found


def sass_of(token: str, cubin: bytes) -> Tuple[Optional[str], Optional[str]]:
    """(SASS text, None) via nvdisasm, or (None, a one-line note why not)."""
    sass, note = sass_view(token, cubin)
    return (sass.text if sass is not None else None), note


# The typing inputs that are not the kernel's own: what it was typed for and with which config.
def entry_detail(cache, stage: str, token: str, kernel_label: Optional[str] = None) -> Optional[EntryDetail]:
    """Read what the entry view shows of one entry (None if it is gone)."""
    entry = cache.entry(stage, token)
    if entry is None:
        return None
    rows = [row for row in cache.entries(stage=stage, kernel=entry.kernel) if row.token == token]
    nearest, names = nearest_entry(cache, stage, token)
    artifact = entry.artifact if isinstance(entry.artifact, Artifact) else None  # (typing's is numba's)
    if not STAGE_SPEC[stage].per_target:  # (a fatbin) its cubins' resources, by architecture
        downstream = tuple(fatbin_rows(cache, entry)) if artifact is not None else ()
    elif artifact is not None and artifact.link_log is not None:  # (it was linked) its own
        downstream = ()
    else:
        downstream = tuple(built_from(cache, stage, token, entry.kernel))
    sass = note = None
    if artifact is not None and artifact.machine_code is not None:
        sass, note = sass_view(token, artifact.machine_code)
    return EntryDetail(stage, entry, tuple(rows[0].tiers) if rows else (), nearest, tuple(names),
                       downstream, sass.text if sass else None, note, kernel_label,
                       sass_label=sass.label if sass else None)


def variants_html(cache, kernel: str, label: Optional[str] = None, source: Optional[str] = None,
                  place: Optional[str] = None, labels: Optional[Dict[Tuple[str, str], str]] = None) -> str:
    """The "resources across variants" section of one version of a kernel
    definition (`kernel` a qualified name, `place` where it was defined):
    its cubin variants side by side and how their figures moved; "" where
    fewer than two are cached.  `source` (`Sources`): the variants built
    from that version (its code and what it reads), in whichever cell they
    were built first: the same code compiles to the same entries in any
    cell (no place is in a token), so a kernel re-declared in a new cell
    and swept there has the variants the earlier cells built too, as the
    sweep's report shows them.  Where the rows were built in several cells,
    a "built in" column names each (as `labels`, `kernel_labels`, name its
    definition: ``In[7]``).  Without a `source` that any cached cubin has,
    the variants of `place`'s definition.

    A read-only view of cached entries: nothing is compiled to show it.  Where
    a live kernel of this definition compiles through `cache`, each row is
    re-checked against that kernel's inputs now (`earlier_rows`): one built
    from an earlier state (a global, a device function changed since) is
    marked ``EARLIER``, with what changed.  With no live kernel (another
    process's entries, a kernel deleted) nothing tells which state is current,
    and rows are shown unmarked."""
    rows = resource_rows(cache, kernel)
    same = [row for row in rows if source is not None and row.source == source]
    rows = same or [row for row in rows if row.place == place]
    if len(rows) < 2:
        return ""
    built = {row.token: (labels or {}).get(("cubin", row.token), "").partition("@")[2] or None for row in rows}
    if len(set(built.values())) > 1:  # (the section is of the code, not of one cell's definition)
        label = (label or short_kernel(kernel)).partition("@")[0]
    return resource_variants_html(label or short_kernel(kernel), rows, resource_moves(rows), variant_occupancy(rows),
                                  earlier_rows(cache, rows), built)


def earlier_rows(cache, rows) -> Dict[str, Tuple[str, ...]]:
    """Of `rows` (`ResourceRow`s of cached cubins), those built from another
    state of their kernel's inputs than a live kernel's now: {cubin token:
    what changed, as the cache explains a miss ("global K 2.5 -> 3.25")}.
    The state is the source `Sources` tells entries apart by (code, globals,
    device functions, toolchain), compared with what the live kernels of
    `cache` would type from now (`Kernel.typing_inputs`)."""
    registry = sys.modules.get("gpucache_ext.launch.registry")  # (no Kernel exists before it is imported)
    if registry is None or not rows:
        return {}
    from ..queries import source_digest, miss_reasons

    current: Dict[Tuple[str, Optional[str], str], Any] = {}
    definitions = {(row.kernel, row.place) for row in rows}
    for live in registry.live_kernels(cache):
        current.update(live.typing_inputs(definitions))
    # a row another cell built first (the same code, re-declared) is checked against the live kernel
    # of the one other definition the rows have, where there is one
    alike: Dict[Tuple[str, str], List[Any]] = {}
    for (kernel, _, signature), now in current.items():
        alike.setdefault((kernel, signature), []).append(now)
    found = {}
    for row in rows:
        now = current.get((row.kernel, row.place, row.signature))
        if now is None and len(alike.get((row.kernel, row.signature), ())) == 1:
            now = alike[(row.kernel, row.signature)][0]
        if now is None or row.source is None or source_digest(now) == row.source:
            continue
        before = _typing_components(cache, row.token)
        reasons = () if before is None else tuple(own(miss_reasons("typing", now, before)))
        found[row.token] = reasons or ("its inputs changed",)
    return found


def _typing_components(cache, cubin_token: str) -> Optional[Dict[str, Any]]:
    """What the typing of a cached cubin was made of (cubin -> ptx -> llvm
    or mlir, its chain's entry stage, which carries its typing's components);
    None where an entry is gone."""
    entry = cache.entry("cubin", cubin_token)
    ptx = cache.entry("ptx", entry.upstream) if entry is not None and entry.upstream else None
    built_from = chain_of(ptx.config_fields).upstream("ptx") if ptx is not None else None
    llvm = cache.entry(built_from, ptx.upstream) if ptx is not None and ptx.upstream else None
    typing = llvm.components.get("typing") if llvm is not None else None
    return dict(typing.parts) if typing is not None and typing.parts else None


def snapshot(cache, history: Optional[CellHistory] = None) -> CacheSnapshot:
    """The inspector's numbers now, as a static `CacheSnapshot`."""
    rows = cache.entries()
    labels = kernel_labels(rows, cache.places)
    return CacheSnapshot(cache.stats(), history.points if history is not None else (), rows, time.time(),
                         labels)


def stats_view(cache) -> StatsView:
    """``%gpucache stats``: the inspector's summary of `cache`."""
    return StatsView(cache.stats())


# ---------------------------------------------------------------------------
# The widget


_ALL = "\u2014 all \u2014"
_NO_COMPARISON = "\u2014 none \u2014"


class Inspector(InspectorClearing, W.VBox):
    """A live view of a `KernelCache`: per-stage numbers, a chart, the entries,
    one entry in detail, and actions.  Use `inspector(cache)` to get the shared one."""

    def __init__(self, cache, history: Optional[CellHistory] = None, siblings=None, **kwargs):
        super().__init__(**kwargs)
        self.cache = cache
        # the per-cell chart's data (a session's, else this widget's own from now on)
        self.history = history if history is not None else CellHistory(cache.lookups())
        self._siblings = siblings  # () -> the open inspectors to refresh after an action
        self._selected: Optional[Tuple[str, str]] = None
        self._updating = False
        self._rows: List[Dict[str, Any]] = []
        self._sources = Sources()
        self._labels: Dict[Tuple[str, str], str] = {}
        self._source_of: Dict[Tuple[str, str], Optional[str]] = {}

        self.header = W.HTML()
        self.summary = W.HTML()
        self.tier_view = W.HTML()
        self.chart = W.HTML()
        self.kernel_filter = W.Dropdown(description="kernel", options=[(_ALL, "")], value="",
                                        tooltip="Show the entries of one kernel",
                                        layout=W.Layout(width="auto"))
        self.stage_filter = W.Dropdown(description="stage", options=[(_ALL, "")] + [(s, s) for s in ALL_STAGES],
                                       value="", tooltip="Show the entries of one stage",
                                       layout=W.Layout(width="auto"))
        self.count = W.HTML()
        self.entries_head = W.HTML()
        self.entries_list = W.Select(options=[], rows=8, layout=W.Layout(width="auto"),
                                     description="", tooltip="Cached entries; select one to see it below")
        self.evict_button = W.Button(description="Evict entry", icon="trash", button_style="warning",
                                     tooltip="Remove the selected entry from every tier", disabled=True)
        self.recompile_button = W.Button(description="Recompile entry", icon="refresh",
                                         tooltip="Compile the selected entry again from scratch, from the "
                                                 "inputs it was built from", disabled=True)
        self.recompile_note = W.HTML()  # why Recompile cannot rebuild the selected entry, if it cannot
        self._make_clear_controls()
        self.status = W.HTML()
        self.entry_view = W.HTML()
        self.variants_view = W.HTML()
        self._variants_shown: Optional[tuple] = None  # (kernel, its cubin tokens, source) shown
        self.compare_with = W.Dropdown(description="compare with", options=[(_NO_COMPARISON, "")], value="",
                                       tooltip="Another entry of this kernel and stage: the two entries' PTX "
                                               "or SASS side by side",
                                       # (a label as wide as its words: the default 80 px cut it to "compare ...")
                                       style={"description_width": "initial"},
                                       layout=W.Layout(width="auto", max_width="100%", display="none"))
        self.compare_view = W.HTML()
        self._comparison: Tuple[Any, str] = (None, "")  # (which pair, its HTML): drawn once per pair
        self._compare_same: Dict[str, str] = {}  # an identical duplicate's token -> its choice's

        for widget, cls in ((self.header, "gpucache-header"), (self.summary, "gpucache-summary"),
                            (self.tier_view, "gpucache-tiers"),
                            (self.chart, "gpucache-chart-box"), (self.count, "gpucache-count"),
                            (self.entries_head, "gpucache-entries-head-box"),
                            (self.entries_list, "gpucache-entries"), (self.status, "gpucache-status"),
                            (self.entry_view, "gpucache-entry-view"),
                            (self.variants_view, "gpucache-variants"),
                            (self.evict_button, "gpucache-evict"),
                            (self.recompile_button, "gpucache-recompile"),
                            (self.clear_button, "gpucache-clear"), (self.kernel_filter, "gpucache-kernel-filter"),
                            (self.stage_filter, "gpucache-stage-filter"),
                            (self.clear_stage, "gpucache-clear-stage"),
                            (self.clear_tiers, "gpucache-clear-tiers"),
                            (self.clear_confirm, "gpucache-clear-confirm"),
                            (self.clear_question, "gpucache-clear-question"),
                            (self.clear_confirm_button, "gpucache-clear-confirm-button"),
                            (self.clear_cancel_button, "gpucache-clear-cancel"),
                            (self.compare_with, "gpucache-compare-with"),
                            (self.compare_view, "gpucache-compare-view")):
            widget.add_class(cls)

        self.children = [
            self.header,
            self.summary,
            self.tier_view,
            W.HTML("<h4>Hits and misses per cell</h4>"),
            self.chart,
            W.HTML("<h4>Entries</h4>"),
            W.HBox([self.kernel_filter, self.stage_filter, self.count],
                   layout=W.Layout(flex_flow="row wrap", align_items="center")),
            # one box scrolls the header and the list together where the rows are wider than the view
            W.VBox([self.entries_head, self.entries_list], layout=W.Layout(width="100%"),
                   _dom_classes=("gpucache-entries-scroll",)),
            W.HBox([self.evict_button, self.recompile_button, self.clear_stage, self.clear_tiers,
                    self.clear_button], layout=W.Layout(flex_flow="row wrap", align_items="center")),
            self.recompile_note,
            self.clear_confirm,
            self.status,
            self.entry_view,
            self.variants_view,
            self.compare_with,
            self.compare_view,
        ]
        self.add_class("gpucache-inspector")

        self.kernel_filter.observe(self._on_filter, names="value")
        self.stage_filter.observe(self._on_filter, names="value")
        self.entries_list.observe(self._on_select, names="value")
        self.compare_with.observe(self._on_compare, names="value")
        self.evict_button.on_click(lambda _: self.evict_selected())
        self.recompile_button.on_click(lambda _: self.recompile_selected())
        self.clear_stage.observe(self._on_clear_choice, names="value")
        self.clear_tiers.observe(self._on_clear_choice, names="value")
        self.clear_button.on_click(lambda _: self.request_clear(self.clear_stage.value, self.clear_tiers.value))
        self.clear_confirm_button.on_click(lambda _: self.confirm_clear())
        self.clear_cancel_button.on_click(lambda _: self.cancel_clear())
        self.refresh()

    # -- reading -----------------------------------------------------------------
    def refresh(self) -> None:
        """Read the cache again and update every part of the view."""
        try:
            self._refresh()
        except Exception as exc:  # the view must not break a cell
            self._set_status(f"could not refresh: {type(exc).__name__}: {exc}", error=True)

    def _refresh(self):
        stats = self.cache.stats()
        saved = saved_seconds(stats)
        points = self.history.points
        rows = self.cache.entries()
        kernels = len({r.kernel for r in rows})
        self.header.value = (
            f'{STYLE}<h3>gpucache inspector</h3><p class="gpucache-muted">{len(rows)} entries of '
            f'{kernels} kernel{"s" if kernels != 1 else ""}, {esc(storage_summary(stats))}; updated '
            f'{time.strftime("%H:%M:%S")}{" after cell " + esc(points[-1]["label"]) if points else ""}</p>')
        self.summary.value = summary_html(stats, saved)
        self.tier_view.value = tier_security_html(stats.tiers)
        self.chart.value = chart_svg(points)
        self._rows = rows
        self._source_of = self._sources.of(self.cache, [{"stage": r.stage, "token": r.token} for r in rows])
        self._labels = kernel_labels(rows, self.cache.places)
        self._update_clear_tiers()
        self._update_entries()

    def _update_entries(self):
        rows = self._rows
        now = time.time()
        kernels = sorted({r.kernel for r in rows}, key=short_kernel)
        short = [short_kernel(k) for k in kernels]
        options = [(_ALL, "")] + [(s if short.count(s) == 1 else k, k) for s, k in zip(short, kernels)]
        self._updating = True
        try:
            wanted = self.kernel_filter.value
            if list(self.kernel_filter.options) != options:
                self.kernel_filter.options = options
            self.kernel_filter.value = wanted if wanted in kernels else ""
            kernel, stage = self.kernel_filter.value, self.stage_filter.value
            shown = [r for r in rows if (not kernel or r.kernel == kernel)
                     and (not stage or r.stage == stage)]
            listed = shown[:MAX_LIST_ROWS]
            cells = [entry_cells(r, now, self._labels.get((r.stage, r.token))) for r in listed]
            widths = entry_widths(cells)
            # (the listbox keeps the labels' spaces, so the columns line up)
            self.entries_head.value = ('<div class="gpucache-entries-head" aria-hidden="true">'
                                       + esc(entry_line({c: c for c in ENTRY_COLUMNS}, widths))
                                       + "</div>")
            list_options = [(entry_line(c, widths), (r.stage, r.token)) for c, r in zip(cells, listed)]
            values = [value for _, value in list_options]
            selected = self._selected if self._selected in values else (values[0] if values else None)
            if list(self.entries_list.options) != list_options:
                self.entries_list.options = list_options
            self.entries_list.value = selected
            self._selected = selected
            total = len(rows)
            more = f" (first {len(listed)} listed)" if len(shown) > len(listed) else ""
            self.count.value = (f'<span class="gpucache-muted">{len(shown)} of {total} entries'
                                f'{more}</span>')
        finally:
            self._updating = False
        self._show_selected()

    def _show_selected(self):
        selected = self._selected
        self.evict_button.disabled = selected is None
        # Recompile rebuilds the entry's own inputs; where this process does
        # not hold them it says so before anything is done
        problem = self.cache.recompile_problem(selected[1]) if selected is not None else None
        self.recompile_button.disabled = selected is None or problem is not None
        self.recompile_button.tooltip = problem or ("Compile the selected entry again from scratch, from the "
                                                    "very inputs it was built from (code, globals, device "
                                                    "functions, signature and config), even if they changed since")
        self.recompile_note.value = (f'<p class="gpucache-muted">Recompile: {esc(problem)}</p>'
                                     if problem is not None else "")
        self._update_compare()
        if selected is None:
            self.entry_view.value = ('<p class="gpucache-muted">Select an entry above to see its '
                                     'config, token components, artifacts and why it was built.</p>')
            self._show_variants(None)
            return
        self.entry_view.value = entry_html(entry_detail(self.cache, *selected, self._labels.get(selected)),
                                           time.time(), self.cache.places)
        self._show_variants(selected)

    def _show_variants(self, selected: Optional[Tuple[str, str]]) -> None:
        """The selected entry's kernel's cubin variants, read again only when they change."""
        row = next((r for r in self._rows if (r.stage, r.token) == selected), None)
        kernel, place = (row.kernel, row.place) if row is not None else (None, None)
        # (every place's: the selected version's variants may have been built first in another cell)
        tokens = tuple(r.token for r in self._rows if r.stage == "cubin" and r.kernel == kernel)
        source = self._source_of.get(selected)
        # (and once per cell: a row's state is re-checked against the live kernels' inputs, see `earlier_rows`)
        registry = sys.modules.get("gpucache_ext.launch.registry")
        generation = registry.generation if registry is not None else None
        labels = tuple(self._labels.get(("cubin", token)) for token in tokens)
        shown = ((kernel, place, tokens, labels, source, generation) if kernel is not None and len(tokens) > 1
                 else None)
        if shown != self._variants_shown or shown is None:
            self.variants_view.value = "" if shown is None else variants_html(
                self.cache, kernel, self._labels.get(selected), source, place, self._labels)
            self._variants_shown = shown

    def _update_compare(self):
        """The "compare with" choices for the selected entry (ptx and cubin only), and the comparison."""
        selected = self._selected
        others = comparable_entries(self.cache, *selected) if selected and selected[0] in COMPARED_STAGES else []
        shown = next((row for row in self._rows if (row.stage, row.token) == selected), None)
        choices, self._compare_same = compare_choices(others, self._labels, self._digest_of(selected), shown)
        options = [(_NO_COMPARISON, "")] + choices
        self._updating = True
        try:
            wanted = self.compare_with.value
            if list(self.compare_with.options) != options:
                self.compare_with.options = options
            self.compare_with.value = wanted if wanted in {token for _, token in options} else ""
        finally:
            self._updating = False
        self.compare_with.layout.display = None if others else "none"
        self._show_comparison()

    def _show_comparison(self):
        other = self.compare_with.value
        if self._selected is None or not other:
            self.compare_view.value = ""
            return
        pair = (self._selected, other)
        if self._comparison[0] != pair:
            stage, token = self._selected
            try:
                shown = comparison_html(compare_entries(self.cache, stage, token, other))
            except ValueError as exc:
                shown = comparison_note_html(f"cannot compare: {exc}")
            self._comparison = (pair, shown)
        self.compare_view.value = self._comparison[1]

    def _digest_of(self, selected):
        """The digest of an entry's artifact at the selected entry's stage
        (what tells an identical duplicate among the "compare with" choices)."""
        def digest(token: str) -> Optional[str]:
            entry = self.cache.entry(selected[0], token)
            return entry.digest if entry is not None else None

        return digest

    def _on_compare(self, change):
        if not self._updating:
            self._show_comparison()

    def compare(self, token: str) -> None:
        """Show the selected entry side by side with entry `token` (same
        kernel and stage; an identical duplicate of a choice: that choice)."""
        self.compare_with.value = self._compare_same.get(token, token)

    def _on_filter(self, change):
        if not self._updating:
            self._update_entries()

    def _on_select(self, change):
        if self._updating:
            return
        self._selected = change["new"]
        self._show_selected()

    @property
    def selected(self) -> Optional[Tuple[str, str]]:
        """The selected entry as (stage, token), or None."""
        return self._selected

    def select(self, stage: str, token: str) -> None:
        """Select an entry (clearing filters that would hide it)."""
        self._selected = (stage, token)
        self._updating = True
        try:
            self.kernel_filter.value = ""
            self.stage_filter.value = ""
        finally:
            self._updating = False
        self._update_entries()

    # -- actions -----------------------------------------------------------------
    def evict_selected(self) -> bool:
        if self._selected is None:
            self._set_status("select an entry to evict", error=True)
            return False
        stage, token = self._selected
        found = self.cache.evict(stage, token)
        # keep the place in the list: the row that followed it, or the one before if it was last
        self._selected = self._neighbour(self._selected)
        self._refresh_all()
        self._set_status(f"evicted {stage} entry {short_token(token)}" if found
                         else f"{stage} entry {short_token(token)} was already gone")
        return found

    def _neighbour(self, value: Tuple[str, str]) -> Optional[Tuple[str, str]]:
        """The row after `value` in the list as shown (the previous one if it is
        last; None if it is the only one or not listed)."""
        values = [v for _, v in self.entries_list.options]
        if value not in values:
            return None
        index = values.index(value)
        rest = values[index + 1:] or values[:index][-1:]
        return rest[0] if rest else None

    def recompile_selected(self):
        if self._selected is None:
            self._set_status("select an entry to recompile", error=True)
            return None
        stage, token = self._selected
        try:
            result = self.cache.recompile(token)
        except KeyError as exc:
            message = exc.args[0] if exc.args else str(exc)
            self._set_status(f"cannot recompile: {message}", error=True)
            return None
        except Exception as exc:
            self._set_status(f"recompile failed: {type(exc).__name__}: {exc}", error=True)
            return None
        self.history.record("recompile", self.cache.lookups())
        done = result.stages.get(stage)
        if done is not None:
            self._selected = (stage, done.token)
        self._refresh_all()
        where = ("the same entry, from the inputs it was built from" if done is not None and done.token == token
                 else f"from the inputs it was built from, filed as {short_token(done.token)} (the toolchain "
                      "or numba's settings differ from then)" if done is not None else "")
        self._set_status(f"recompiled {short_kernel(result.kernel)} {result.signature_text} "
                         f"[{result.applied_summary()}] in {format_seconds(result.seconds)}"
                         + (f": {where}" if where else ""))
        return result

    def _refresh_all(self) -> None:
        """Refresh this inspector and every other open one of the same cache."""
        self.refresh()
        for widget in (self._siblings() if self._siblings is not None else ()):
            if widget is not self and widget.cache is self.cache:
                widget.refresh()

    def _set_status(self, text: str, error: bool = False) -> None:
        cls = "gpucache-status-error" if error else "gpucache-status-ok"
        self.status.value = f'<div role="status" aria-live="polite" class="{cls}">{esc(text)}</div>'

    # -- display -----------------------------------------------------------------
    def snapshot(self) -> CacheSnapshot:
        return snapshot(self.cache, self.history)

    def __repr__(self) -> str:
        return self.snapshot().text()

    def _repr_mimebundle_(self, include=None, exclude=None, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs) or {}
        snapshot = self.snapshot()
        bundle["text/plain"] = snapshot.text()
        bundle["text/html"] = snapshot.html()
        return bundle



def inspector(cache=None) -> Inspector:
    """The live inspector widget of `cache` (default: the magic's cache).

    In an IPython session with the extension loaded, the session's (see
    `gpucache_ext.ipython.session.Session.inspector`): the same widget for the same
    cache while it is open, refreshed after every cell.  Elsewhere a new
    widget, refreshed by its `refresh` method.
    """
    from ..defaults import current_session, default_cache

    session = current_session()
    if session is not None:
        return session.inspector(cache)
    return Inspector(default_cache() if cache is None else cache)
