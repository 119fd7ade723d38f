"""The cache inspector widget, headless: drive cells in an in-process IPython
shell, read the widget tree's state (what a frontend would render), check the
numbers against `cache.stats()`, and press the buttons."""

import functools
import html
import re
from html.parser import HTMLParser

import pytest

import gpucache_ext
from gpucache_ext import KernelCache, widgets
from gpucache_ext.keys.stagespec import STAGES
from gpucache_ext.pipeline.results import parse_resources
from gpucache_ext.ipython.session import current
from gpucache_ext.store.tiers import Tier

from . import helpers

AXPY = '''
from numba import cuda

@cuda.jit("void(float32[:], float32, float32[:], float32[:])")
def axpy(r, a, x, y):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = a * x[i] + y[i]
'''

SCALE = '''
from numba import cuda

@cuda.jit("void(float32[:], float32[:])")
def scale(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = 2 * x[i]
'''


# quiet, and numbered as a notebook's cells are (the chart labels cells by number); returns the ExecutionResult
cell = functools.partial(helpers.cell, quiet=True, store_history=True)


# -- reading the widget tree ----------------------------------------------------


def walk(widget):
    yield widget
    for child in getattr(widget, "children", ()):
        yield from walk(child)


def part(inspector, dom_class):
    """The widget of the tree carrying `dom_class`, as a frontend would find it."""
    found = [w for w in walk(inspector) if dom_class in w.get_state().get("_dom_classes", ())]
    assert len(found) == 1, dom_class
    return found[0]


class _Cells(HTMLParser):
    """Collects the attributes of elements with data-* attributes."""

    def __init__(self):
        super().__init__()
        self.elements = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if any(k.startswith("data-") for k in attrs):
            self.elements.append((tag, attrs))


def data_elements(page):
    parser = _Cells()
    parser.feed(page)
    return parser.elements


def summary_numbers(inspector):
    """{(stage, tier or None, field): value string} from the summary table's state."""
    page = part(inspector, "gpucache-summary").get_state()["value"]
    numbers = {}
    for tag, attrs in data_elements(page):
        if tag == "td" and "data-field" in attrs:
            numbers[(attrs["data-stage"], attrs.get("data-tier"), attrs["data-field"])] = attrs["data-value"]
    return numbers


def assert_summary_matches(inspector, cache):
    stats = cache.stats()
    numbers = summary_numbers(inspector)
    for stage in STAGES:
        for field in ("hits", "misses", "entries", "bytes", "evictions"):
            assert int(numbers[(stage, None, field)]) == getattr(stats[stage], field), (stage, field)
        assert float(numbers[(stage, None, "compile_seconds")]) == pytest.approx(
            stats[stage].compile_seconds, abs=1e-6)
        for tier, values in stats[stage].tiers.items():
            for field in ("hits", "entries", "bytes"):
                assert int(numbers[(stage, tier, field)]) == getattr(values, field), (stage, tier, field)
        hits, misses = stats[stage].hits, stats[stage].misses
        expected = f"{100 * hits / (hits + misses):.0f}%" if hits + misses else "-"
        assert numbers[(stage, None, "hit_rate")] == expected
    assert int(numbers[("all", None, "hits")]) == sum(stats[s].hits for s in STAGES)
    assert int(numbers[("all", None, "misses")]) == sum(stats[s].misses for s in STAGES)


def chart_points(inspector):
    page = part(inspector, "gpucache-chart-box").get_state()["value"]
    points = {}
    for tag, attrs in data_elements(page):
        if tag == "g":
            points.setdefault(attrs["data-cell"], {})[attrs["data-stage"]] = (
                int(attrs["data-hits"]), int(attrs["data-misses"]))
    return points


def listed(inspector):
    """The entries list as the frontend gets it: labels and (stage, token) values."""
    select = part(inspector, "gpucache-entries")
    labels = list(select.get_state()["_options_labels"])
    return labels, list(select._options_values)


def all_html(inspector):
    return [w.get_state()["value"] for w in walk(inspector) if "value" in w.keys
            and isinstance(w.get_state()["value"], str) and "<" in w.get_state()["value"]]


# -- tests ------------------------------------------------------------------------


def test_magic_shows_the_inspector_and_it_updates_after_every_cell(ip):
    cell(ip, "--sm 80", AXPY)
    inspector = ip.run_line_magic("gpucache", "")
    assert isinstance(inspector, widgets.Inspector)
    assert "gpucache-inspector" in inspector.get_state()["_dom_classes"]
    cache = gpucache_ext.default_cache()
    assert_summary_matches(inspector, cache)
    assert summary_numbers(inspector)[("ptx", None, "misses")] == "1"

    cell(ip, "--sm 80", AXPY)  # every stage hits
    assert_summary_matches(inspector, cache)
    assert summary_numbers(inspector)[("cubin", None, "hits")] == "1"

    cell(ip, "--sm 86 --max-registers 32", AXPY)  # ptx and cubin miss
    assert_summary_matches(inspector, cache)
    numbers = summary_numbers(inspector)
    assert (numbers[("ptx", None, "misses")], numbers[("cubin", None, "entries")]) == ("2", "2")
    assert numbers[("ptx", None, "hit_rate")] == "33%"

    # one model for every place it is shown: all of them update together
    assert ip.run_line_magic("gpucache", "") is inspector
    assert gpucache_ext.inspector() is inspector
    other = KernelCache()
    assert gpucache_ext.inspector(other) is not inspector


def test_compile_time_saved_is_what_the_hits_saved(ip):
    cell(ip, "--sm 80", AXPY)
    inspector = gpucache_ext.inspector()
    assert all(float(summary_numbers(inspector)[(s, None, "saved_seconds")]) == 0 for s in STAGES)
    cell(ip, "--sm 80", AXPY)
    hit = ip.user_ns["axpy"].last
    numbers = summary_numbers(inspector)
    for stage in STAGES:
        saved = hit.stages[stage].saved_seconds
        assert saved > 0
        # stats() rounds seconds to the microsecond
        assert float(numbers[(stage, None, "saved_seconds")]) == pytest.approx(saved, abs=2e-6)
        assert float(numbers[(stage, "memory", "saved_seconds")]) == pytest.approx(saved, abs=2e-6)
    ip.run_cell("x = 1", store_history=True)  # no compile: nothing counted twice
    assert float(summary_numbers(inspector)[("typing", None, "saved_seconds")]) == pytest.approx(
        hit.stages["typing"].saved_seconds, abs=2e-6)


def test_chart_has_hits_and_misses_per_stage_per_cell(ip):
    first = cell(ip, "--sm 80", AXPY)
    second = cell(ip, "--sm 80", AXPY)
    ip.run_cell("y = 2", store_history=True)  # no cache activity: no column
    third = cell(ip, "--sm 86", AXPY)
    inspector = gpucache_ext.inspector()
    points = chart_points(inspector)
    labels = [f"[{r.execution_count}]" for r in (first, second, third)]
    assert list(points) == labels
    assert points[labels[0]] == dict.fromkeys(STAGES, (0, 1))
    assert points[labels[1]] == dict.fromkeys(STAGES, (1, 0))
    assert points[labels[2]] == {"typing": (1, 0), "llvm": (1, 0), "ptx": (0, 1), "cubin": (0, 1)}
    svg = part(inspector, "gpucache-chart-box").get_state()["value"]
    assert 'role="img"' in svg and "<title" in svg and "<desc" in svg
    # the chart's totals equal the counters
    stats = gpucache_ext.default_cache().stats()
    for stage in STAGES:
        assert sum(p[stage][0] for p in points.values()) == stats[stage].hits
        assert sum(p[stage][1] for p in points.values()) == stats[stage].misses


def test_entries_table_lists_every_entry_and_filters(ip):
    cell(ip, "--sm 80", AXPY)
    cell(ip, "--sm 80", SCALE)
    inspector = gpucache_ext.inspector()
    cache = gpucache_ext.default_cache()
    labels, values = listed(inspector)
    rows = cache.entries()
    assert values == [(r.stage, r.token) for r in rows]
    for label, row in zip(labels, rows):
        words = label.split()
        assert words[0] == row.kernel.rsplit(".", 1)[-1]
        assert row.token[:8] in words and row.stage in words and "memory" in words
        assert "first compile of" in label and "sm_80" in label
    head = part(inspector, "gpucache-entries-head-box").get_state()["value"]
    for column in ("kernel", "signature", "config", "stage", "token", "tier", "size", "age", "why built"):
        assert column in head

    kernels = part(inspector, "gpucache-kernel-filter")
    names = dict(zip(kernels.get_state()["_options_labels"], kernels._options_values))
    assert {"axpy", "scale"} <= set(names)
    kernels.value = names["scale"]
    _, values = listed(inspector)
    assert values == [(r.stage, r.token) for r in cache.entries(kernel="scale")] and len(values) == 4
    part(inspector, "gpucache-stage-filter").value = "ptx"
    _, values = listed(inspector)
    assert values == [(r.stage, r.token) for r in cache.entries(stage="ptx", kernel="scale")]
    kernels.value = ""
    _, values = listed(inspector)
    assert values == [(r.stage, r.token) for r in cache.entries(stage="ptx")] and len(values) == 2


def test_entry_view_shows_config_components_artifacts_resources_and_the_diff(ip):
    cell(ip, "--sm 80", AXPY)
    cell(ip, "--sm 86 --max-registers 32", AXPY)
    inspector = gpucache_ext.inspector()
    cache = gpucache_ext.default_cache()
    result = ip.user_ns["axpy"].last
    token = result.stages["cubin"].token
    part(inspector, "gpucache-entries").value = ("cubin", token)  # what a click does
    assert inspector.selected == ("cubin", token)
    page = part(inspector, "gpucache-entry-view").get_state()["value"]
    entry = cache.entry("cubin", token)

    assert "Why it was built" in page
    for reason in entry.reasons:
        assert reason.replace(">", "&gt;") in page
    assert "max_registers None -&gt; 32" in page
    # side by side with the nearest other cubin entry (the sm_80 one)
    diff = page[page.index('gpucache-diff'):page.index("</table>", page.index('gpucache-diff'))]
    rows = dict(re.findall(r'<tr data-component="([^"]+)">.*?</th><td[^>]*>([^<]*)</td>', diff))
    assert set(rows) == {"max_registers", "sm", "ptx"}
    assert rows["max_registers"] == "32" and rows["sm"] == "86"
    assert re.search(r'data-component="max_registers">.*?<td[^>]*>32</td><td[^>]*>None</td>', diff)
    assert re.search(r'data-component="sm">.*?<td[^>]*>86</td><td[^>]*>80</td>', diff)
    # config: every field, the stages that read it
    for field in ("sm", "opt", "fastmath", "max_registers", "launch_bounds", "lto"):
        assert f'<tr data-field="{field}">' in page
    config = page[page.index("gpucache-config"):]
    assert re.search(r'data-field="max_registers">.*?<td[^>]*>32</td>.*?cubin</span>', config)
    # token components and resources
    for name, component in entry.components.items():
        assert f'data-component="{name}"' in page and component.digest[:12] in page
    registers = parse_resources(entry.artifact.info_log)["registers"]
    assert f'data-resource="registers">{registers}<' in page
    assert "link log (nvJitLink)" in page
    # the SASS view: the disassembly where nvdisasm runs, else the note saying why not
    from gpucache_ext.widgets import sass_of

    sass, note = sass_of(entry.token, entry.artifact.cubin)
    if sass is not None:
        assert "SASS sm_86 (nvdisasm " in page and html.escape(sass.strip().splitlines()[-1].strip()) in page
    else:
        assert "gpucache-sass-note" in page and html.escape(note) in page

    # the other stages' artifacts
    views = {}
    for stage in ("typing", "llvm", "ptx"):
        inspector.select(stage, result.stages[stage].token)
        views[stage] = part(inspector, "gpucache-entry-view").get_state()["value"]
    assert "variable types" in views["typing"] and "typed IR" in views["typing"]
    assert "NVVM IR" in views["llvm"] and "define" in views["llvm"]
    assert ".target sm_86" in views["ptx"] and "PTX" in views["ptx"]
    assert "sm 80 -&gt; 86" in views["ptx"]
    assert "cubins built from this entry" in views["ptx"]  # resources of the downstream cubin
    assert "<script" not in "".join(views.values())


def test_evict_recompile_and_clear_act_on_the_cache_and_update_at_once(ip):
    cell(ip, "--sm 80", AXPY)
    cell(ip, "--sm 86", AXPY)
    inspector = gpucache_ext.inspector()
    cache = gpucache_ext.default_cache()
    result = ip.user_ns["axpy"].last

    # evict the selected entry
    token = result.stages["ptx"].token
    part(inspector, "gpucache-entries").value = ("ptx", token)
    part(inspector, "gpucache-evict").click()
    assert cache.entry("ptx", token) is None
    assert cache.stats()["ptx"].entries == 1
    assert_summary_matches(inspector, cache)
    assert ("ptx", token) not in listed(inspector)[1]
    assert "evicted ptx entry" in part(inspector, "gpucache-status").get_state()["value"]

    # recompile an entry: every stage compiled again, the entry is back
    cubin = result.stages["cubin"].token
    inspector.select("cubin", cubin)
    before = cache.stats()
    part(inspector, "gpucache-recompile").click()
    after = cache.stats()
    assert all(after[s].misses == before[s].misses + 1 for s in STAGES)
    assert cache.entry("ptx", token) is not None
    assert inspector.selected == ("cubin", cubin)
    assert_summary_matches(inspector, cache)
    assert "recompiled axpy" in part(inspector, "gpucache-status").get_state()["value"]
    assert chart_points(inspector)["recompile"] == dict.fromkeys(STAGES, (0, 1))

    # clear one stage, then every stage
    part(inspector, "gpucache-clear-stage").value = "ptx"
    part(inspector, "gpucache-clear").click()
    assert cache.stats()["ptx"].entries == 0 and cache.stats()["cubin"].entries == 2
    assert summary_numbers(inspector)[("ptx", None, "entries")] == "0"
    assert all(stage != "ptx" for stage, _ in listed(inspector)[1])
    assert "cleared ptx: 2 entries dropped" in part(inspector, "gpucache-status").get_state()["value"]
    part(inspector, "gpucache-clear-stage").value = "all"
    part(inspector, "gpucache-clear").click()
    assert all(cache.stats()[s].entries == 0 for s in STAGES)
    assert listed(inspector) == ([], [])
    assert part(inspector, "gpucache-evict").disabled and part(inspector, "gpucache-recompile").disabled
    assert_summary_matches(inspector, cache)


def test_actions_update_every_inspector_of_the_cache(ip):
    cell(ip, "--sm 80", AXPY)
    first = gpucache_ext.inspector()
    session = current(ip)
    second = widgets.Inspector(gpucache_ext.default_cache(), siblings=session._open_inspectors)
    session.inspectors.add(second)  # another, separate widget of the same cache
    first.clear("cubin")
    assert summary_numbers(second)[("cubin", None, "entries")] == "0"


def test_recompile_says_before_anything_when_it_cannot_rebuild_the_entry(tmp_path):
    """An entry another process made (here: another cache on the same
    folder) cannot be rebuilt exactly: the button is off and the inspector
    says why before anything is done; one this process made is rebuilt
    under its own token."""
    from gpucache_ext import CompileConfig

    from . import kernels

    KernelCache(directory=tmp_path).compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=80))
    cache = KernelCache(directory=tmp_path)
    inspector = gpucache_ext.inspector(cache)
    foreign = next(row.token for row in cache.entries(stage="cubin"))
    inspector.select("cubin", foreign)
    button = part(inspector, "gpucache-recompile")
    assert button.disabled and "not compiled by this process" in button.tooltip
    assert "run its cell again" in inspector.recompile_note.value
    assert inspector.recompile_selected() is None
    status = part(inspector, "gpucache-status").get_state()["value"]
    assert "cannot recompile" in status and "gpucache-status-error" in status
    assert cache.stats()["cubin"].misses == 0  # nothing was compiled

    own = cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=80)).stages["cubin"].token
    inspector.refresh()
    inspector.select("cubin", own)
    assert not button.disabled and inspector.recompile_note.value == ""
    button.click()
    assert inspector.selected == ("cubin", own)
    assert "the same entry, from the inputs it was built from" in part(inspector, "gpucache-status").value


def test_an_inspector_of_another_cache_is_live_too(ip):
    other = KernelCache()
    ip.user_ns["other"] = other
    inspector = gpucache_ext.inspector(other)
    ip.run_cell('''
from numba import cuda
def double(r):
    r[0] = 2 * r[0]
other.compile(double, "void(float32[:])")
''', store_history=True)
    assert_summary_matches(inspector, other)
    assert summary_numbers(inspector)[("cubin", None, "misses")] == "1"
    assert len(chart_points(inspector)) == 1


def test_activity_before_the_inspector_is_one_earlier_column(ip):
    other = KernelCache()

    def triple(r):
        r[0] = 3 * r[0]

    other.compile(triple, "void(float32[:])")
    inspector = gpucache_ext.inspector(other)
    assert chart_points(inspector) == {"earlier": dict.fromkeys(STAGES, (0, 1))}
    assert_summary_matches(inspector, other)


class _SharedTier(Tier):
    """A persistent tier in a dict, named like the shared one."""

    name = "shared"
    stages = ("llvm", "ptx", "cubin")

    def __init__(self):
        self.store = {}

    def get(self, stage, token):
        return self.store.get((stage, token))

    def put(self, stage, entry):
        self.store[(stage, entry.token)] = entry

    def delete(self, stage, token):
        return self.store.pop((stage, token), None) is not None

    def clear(self, stage):
        for key in [k for k in self.store if k[0] == stage]:
            del self.store[key]

    def entries(self, stage):
        return [e for (s, _), e in self.store.items() if s == stage]

    def stats(self, stage):
        entries = self.entries(stage)
        return {"entries": len(entries), "bytes": sum(e.nbytes for e in entries)}


def test_every_tier_gets_its_rows_whatever_its_name(ip):
    shared = _SharedTier()
    first, second = KernelCache(tiers=[shared]), KernelCache(tiers=[shared])
    ip.user_ns.update(first=first, second=second)
    source = AXPY.replace('@cuda.jit("void(float32[:], float32, float32[:], float32[:])")', "")
    ip.run_cell(source + '\nfirst.compile(axpy, "void(float32[:], float32, float32[:], float32[:])")',
                store_history=True)
    inspector = gpucache_ext.inspector(second)
    ip.run_cell('second.compile(axpy, "void(float32[:], float32, float32[:], float32[:])")',
                store_history=True)
    stats = second.stats()
    assert stats["cubin"].tiers["shared"].hits == 1
    assert_summary_matches(inspector, second)  # memory and shared rows, from stats()
    numbers = summary_numbers(inspector)
    assert ("typing", "shared", "hits") not in numbers  # typing is not in that tier
    labels, values = listed(inspector)
    assert all("memory,shared" in label for label in labels) and len(values) == 3


def test_plain_text_and_static_html_fallbacks(ip):
    from gpucache_ext.ipython.report import CellReport

    cell(ip, "--sm 80", AXPY)
    cell(ip, "--sm 86", AXPY)
    inspector = gpucache_ext.inspector()
    stats = gpucache_ext.default_cache().stats()
    data, _ = ip.display_formatter.format(inspector)
    assert {"text/plain", "text/html", "application/vnd.jupyter.widget-view+json"} <= set(data)
    text, page = data["text/plain"], data["text/html"]
    # the text form has the numbers a terminal needs
    summary = text.split("\n\n")[0].splitlines()
    lines = {line.split()[0]: line.split() for line in summary[1:]}
    for stage in STAGES:
        assert lines[stage][1:3] == [str(stats[stage].hits), str(stats[stage].misses)]
    assert "hits/misses per cell" in text and "why built" in text and "sm 80 -> 86" in text
    # the static HTML form too, with the chart, and no scripts
    numbers = {(a["data-stage"], a.get("data-tier"), a["data-field"]): a["data-value"]
               for tag, a in data_elements(page) if tag == "td" and "data-field" in a}
    for stage in STAGES:
        assert int(numbers[(stage, None, "misses")]) == stats[stage].misses
    assert "<svg" in page and "gpucache-entries-table" in page and "<script" not in page.lower()

    report = CellReport(ip.user_ns["axpy"].results.values())
    bundle = report._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html"} and "gpucache-report" in bundle["text/html"]
    assert "MISS" in bundle["text/plain"]
    # %gpucache stats: the inspector's summary, in its units and words
    formatted, _ = ip.display_formatter.format(ip.run_line_magic("gpucache", "stats"))
    assert {"text/plain", "text/html"} <= set(formatted)
    stats_text = formatted["text/plain"]
    assert stats_text.splitlines() == summary[1:]  # the inspector's own text summary
    assert "compile time spent" in stats_text and "KiB" in stats_text and " ms" in stats_text
    assert str(stats["cubin"].bytes) not in stats_text.split()  # bytes for people, not raw


def test_themable_with_jupyterlab_variables_and_no_scripts(ip):
    cell(ip, "--sm 80", AXPY)
    inspector = gpucache_ext.inspector()
    pages = all_html(inspector) + [inspector._repr_mimebundle_()["text/html"]]
    style = part(inspector, "gpucache-header").get_state()["value"]
    for variable in ("--jp-ui-font-color1", "--jp-layout-color1", "--jp-border-color2"):
        assert f"var({variable}," in style
    for page in pages:
        assert "<script" not in page.lower()
        assert not re.search(r"\son[a-z]+\s*=", page)  # no inline event handlers
        assert "javascript:" not in page.lower()
        # every variable has a fallback for frontends that are not JupyterLab
        assert not re.search(r"var\(--jp-[\w-]+\)", page)


def test_sass_through_nvdisasm_per_architecture(ip):
    """The wheel's nvdisasm reads sm_75 and later: the SASS under its
    architecture's heading; an older cubin gets the note saying what would work."""
    cell(ip, "--sm 80", AXPY)
    inspector = gpucache_ext.inspector()
    axpy = ip.user_ns["axpy"]
    widgets.sass_cache.clear()
    inspector.select("cubin", axpy.last.stages["cubin"].token)
    page = part(inspector, "gpucache-entry-view").get_state()["value"]
    assert "SASS sm_80 (nvdisasm 1" in page and html.escape(axpy.last.entry_name) in page and "EXIT" in page

    if helpers.CUDA_MAJOR >= 13:
        return  # (what follows needs a target before sm_75: CUDA 13 builds none)
    cell(ip, "--sm 70", AXPY)
    inspector.select("cubin", ip.user_ns["axpy"].last.stages["cubin"].token)
    page = part(inspector, "gpucache-entry-view").get_state()["value"]
    note = page[page.index("gpucache-sass-note"):]
    assert "cannot disassemble sm_70 code" in note and "sm_75 and later" in note and "EXIT" not in page
    widgets.sass_cache.clear()


def test_unload_removes_the_session_and_everything_it_registered(ip):
    session = current(ip)
    cell(ip, "--sm 80", AXPY)
    old_cache = session.cache
    inspector = gpucache_ext.inspector()
    assert session.inspectors and inspector.comm is not None
    hooks = ip.events.callbacks["post_run_cell"]
    assert hooks.count(session.post_run_cell) == 1
    ip.run_line_magic("unload_ext", "gpucache_ext")
    assert current(ip) is None and session.post_run_cell not in hooks
    assert "gpukernel" not in ip.magics_manager.magics["cell"]
    assert "gpucache" not in ip.magics_manager.magics["line"]
    assert "GpuCacheMagics" not in ip.magics_manager.registry
    assert inspector.comm is None  # closed with the session
    ip.run_line_magic("load_ext", "gpucache_ext")
    again = current(ip)
    assert again is not session and hooks.count(again.post_run_cell) == 1
    assert again.cache is not old_cache and gpucache_ext.default_cache() is again.cache


def test_the_header_totals_what_every_tier_holds(ip, tmp_path):
    from gpucache_ext.units import format_bytes

    disk_cache = KernelCache(directory=tmp_path)
    ip.user_ns["disk_cache"] = disk_cache
    inspector = gpucache_ext.inspector(disk_cache)
    ip.run_cell('''
def halve(r):
    r[0] = r[0] / 2
disk_cache.compile(halve, "void(float32[:])")
''', store_history=True)
    header = part(inspector, "gpucache-header").get_state()["value"]
    stats = disk_cache.stats()
    memory = sum(stats[s].tiers["memory"].bytes for s in STAGES)
    disk = sum(p.stat().st_size for p in tmp_path.glob("v1/*/*/*.entry"))
    assert memory > 0 and disk > 0
    assert f"{format_bytes(memory)} in memory, {format_bytes(disk)} on disk" in header


def test_cells_ask_the_tiers_what_they_hold_only_for_an_open_inspector(ip, tmp_path):
    from gpucache_ext.store.disk import DiskTier

    class CountingDisk(DiskTier):
        calls = 0

        def stats(self, stage):
            CountingDisk.calls += 1
            return super().stats(stage)

    current(ip).configure_cache(tiers=[CountingDisk(tmp_path)])
    cell(ip, "--sm 80", AXPY)
    cell(ip, "--sm 75", AXPY)
    assert CountingDisk.calls == 0  # the per-cell history reads counters only
    history = current(ip).history(gpucache_ext.default_cache())
    assert [p["stages"]["cubin"] for p in history.points][-2:] == [(0, 1), (0, 1)]
    inspector = gpucache_ext.inspector()
    assert CountingDisk.calls > 0
    before = CountingDisk.calls
    cell(ip, "--sm 80", AXPY)
    assert CountingDisk.calls > before  # the open inspector refreshed
    assert list(chart_points(inspector).values())[-1]["cubin"] == (1, 0)


def test_evict_keeps_the_selection_on_the_neighbouring_row(ip):
    cell(ip, "--sm 80", AXPY)
    cell(ip, "--sm 86", AXPY)  # ptx and cubin again: six rows
    inspector = gpucache_ext.inspector()
    cache = gpucache_ext.default_cache()
    select = part(inspector, "gpucache-entries")
    evict = part(inspector, "gpucache-evict")

    def shown():
        """What is selected in the list as the frontend has it, and what the entry view shows."""
        page = part(inspector, "gpucache-entry-view").get_state()["value"]
        view = [(a["data-stage"], a["data-token"]) for tag, a in data_elements(page)
                if tag == "div" and "data-token" in a]
        index = select.get_state()["index"]
        return (listed(inspector)[1][index] if index is not None else None), view

    _, before = listed(inspector)
    assert len(before) == 6
    select.value = before[2]  # a row in the middle, not the first
    evict.click()
    assert cache.entry(*before[2]) is None
    _, after = listed(inspector)
    assert after == before[:2] + before[3:]
    assert inspector.selected == before[3]  # the row that followed it
    assert shown() == (before[3], [before[3]])

    select.value = after[-1]  # the last row: the one before it takes its place
    evict.click()
    assert inspector.selected == after[-2] and shown() == (after[-2], [after[-2]])

    # with a filter: the neighbour in the list as filtered
    part(inspector, "gpucache-stage-filter").value = "ptx"
    _, ptxs = listed(inspector)
    assert len(ptxs) == 2
    select.value = ptxs[0]
    evict.click()
    assert inspector.selected == ptxs[1] and listed(inspector)[1] == [ptxs[1]]
    evict.click()  # the only row: nothing left to select
    assert inspector.selected is None and listed(inspector) == ([], [])
    assert evict.disabled


def kernel_column(inspector):
    """{(stage, token): the kernel column of its row} as the list shows it."""
    labels, values = listed(inspector)
    return {value: label.split()[0] for label, value in zip(labels, values)}


@pytest.mark.smoke
def test_two_kernels_of_one_name_from_two_cells_are_told_apart(ip):
    first = cell(ip, "--sm 80", AXPY, store_history=True, cell_id="cell-one")
    first_number = ip.execution_count - 1
    first_tokens = {s: r.token for s, r in ip.user_ns["axpy"].last.stages.items()}
    cell(ip, "--sm 80", AXPY.replace("a * x[i] + y[i]", "a * x[i] - y[i]"),  # another axpy, in another cell
         store_history=True, cell_id="cell-two")
    second_number = ip.execution_count - 1
    second_tokens = {s: r.token for s, r in ip.user_ns["axpy"].last.stages.items()}
    assert first.success and set(first_tokens.values()).isdisjoint(second_tokens.values())
    cache = gpucache_ext.default_cache()
    assert {r.kernel for r in cache.entries()} == {"__main__.axpy"}  # the same qualified name
    inspector = gpucache_ext.inspector()
    column = kernel_column(inspector)
    assert len(column) == 8
    mine = {column[(s, t)] for s, t in first_tokens.items()}
    theirs = {column[(s, t)] for s, t in second_tokens.items()}
    # one label per definition, on every stage's row, saying where each was defined
    assert mine == {f"axpy@In[{first_number}]"} and theirs == {f"axpy@In[{second_number}]"}, column
    # the selected entry's heading names it the same way
    inspector.select("ptx", second_tokens["ptx"])
    view = part(inspector, "gpucache-entry-view").get_state()["value"]
    assert f"<h4>{theirs.pop()} " in view and f"this axpy is the one defined in cell In[{second_number}]" in view
    # and so does the static fallback
    text = inspector._repr_mimebundle_()["text/plain"]
    assert f"\n{mine.pop()} " in text

    # the first axpy's typed IR evicted: its other rows still read as its definition
    cache.evict("typing", first_tokens["typing"])
    for view in (inspector, widgets.Inspector(cache)):
        view.refresh()
        column = kernel_column(view)
        assert {column[(s, first_tokens[s])] for s in ("llvm", "ptx", "cubin")} == {f"axpy@In[{first_number}]"}


@pytest.mark.slow
def test_one_definition_keeps_one_name_through_edits_signatures_targets_and_a_restart(ip, tmp_path):
    """Edits to the kernel's cell, to a device function in another cell and
    to a global it reads, another signature of a lazy kernel, a fatbin's
    targets: all versions of one definition, listed under one name, also by
    a new process reading the same folder."""
    gpucache_ext.configure_default_cache(directory=tmp_path)
    helper = """
@cuda.jit(device=True)
def act(v):
    return v * ALPHA
"""
    ip.run_cell("ALPHA = 1.5")
    cell(ip, "--sm 80 --quiet", "from numba import cuda\n" + helper, cell_id="helper-cell")
    kernel = """
@cuda.jit
def scale(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = act(x[i]){extra}
"""
    cell(ip, "--sm 80,90 --quiet", kernel.format(extra=""), cell_id="kernel-cell")
    ip.run_cell("import numpy as np\nx = np.ones(4, np.float32); out = np.zeros(4, np.float32)\n"
                "scale[1, 4](out, x)\nscale[1, 4](out.astype(np.float64), x.astype(np.float64))")
    ip.run_cell("ALPHA = 3.0\nscale[1, 4](out, x)")
    cell(ip, "--sm 80 --quiet", helper.replace("v * ALPHA", "v * ALPHA + 1.0"), cell_id="helper-cell")
    ip.run_cell("scale[1, 4](out, x)")
    cell(ip, "--sm 80,90 --quiet", kernel.format(extra=" * 2.0"), cell_id="kernel-cell")
    ip.run_cell("scale[1, 4](out, x)")
    cache = gpucache_ext.default_cache()
    rows = [row for row in cache.entries() if row.kernel == "__main__.scale"]
    assert len({row.signature for row in rows}) == 2 and len(rows) > 20
    assert {row.place for row in rows} == {"cell:kernel-cell"}
    inspector = gpucache_ext.inspector()
    assert set(kernel_column(inspector).values()) == {"scale"}
    # the variants of the selected version only: its two targets, not every version's
    inspector.select("cubin", ip.user_ns["scale"].last.per_target[90].stages["cubin"].token)
    variants = inspector.variants_view.value
    assert "Resources across variants of scale" in variants
    assert re.findall(r'<th scope="row">(sm_\d+)', variants) == ["sm_80", "sm_90"], variants
    # a new process: the entries come from the disk; still one definition, one name
    code = (f"import gpucache_ext\nfrom gpucache_ext import widgets, KernelCache\n"
            f"view = widgets.Inspector(KernelCache(directory={str(tmp_path)!r}))\n"
            "print(sorted(set(view._labels.values())))")
    assert helpers.run_python(code).strip().splitlines()[-1] == "['scale']"


def test_one_kernel_keeps_its_plain_name(ip):
    cell(ip, "--sm 80", AXPY)
    cell(ip, "--sm 86", AXPY)  # same source, another target
    cell(ip, "--sm 80", AXPY.replace("float32", "float64"))  # and another signature
    assert set(kernel_column(gpucache_ext.inspector()).values()) == {"axpy"}


def test_kernels_of_one_short_name_in_two_modules_show_their_qualified_names(ip):
    import types

    cache = KernelCache()
    body = AXPY.replace('@cuda.jit("void(float32[:], float32, float32[:], float32[:])")', "")
    kernels = {}
    for name in ("pkg.first", "pkg.second"):
        module = types.ModuleType(name)
        exec(compile(body, f"<{name}>", "exec"), module.__dict__)
        kernels[name] = cache.compile(module.axpy, "void(float32[:], float32, float32[:], float32[:])")
    inspector = gpucache_ext.inspector(cache)
    column = kernel_column(inspector)
    for name, result in kernels.items():
        assert result.kernel == f"{name}.axpy"
        assert {column[(s, r.token)] for s, r in result.stages.items()} == {f"{name.split('.')[1]}.axpy"}
    # the kernel filter names them the same way as before
    names = part(inspector, "gpucache-kernel-filter").get_state()["_options_labels"]
    assert {"pkg.first.axpy", "pkg.second.axpy"} <= set(names)


# -- clearing: memory only unless the persistent tiers are chosen, and then after a confirmation ----------


def _halve(r):
    r[0] = r[0] / 2


def _disk_files(folder, stage="*"):
    return sorted(folder.glob(f"v*/{stage}/*/*.entry"))


def _status(inspector):
    return html.unescape(part(inspector, "gpucache-status").get_state()["value"])


def _confirmation_shown(inspector):
    return part(inspector, "gpucache-clear-confirm").layout.display != "none"


def _choose_tiers(inspector, *names):
    """Pick the "from" choice clearing memory and exactly `names`; returns its label."""
    tiers = part(inspector, "gpucache-clear-tiers")
    labels = dict(zip(tiers._options_values, tiers.get_state()["_options_labels"]))
    tiers.value = ("memory",) + names
    return labels[tiers.value]


def test_clearing_from_the_widget_leaves_the_disk_tier_alone_by_default(tmp_path):
    from gpucache_ext.keys.config import CompileConfig

    cache = KernelCache(directory=tmp_path)
    cache.compile(_halve, "void(float32[:])", CompileConfig(sm=80))
    inspector = widgets.Inspector(cache)
    on_disk = _disk_files(tmp_path)
    assert len(_disk_files(tmp_path, "cubin")) == 1 and len(on_disk) == 3  # llvm, ptx, cubin
    counters = cache.lookups()

    part(inspector, "gpucache-clear-stage").value = "cubin"
    part(inspector, "gpucache-clear").click()  # no question: memory only
    assert cache.stats()["cubin"].entries == 0 and _disk_files(tmp_path) == on_disk
    tiers = part(inspector, "gpucache-clear-tiers")
    assert tiers.value == ("memory",) and tiers.get_state()["_options_labels"][tiers.index] == "memory only"
    assert not _confirmation_shown(inspector)
    assert cache.stats()["cubin"].tiers["disk"].entries == 1
    status = _status(inspector)
    assert "cleared cubin: 1 entry dropped from memory" in status
    assert f"kept: 1 in disk ({tmp_path})" in status  # what it left, and where
    # the cubin is still listed, on disk
    labels, values = listed(inspector)
    cubin = [label for label, (stage, _) in zip(labels, values) if stage == "cubin"]
    assert len(cubin) == 1 and " disk " in cubin[0] and "memory" not in cubin[0]

    part(inspector, "gpucache-clear-stage").value = "all"
    part(inspector, "gpucache-clear").click()
    assert all(cache.stats()[s].tiers["memory"].entries == 0 for s in STAGES)
    assert _disk_files(tmp_path) == on_disk and not _confirmation_shown(inspector)
    assert "cleared every stage: 3 entries dropped from memory" in _status(inspector)
    assert cache.lookups() == counters  # clearing counts nothing

    # from code: memory only unless the tiers are named
    cache.compile(_halve, "void(float32[:])", CompileConfig(sm=80))
    assert inspector.clear("ptx") == {"memory": 1} and len(_disk_files(tmp_path, "ptx")) == 1
    assert inspector.clear("ptx", tiers=("memory", "disk")) == {"memory": 0, "disk": 1}
    assert _disk_files(tmp_path, "ptx") == [] and not _confirmation_shown(inspector)
    assert f"1 from disk ({tmp_path})" in _status(inspector)
    with pytest.raises(ValueError, match="memory, disk"):
        inspector.clear("llvm", tiers=("redis",))
    # and the cache's own clear: every tier unless told
    cache.clear("llvm", tiers=("memory",))
    assert len(_disk_files(tmp_path, "llvm")) == 1
    cache.clear("llvm")
    assert _disk_files(tmp_path, "llvm") == []


def test_clearing_the_disk_tier_asks_first_and_only_confirm_deletes(tmp_path):
    from gpucache_ext.keys.config import CompileConfig

    cache = KernelCache(directory=tmp_path)
    cache.compile(_halve, "void(float32[:])", CompileConfig(sm=80))
    cache.compile(_halve, "void(float32[:])", CompileConfig(sm=86))
    inspector = widgets.Inspector(cache)
    on_disk = _disk_files(tmp_path)
    assert len(_disk_files(tmp_path, "cubin")) == 2
    label = _choose_tiers(inspector, "disk")
    assert label == f"memory and disk ({tmp_path})"  # the tier named by where it is
    part(inspector, "gpucache-clear-stage").value = "cubin"
    clear, confirm, cancel = (part(inspector, c) for c in ("gpucache-clear", "gpucache-clear-confirm-button",
                                                           "gpucache-clear-cancel"))

    def question():
        return html.unescape(part(inspector, "gpucache-clear-question").get_state()["value"])

    # the first click asks, naming the tiers and what each will lose; nothing is deleted yet
    clear.click()
    assert _confirmation_shown(inspector)
    assert f"Clear cubin from memory and disk ({tmp_path})?" in question()
    assert f"2 entries from memory and 2 entries from disk ({tmp_path})" in question()
    assert "shared by every notebook" in question()
    assert _disk_files(tmp_path) == on_disk and cache.stats()["cubin"].entries == 2
    # Cancel drops nothing
    cancel.click()
    assert not _confirmation_shown(inspector) and question() == ""
    assert _disk_files(tmp_path) == on_disk and cache.stats()["cubin"].entries == 2
    assert "nothing deleted" in _status(inspector)
    # another choice while it asks: the question is withdrawn, and Confirm has nothing to do
    clear.click()
    part(inspector, "gpucache-clear-stage").value = "ptx"
    assert not _confirmation_shown(inspector)
    confirm.click()
    assert _disk_files(tmp_path) == on_disk and "nothing to confirm" in _status(inspector)

    # Confirm deletes what it asked about, and says what went from where
    part(inspector, "gpucache-clear-stage").value = "cubin"
    counters = cache.lookups()
    clear.click()
    assert _disk_files(tmp_path) == on_disk
    confirm.click()
    assert not _confirmation_shown(inspector)
    assert _disk_files(tmp_path, "cubin") == [] and cache.stats()["cubin"].entries == 0
    assert len(_disk_files(tmp_path)) == len(on_disk) - 2  # llvm and ptx stay
    assert f"cleared cubin: 2 entries dropped from memory, 2 from disk ({tmp_path})" in _status(inspector)
    assert all(stage != "cubin" for stage, _ in listed(inspector)[1])
    assert cache.lookups() == counters

    # every stage (typing is in memory alone; one typing and llvm entry serve both targets)
    part(inspector, "gpucache-clear-stage").value = "all"
    clear.click()
    assert f"Clear every stage from memory and disk ({tmp_path})?" in question()
    assert f"4 entries from memory and 3 entries from disk ({tmp_path})" in question()
    confirm.click()
    assert _disk_files(tmp_path) == [] and listed(inspector) == ([], [])
    assert f"cleared every stage: 4 entries dropped from memory, 3 from disk ({tmp_path})" in _status(inspector)


def test_clearing_names_every_persistent_tier_it_touches(tmp_path):
    from gpucache_ext.keys.config import CompileConfig

    class Shared(_SharedTier):
        location = "redis://cache.example:6379/0 prefix team"

    shared = Shared()
    cache = KernelCache(directory=tmp_path, tiers=[shared])
    cache.compile(_halve, "void(float32[:])", CompileConfig(sm=80))
    inspector = widgets.Inspector(cache)
    disk, server = f"disk ({tmp_path})", "shared (redis://cache.example:6379/0 prefix team)"
    labels = list(part(inspector, "gpucache-clear-tiers").get_state()["_options_labels"])
    assert labels == ["memory only", f"memory and {disk}", f"memory and {server}", f"memory, {disk} and {server}"]

    part(inspector, "gpucache-clear-stage").value = "ptx"
    _choose_tiers(inspector, "shared")
    part(inspector, "gpucache-clear").click()
    asked = html.unescape(part(inspector, "gpucache-clear-question").get_state()["value"])
    assert f"1 entry from memory and 1 entry from {server}" in asked and "disk" not in asked
    part(inspector, "gpucache-clear-confirm-button").click()
    assert cache.stats()["ptx"].entries == 0 and not any(s == "ptx" for s, _ in shared.store)
    assert len(_disk_files(tmp_path, "ptx")) == 1
    assert f"1 entry dropped from memory, 1 from {server}; not chosen, so kept: 1 in {disk}" in _status(inspector)

    part(inspector, "gpucache-clear-stage").value = "cubin"
    _choose_tiers(inspector, "disk", "shared")
    part(inspector, "gpucache-clear").click()
    asked = html.unescape(part(inspector, "gpucache-clear-question").get_state()["value"])
    assert f"from memory, {disk} and {server}?" in asked and "The disk and shared tiers are shared" in asked
    part(inspector, "gpucache-clear-confirm-button").click()
    assert _disk_files(tmp_path, "cubin") == [] and not any(s == "cubin" for s, _ in shared.store)
    assert f"1 entry dropped from memory, 1 from {disk}, 1 from {server}" in _status(inspector)

    # typing is kept in memory alone: nothing persistent to ask about
    part(inspector, "gpucache-clear-stage").value = "typing"
    part(inspector, "gpucache-clear").click()
    assert not _confirmation_shown(inspector)
    assert "cleared typing: 1 entry dropped from memory" in _status(inspector)


# -- configs shown whole -------------------------------------------------------------


def test_a_config_of_several_fields_is_shown_whole_in_the_list_and_the_comparison_choices():
    from gpucache_ext.keys.config import CompileConfig

    cache = KernelCache()
    tuned = CompileConfig(sm=80, fastmath=True, max_registers=32, launch_bounds=(200,))
    bounded = CompileConfig(sm=80, opt=2, launch_bounds=(128, 2), lto=True)  # a field with a space in it
    plain = cache.compile(_halve, "void(float32[:])", CompileConfig(sm=80))
    results = {"tuned": cache.compile(_halve, "void(float32[:])", tuned),
               "bounded": cache.compile(_halve, "void(float32[:])", bounded)}
    summaries = {"tuned": "sm_80 fastmath=True max_registers=32 launch_bounds=(200,)",
                 "bounded": "sm_80 opt=2 launch_bounds=(128, 2) lto=True"}
    assert {name: result.config.summary() for name, result in results.items()} == summaries
    inspector = widgets.Inspector(cache)

    labels, values = listed(inspector)
    row = dict(zip(values, labels))
    head = html.unescape(part(inspector, "gpucache-entries-head-box").get_state()["value"])
    head = re.sub(r"<[^>]+>", "", head)
    for name, result in results.items():
        for stage in ("llvm", "ptx", "cubin"):
            label = row[(stage, result.stages[stage].token)]
            assert f"  {summaries[name]}  " in label, label
            # the columns after it still line up with their titles
            assert label.index("(float32[:])") == head.index("signature")
    # as the text fallback lists them
    text = inspector._repr_mimebundle_()["text/plain"]
    assert all(summary in text for summary in summaries.values())

    # "compare with": each entry's kernel, signature and whole config
    inspector.select("ptx", plain.stages["ptx"].token)
    compare = part(inspector, "gpucache-compare-with")
    options = dict(zip(compare._options_values, compare.get_state()["_options_labels"]))
    for name, result in results.items():
        token = result.stages["ptx"].token
        assert options[token] == f"_halve (float32[:]) [{summaries[name]}] {token[:12]}"
    inspector.select("cubin", results["tuned"].stages["cubin"].token)
    options = dict(zip(compare._options_values, compare.get_state()["_options_labels"]))
    assert options[plain.stages["cubin"].token].startswith("_halve (float32[:]) [sm_80] ")
    assert f"[{summaries['bounded']}]" in options[results["bounded"].stages["cubin"].token]


def test_the_variants_section_gives_each_variants_occupancy_and_the_best(tmp_path):
    from gpucache_ext import CompileConfig, samples
    from gpucache_ext.occupancy import occupancy

    matmul = samples.load(samples.MATMUL)["matmul"]
    cache = KernelCache()
    built = {cap: cache.compile(matmul, samples.MATMUL_SIG, CompileConfig(sm=86, max_registers=cap))
             for cap in (None, 32, 16)}
    inspector = widgets.Inspector(cache)
    inspector.select("cubin", built[32].stages["cubin"].token)
    view = inspector.variants_view.value
    assert "theoretical (not speed)" in view
    cells = re.findall(r'<tr data-arch="sm_86" data-token="([0-9a-f]+)"><td class="gpucache-best" '
                       r'data-best="(true|false)">.*?</tr>', view)
    assert len(cells) == 3 and [best for _, best in cells].count("true") == 1
    for cap, result in built.items():
        used = result.resources
        for block in (128, 256, 512, 1024):
            found = occupancy((8, 6), block, used["registers"], used["shared_bytes"])
            row = view.split(f'data-token="{result.stages["cubin"].token}"', 1)[1].split("</tr>", 1)[0]
            assert f'data-block="{block}" data-occupancy="{found.occupancy}"' in row, (cap, block)
    best = next(token for token, flag in cells if flag == "true")
    assert not built[16].stages["cubin"].token == best or not built[16].resources["spill_stores"]


def test_a_shown_entries_table_says_when_its_ages_were_taken():
    """A rendered table is not updated: the ages say what moment they are as
    of, and each entry when it was built, so a saved or idle view stays true."""
    import time

    from gpucache_ext import EntryInfo
    from gpucache_ext.views.entries import entries_html

    now = time.mktime((2026, 12, 6, 18, 42, 10, 0, 0, -1))
    rows = [EntryInfo(stage="ptx", token="ab" * 32, kernel="m.axpy", signature="", config="", config_fields={},
                      tiers=(), bytes=10, created=now - 125, seconds=0.0, reasons=())]
    shown = entries_html(rows, now)
    assert "newest first (ages as of 2026-12-06 18:42:10)" in shown
    assert re.search(r'<td class="[^"]*" title="built 2026-12-06 18:40:05">2m</td>', shown), shown
