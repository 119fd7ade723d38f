"""A stage rebuilt to the same bytes as before (early cutoff), as people see
it: the cell report's stage cells and why column, `%gpucache stats` and the
inspector's summary, and `%gpucache explain`.  Real compiles through an
in-process IPython shell (CPU only), and the renderers on their own."""

import functools
import html
import re

import pytest
from numba import types

import gpucache_ext

from gpucache_ext import KernelCache
from gpucache_ext.keys.config import CompileConfig
from gpucache_ext.keys.stagespec import STAGES
from gpucache_ext.ipython.report import CellReport, why_text
from gpucache_ext.pipeline.results import CompileResult, Outcome, StageResult

from . import helpers, kernels

COPY = '''
from numba import cuda

@cuda.jit("void(float32[:], float32[:])")
def copy(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = x[i]
'''
SIG = "float32[:], float32[:]"


cell = functools.partial(helpers.cell, body=COPY, kernel="copy")  # returns copy's last CompileResult


def report_row(capsys):
    """The one kernel row of the cell report just printed, by column."""
    lines = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("kernel "))
    starts = [m.start() for m in re.finditer(r"\S+", lines[head])]
    names = lines[head].split()
    row = lines[head + 1]
    return {name: row[start:end].strip() for name, start, end in zip(names, starts, starts[1:] + [None])}


def html_cells(page):
    """The stage cells of a report's HTML: (class, title, text) per <td> with a class."""
    return re.findall(r'<td class="([^"]*)"(?: title="([^"]*)")?>([^<]*)</td>', page)


# -- the cell report, real compiles -------------------------------------------------


@pytest.mark.parametrize("flags, reason", [("--opt 2", "opt 3 -> 2"),
                                           ("--no-prec-div", "prec_div True -> False")])
def test_ptx_rebuilt_to_the_same_bytes_reads_as_such_in_the_report(ip, capsys, flags, reason):
    cell(ip, "--sm 86")
    capsys.readouterr()
    result = cell(ip, f"--sm 86 {flags}")
    assert [result.stages[s].outcome for s in STAGES] == [Outcome.HIT, Outcome.HIT, Outcome.MISS, Outcome.HIT]
    assert result.stages["cubin"].cutoff
    row = report_row(capsys)
    assert [row[s] for s in STAGES] == ["hit", "hit", "MISS", "hit (same bytes)"]
    assert row["why"] == f"ptx rebuilt ({reason}), same bytes: cubin reused"
    page = CellReport([result])._repr_html_()
    assert html_cells(page)[:4] == [
        ("gpucache-hit", "", "hit"), ("gpucache-hit", "", "hit"), ("gpucache-miss", "", "MISS"),
        ("gpucache-hit gpucache-cutoff",
         "ptx was rebuilt to the same bytes as before, so this cubin was found, not rebuilt (early cutoff)",
         "hit (same bytes)")]
    assert f'<td class="gpucache-why">ptx rebuilt ({html.escape(reason)}), same bytes: cubin reused</td>' in page


@pytest.mark.parametrize("cleared, typing, why", [
    (("llvm",), "hit", "llvm rebuilt (entry was evicted or cleared), same bytes: ptx and cubin reused"),
    # typing and llvm rebuilt for one reason: said once, at typing; llvm's phrase adds none
    (("typing", "llvm"), "MISS",
     "typing: entry was evicted or cleared; llvm rebuilt, same bytes: ptx and cubin reused"),
])
def test_llvm_rebuilt_to_the_same_bytes_reuses_ptx_and_cubin(ip, capsys, cleared, typing, why):
    cell(ip, "--sm 86 --quiet")
    for stage in cleared:
        ip.run_line_magic("gpucache", f"clear {stage}")
    capsys.readouterr()
    cell(ip, "--sm 86")
    row = report_row(capsys)
    assert [row[s] for s in STAGES] == [typing, "MISS", "hit (same bytes)", "hit"]
    assert row["why"] == why


def test_a_rebuild_to_other_bytes_reads_as_before(ip, capsys):
    cell(ip, "--sm 86 --quiet")
    capsys.readouterr()
    cell(ip, "--sm 86 --fastmath")
    row = report_row(capsys)
    assert [row[s] for s in STAGES] == ["hit", "MISS", "MISS", "MISS"]
    assert row["why"] == "llvm: fastmath False -> True"


def test_a_same_bytes_hit_from_a_persistent_tier_names_it(tmp_path):
    config = CompileConfig(sm=86)
    KernelCache(directory=tmp_path).compile(kernels.copy, kernels.COPY_SIG, config)
    result = KernelCache(directory=tmp_path).compile(kernels.copy, kernels.COPY_SIG,
                                                      CompileConfig(sm=86, opt=2))
    row = CellReport([result]).rows()[0]
    assert [row[s] for s in STAGES] == ["not needed", "hit:disk", "MISS", "hit:disk (same bytes)"]
    assert row["why"] == "ptx rebuilt (opt 3 -> 2), same bytes: cubin reused"


def test_a_same_bytes_hit_from_an_unsigned_shared_tier_is_marked_both_ways(redis_server):
    config = CompileConfig(sm=86)
    KernelCache(redis_url=redis_server.url, allow_unsigned=True).compile(kernels.copy, kernels.COPY_SIG, config)
    cache = KernelCache(redis_url=redis_server.url, allow_unsigned=True)
    result = cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86, prec_div=False))
    report = CellReport([result], tiers=cache.tier_info())
    assert report.rows()[0]["cubin"] == "hit:shared (unsigned, same bytes)"
    assert html_cells(report._repr_html_())[3][:2] == (
        "gpucache-warn gpucache-cutoff",
        "ptx was rebuilt to the same bytes as before, so this cubin was found, not rebuilt (early cutoff)")


# -- the why column, on its own ---------------------------------------------------------


def _result(config, **stages):
    """A CompileResult of `stages` ({stage: (outcome, reasons, cutoff)}; others hit)."""
    done = {}
    for stage in STAGES:
        outcome, reasons, cutoff = stages.get(stage, (Outcome.HIT, (), False))
        done[stage] = StageResult(stage, stage * 8, outcome, "memory" if outcome is Outcome.HIT else None,
                                  0.001, tuple(reasons), cutoff=cutoff)
    return CompileResult("__main__.k", (types.float32[:],), config, done, None, None, None)


MISS, HIT = Outcome.MISS, Outcome.HIT


def test_why_names_the_rebuilt_stage_its_reason_and_every_stage_reused():
    result = _result(CompileConfig(sm=86, fastmath=True, ftz=False, prec_div=True, prec_sqrt=True),
                     llvm=(MISS, ["fastmath False -> True"], False), ptx=(HIT, (), True))
    assert why_text(result) == "llvm rebuilt (fastmath False -> True), same bytes: ptx and cubin reused"
    row = CellReport([result]).rows()[0]
    assert [row[s] for s in STAGES] == ["hit", "MISS", "hit (same bytes)", "hit"]


def test_why_leaves_out_what_the_stage_before_said_and_what_follows_fastmath():
    result = _result(CompileConfig(sm=86, fastmath=True),
                     llvm=(MISS, ["fastmath False -> True"], False),
                     ptx=(MISS, ["fastmath False -> True", "ftz False -> True", "llvm input changed",
                                 "prec_div True -> False", "prec_sqrt True -> False"], False),
                     cubin=(HIT, (), True))
    assert why_text(result) == "llvm: fastmath False -> True; ptx rebuilt, same bytes: cubin reused"


def test_why_after_the_stages_reused_goes_on_with_what_missed():
    result = _result(CompileConfig(sm=86, launch_bounds=(256,), max_registers=40),
                     llvm=(MISS, ["launch_bounds None -> (256,)"], False), ptx=(HIT, (), True),
                     cubin=(MISS, ["max_registers 32 -> 40"], False))
    assert why_text(result) == ("llvm rebuilt (launch_bounds None -> (256,)), same bytes: ptx reused; "
                                "cubin: max_registers 32 -> 40")
    row = CellReport([result]).rows()[0]
    assert [row[s] for s in ("llvm", "ptx", "cubin")] == ["MISS", "hit (same bytes)", "MISS"]


def test_why_a_chain_rebuilt_to_other_bytes_then_the_same():
    result = _result(CompileConfig(sm=86, opt=2), typing=(MISS, ["global K 1 -> 2"], False),
                     llvm=(MISS, ["typing input changed"], False),
                     ptx=(MISS, ["llvm input changed", "opt 3 -> 2"], False), cubin=(HIT, (), True))
    assert why_text(result) == "typing: global K 1 -> 2; ptx rebuilt (opt 3 -> 2), same bytes: cubin reused"


# -- %gpucache stats and the inspector's summary ------------------------------------------


def _column(text, title):
    """{row title: the text in column `title`} of a summary's text (values right-aligned under it)."""
    lines = text.splitlines()
    start = lines[0].index(title)
    return {line.split()[0]: line[start:start + len(title)].strip() for line in lines[1:] if line.strip()}


def _cutoff_cells(page):
    return re.findall(r'<td data-stage="([^"]+)" data-field="cutoffs" data-value="([^"]*)"( data-tier="[^"]*")?'
                      r'(?: class="([^"]*)")?>([^<]*)</td>', page)


def test_stats_and_the_inspector_count_the_hits_cut_off_per_stage(ip):
    cell(ip, "--sm 86 --quiet")
    cell(ip, "--sm 86 --opt 2 --quiet")  # ptx rebuilt to the same bytes: the cubin is cut off
    ip.run_line_magic("gpucache", "clear llvm")
    cell(ip, "--sm 86 --opt 2 --quiet")  # llvm rebuilt to the same bytes: the ptx is cut off
    stats = gpucache_ext.default_cache().stats()
    assert {s: stats[s].cutoffs for s in STAGES} == {"typing": 0, "llvm": 0, "ptx": 1, "cubin": 1}
    view = ip.run_line_magic("gpucache", "stats")
    text = repr(view)
    assert re.split(r"\s{2,}", text.splitlines()[0])[:6] == ["stage", "hits", "misses", "hit rate", "cut off",
                                                             "entries"]
    # typing and llvm are never cut off (their tokens hash no bytes): empty, as the tier rows ("memory")
    assert _column(text, "cut off") == {"typing": "", "memory": "", "llvm": "", "ptx": "1", "cubin": "1", "all": "2"}
    page = view._repr_html_()
    assert '<th scope="col">hit rate</th><th scope="col">cut off</th><th scope="col">entries</th>' in page
    expected = [("ptx", "1", "", "gpucache-hit", "1"), ("cubin", "1", "", "gpucache-hit", "1"),
                ("all", "2", "", "gpucache-hit", "2")]
    assert _cutoff_cells(page) == expected
    assert "the hits cut off (ptx and cubin found because the stage before was rebuilt to the same bytes" in page
    inspector = gpucache_ext.inspector()
    assert _cutoff_cells(inspector.summary.value) == expected
    assert repr(inspector).splitlines()[1:1 + len(text.splitlines())] == text.splitlines()


def test_summary_renders_the_cut_off_column_from_stats_alone():
    from gpucache_ext.pipeline.results import CacheStats, StageStats, TierStats
    from gpucache_ext.views import StatsView

    def stage(hits, misses, cutoffs):
        return StageStats(hits=hits, misses=misses, not_needed=0, cutoffs=cutoffs, entries=misses, bytes=1024 * misses,
                          evictions=0, compile_seconds=0.01 * misses, saved_seconds=0.01 * hits, audits=0,
                          audit_mismatches=0, tiers={"memory": TierStats(hits, 0.01 * hits, misses, 1024 * misses)})

    stats = CacheStats({"typing": stage(3, 1, 0), "llvm": stage(2, 2, 0), "ptx": stage(12, 5, 4),
                        "cubin": stage(15, 2, 10)})
    assert repr(StatsView(stats)) == """\
stage     hits  misses  hit rate  cut off  entries     bytes  evictions  compile time spent  compile time saved  audits  audit mismatches
typing       3       1       75%                 1   1.0 KiB          0               10 ms               30 ms       0                 0
  memory     3               75%                 1   1.0 KiB                                              30 ms
llvm         2       2       50%                 2   2.0 KiB          0               20 ms               20 ms       0                 0
  memory     2               50%                 2   2.0 KiB                                              20 ms
ptx         12       5       71%        4        5   5.0 KiB          0               50 ms              120 ms       0                 0
  memory    12               71%                 5   5.0 KiB                                             120 ms
cubin       15       2       88%       10        2   2.0 KiB          0               20 ms              150 ms       0                 0
  memory    15               88%                 2   2.0 KiB                                             150 ms
all         32      10       76%       14       10  10.0 KiB          0              100 ms              320 ms       0                 0"""  # noqa: E501
    page = StatsView(stats)._repr_html_()
    assert _cutoff_cells(page) == [("ptx", "4", "", "gpucache-hit", "4"), ("cubin", "10", "", "gpucache-hit", "10"),
                                   ("all", "14", "", "gpucache-hit", "14")]
    # a stage with no hit cut off shows 0, unmarked
    quiet = StatsView(CacheStats({**stats.stages, "ptx": stage(12, 5, 0)}))._repr_html_()
    assert '<td data-stage="ptx" data-field="cutoffs" data-value="0">0</td>' in quiet


# -- %gpucache explain ------------------------------------------------------------------


def explain(ip, capsys):
    capsys.readouterr()
    ip.run_line_magic("gpucache", "explain copy")
    return capsys.readouterr().out


def test_explain_predicts_the_stages_reused_if_a_rebuild_gives_the_same_bytes(ip, capsys):
    cell(ip, "--sm 86 --quiet")
    ip.run_line_magic("gpucache", "clear llvm")
    out = explain(ip, capsys)
    assert out.endswith(f"\n\nif compiled now:\n  ({SIG}): llvm misses: entry was evicted or cleared; "
                        "ptx and cubin reused if llvm rebuilds to the same bytes\n")
    assert "rebuilt to the same bytes in the last compile" not in out  # (the first compile built all)
    cell(ip, "--sm 86 --quiet")
    out = explain(ip, capsys)
    assert out.endswith(f"\n\nrebuilt to the same bytes in the last compile:\n  ({SIG}): llvm rebuilt (entry was "
                        "evicted or cleared), same bytes: ptx and cubin reused\n\nif compiled now:\n"
                        f"  ({SIG}): every stage hits\n")
    ip.run_line_magic("gpucache", "clear ptx")
    out = explain(ip, capsys)
    assert out.endswith(f"\n\nif compiled now:\n  ({SIG}): ptx misses: entry was evicted or cleared; "
                        "cubin reused if ptx rebuilds to the same bytes\n")


def test_explain_recalls_a_ptx_rebuilt_to_the_same_bytes(ip, capsys):
    cell(ip, "--sm 86 --quiet")
    cell(ip, "--sm 86 --opt 2 --quiet")
    out = explain(ip, capsys)
    assert f"\n\nrebuilt to the same bytes in the last compile:\n  ({SIG}): ptx rebuilt (opt 3 -> 2), same bytes: " \
           "cubin reused\n\nif compiled now:\n" in out


def test_predicted_misses_join_the_stages_reused_to_the_stage_they_wait_on():
    """The joins follow `Explanation.reused_if`, not the reasons' words."""
    from gpucache_ext.ipython.magic import predicted_misses

    note = "reused if ptx rebuilds to the same bytes"
    assert predicted_misses({
        "llvm": ("fastmath False -> True",), "ptx": ("fastmath False -> True", "llvm input changed"),
        "cubin": ("ptx input changed", note)}, {"cubin": "ptx"}) == [
        "llvm misses: fastmath False -> True",
        "ptx misses: fastmath False -> True; llvm input changed; cubin reused if ptx rebuilds to the same bytes"]
    assert predicted_misses({
        "typing": ("global K 1 -> 2",), "llvm": ("typing input changed",),
        "ptx": ("llvm input changed", "reused if llvm rebuilds to the same bytes"),
        "cubin": ("ptx input changed", note)}, {"ptx": "llvm", "cubin": "ptx"}) == [
        "typing misses: global K 1 -> 2",
        "llvm misses: typing input changed; ptx and cubin reused if llvm rebuilds to the same bytes"]
    # a stage that misses for its own reasons too is not folded in; nor one with no miss before it
    assert predicted_misses({"llvm": ("entry was evicted or cleared",),
                             "ptx": ("llvm input changed", "opt 3 -> 2"), "cubin": ("ptx input changed", note)},
                            {"cubin": "ptx"}) == [
        "llvm misses: entry was evicted or cleared",
        "ptx misses: llvm input changed; opt 3 -> 2; cubin reused if ptx rebuilds to the same bytes"]
    assert predicted_misses({"cubin": ("ptx input changed", note)}, {"cubin": "ptx"}) == [
        "cubin misses: ptx input changed; reused if ptx rebuilds to the same bytes"]
    # words alone join nothing
    assert predicted_misses({"ptx": ("fastmath False -> True",), "cubin": ("ptx input changed", note)}, {}) == [
        "ptx misses: fastmath False -> True", "cubin misses: ptx input changed; " + note]
