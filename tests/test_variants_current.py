"""Every result a sweep's variant reports is current, or says it is not
(issue 32, item 2).

A sweep (``--max-registers none,32``, ``--fastmath off,on``) binds one
variant and keeps the others' results.  After a global or a device function
the kernel reads changes, `Kernel.variants` and `Kernel.use` compile the
stale results again (through the cache), and the read-only views (the cell
report's variants table, the inspector's variants view) mark them as built
from an earlier state, saying what changed.  The oracle for "current" is a
compile of the same final state in a brand-new `KernelCache`.
"""

import struct

import numpy as np

import gpucache_ext
from gpucache_ext import KernelCache

from .helpers import cell

SIG = "void(float32[:])"

READS_K = f"""
from numba import cuda

@cuda.jit("{SIG}")
def kern(r):
    r[0] = r[0] * K
"""

DEVICE = """
from numba import cuda

@cuda.jit(device=True)
def scale(x):
    return x * {factor}
"""

CALLS_SCALE = """
from numba import cuda

@cuda.jit{sig}
def kern(r):
    r[0] = scale(r[0])
"""


def constant(value: float) -> str:
    """How PTX writes a float32 constant (``0f40500000`` for 3.25)."""
    return "0f%08X" % struct.unpack("<I", struct.pack("<f", value))[0]


def fresh_ptx(kernel, config, argtypes) -> str:
    """The PTX a brand-new cache compiles for the kernel's inputs as they are now."""
    return KernelCache().compile(kernel.py_func, argtypes, config).ptx


def assert_current(kernel, value: float, old: float):
    """Every result `kernel.variants` lists is what a fresh compile of the
    current state gives (and holds `value`, not `old`)."""
    variants = kernel.variants
    assert variants and all(v.results for v in variants)
    for variant in variants:
        for argtypes, result in variant.results.items():
            assert constant(value) in result.ptx and constant(old) not in result.ptx, variant.config.summary()
            assert result.ptx == fresh_ptx(kernel, variant.config, argtypes), variant.config.summary()


def run(ip, code):
    """A plain cell; raise what it raised."""
    result = ip.run_cell(code)
    if not result.success:
        raise result.error_in_exec


def misses(cache):
    return {stage: counts.misses for stage, counts in cache.stats().items()}


def test_variants_are_current_after_a_global_changes_in_another_cell(ip):
    """Issue 32 case 1: a plain cell sets K again; `variants` listed the
    max_registers=32 variant compiled with the old K."""
    run(ip, "K = 2.5")
    cell(ip, "--sm 86 --max-registers none,32 --quiet", READS_K)
    kernel = ip.user_ns["kern"]
    cache = gpucache_ext.default_cache()
    before = misses(cache)
    run(ip, "K = 3.25")
    assert_current(kernel, 3.25, 2.5)
    # (compiled again through the cache: typing, llvm and ptx once, a cubin per variant)
    assert {s: n - before[s] for s, n in misses(cache).items()} == {
        "typing": 1, "llvm": 1, "ptx": 1, "cubin": 2, "fatbin": 0}


def test_a_variant_whose_device_function_changed_is_current_through_variants(ip):
    cell(ip, "--sm 86 --quiet", DEVICE.format(factor=2.5))
    cell(ip, "--sm 86 --max-registers none,32 --quiet", CALLS_SCALE.format(sig=f'("{SIG}")'))
    kernel = ip.user_ns["kern"]
    cell(ip, "--sm 86 --quiet", DEVICE.format(factor=3.25))  # redefined in another cell
    assert_current(kernel, 3.25, 2.5)


def test_use_after_a_device_function_is_redefined_compiles_the_variant_again(ip):
    """Issue 32 case 2: `use(max_registers=32)` moved that variant's
    pre-edit results into `results` (a lazy kernel: nothing recompiled them)."""
    cell(ip, "--sm 86 --quiet", DEVICE.format(factor=2.5))
    cell(ip, "--sm 86 --max-registers none,32 --quiet", CALLS_SCALE.format(sig=""))
    kernel = ip.user_ns["kern"]
    run(ip, "import numpy as np; out = np.ones(1, np.float32); kern[1, 1](out)")
    kernel.use(max_registers=32)
    run(ip, "kern[1, 1](out)")  # the capped variant compiled too, then the first bound again
    kernel.use(max_registers=None)
    cell(ip, "--sm 86 --quiet", DEVICE.format(factor=3.25))
    kernel.use(max_registers=32)
    (argtypes,) = kernel.results
    assert kernel.last.config.max_registers == 32
    assert constant(3.25) in kernel.last.ptx and kernel.last.ptx == fresh_ptx(kernel, kernel.config, argtypes)
    assert_current(kernel, 3.25, 2.5)
    run(ip, "import numpy as np; out = np.ones(1, np.float32); kern[1, 1](out)")
    np.testing.assert_allclose(ip.user_ns["out"], [3.25])


def test_use_back_to_the_first_variant_after_an_edit_binds_current_results(ip):
    run(ip, "K = 2.5")
    cell(ip, "--sm 86 --max-registers none,32 --quiet", READS_K.replace(f'("{SIG}")', ""))
    kernel = ip.user_ns["kern"]
    run(ip, "import numpy as np; out = np.ones(1, np.float32); kern[1, 1](out)")
    kernel.use(max_registers=32)
    run(ip, "kern[1, 1](out)")
    run(ip, "K = 3.25")
    kernel.use(max_registers=None)  # back to the first, whose results were compiled with K = 2.5
    (argtypes,) = kernel.results
    assert kernel.config.max_registers is None
    assert kernel.last.ptx == fresh_ptx(kernel, kernel.config, argtypes) and constant(3.25) in kernel.last.ptx
    assert_current(kernel, 3.25, 2.5)


def test_a_fastmath_sweep_is_current_after_a_global_changes(ip):
    run(ip, "K = 2.5")
    cell(ip, "--sm 86 --fastmath off,on --quiet", READS_K)
    kernel = ip.user_ns["kern"]
    assert [v.config.fastmath for v in kernel.variants] == [False, True]
    run(ip, "K = 3.25")
    assert_current(kernel, 3.25, 2.5)
    kernel.use(fastmath=True)
    assert kernel.last.config.fastmath and kernel.last.ptx == fresh_ptx(kernel, kernel.config, kernel.declared[0])
    assert_current(kernel, 3.25, 2.5)


def test_when_nothing_changed_variants_are_the_same_results_and_nothing_compiles(ip):
    """After a cell that changed nothing, `variants` checks each result once
    (counted as launch checks, not as lookups) and keeps it; a second read
    before the next cell checks nothing; `use` compiles nothing either."""
    cache = gpucache_ext.default_cache()
    run(ip, "K = 2.5")
    cell(ip, "--sm 86 --max-registers none,32 --quiet", READS_K)
    kernel = ip.user_ns["kern"]
    kept = [(v.config, dict(v.results)) for v in kernel.variants]
    before, checks = misses(cache), cache.stats().launch_checks
    run(ip, "K = 2.5  # the same value again")
    now = kernel.variants
    assert [(v.config, v.results) for v in now] == kept
    assert all(r is kept_r for v, (_, old) in zip(now, kept) for r, kept_r in zip(v.results.values(), old.values()))
    assert misses(cache) == before
    assert cache.stats().launch_checks == checks + 2  # (each variant's result, once)
    assert kernel.variants == now
    assert cache.stats().launch_checks == checks + 2  # (no cell ran: nothing checked)
    kernel.use(max_registers=32)
    assert misses(cache) == before  # (found in the cache: the same entries)
    assert kernel.last.stages["cubin"].token == kept[1][1][kernel.declared[0]].stages["cubin"].token
    for variant in kernel.variants:
        for argtypes, result in variant.results.items():
            assert result.ptx == fresh_ptx(kernel, variant.config, argtypes)


def test_the_reports_variants_table_marks_results_built_before_a_global_changed(ip, capsys):
    """The cell compiles its kernel where the decorator runs (as numba does),
    and sets K again after it: the report's variants table, shown at the end
    of the cell, says its rows were built from an earlier state and what
    changed; after the cell, `variants` lists what the final state compiles."""
    capsys.readouterr()
    cell(ip, "--sm 86 --max-registers none,32", "K = 2.5\n" + READS_K + "\nK = 3.25\n")
    out = capsys.readouterr().out
    table = out.split("kern: 2 variants", 1)[1]
    rows = [line for line in table.splitlines() if "sm_86" in line]
    assert len(rows) == 2 and all("EARLIER" in line for line in rows), table
    assert "EARLIER: built from an earlier state of the kernel's inputs (global K 2.5 -> 3.25)" in table
    assert_current(ip.user_ns["kern"], 3.25, 2.5)


def test_a_reports_variants_table_has_no_state_column_when_all_is_current(ip, capsys):
    capsys.readouterr()
    run(ip, "K = 2.5")
    cell(ip, "--sm 86 --max-registers none,32", READS_K)
    out = capsys.readouterr().out
    table = out.split("kern: 2 variants", 1)[1]
    assert "EARLIER" not in table and " state " not in table
    # the same table shown again after K changed marks both rows (the report re-checks when shown)
    from gpucache_ext.ipython.report import CellReport, VariantsTable
    from gpucache_ext.queries import ResourceRow

    kernel = ip.user_ns["kern"]
    results = [r for v in kernel.variants for r in v.results.values()]
    report = CellReport(results, variants=[VariantsTable("kern: 2 variants", [ResourceRow.from_result(r)
                                                                             for r in results], None, [], results)])
    assert "EARLIER" not in repr(report)
    run(ip, "K = 3.25")
    shown = repr(report)
    assert shown.count("EARLIER") == 3 and "global K 2.5 -> 3.25" in shown
    assert report._repr_html_().count('data-state="earlier"') == 2


def test_the_inspectors_variants_view_marks_rows_built_from_an_earlier_state(ip):
    """The inspector shows cached entries and compiles nothing: after K
    changes in a plain cell, the selected entry's variants are marked as
    built from an earlier state; the variants compiled for the new state are not."""
    run(ip, "K = 2.5")
    cell(ip, "--sm 86 --max-registers none,32 --quiet", READS_K)
    kernel = ip.user_ns["kern"]
    old = kernel.last.stages["cubin"].token
    inspector = gpucache_ext.inspector()
    inspector.select("cubin", old)
    page = inspector.variants_view.value
    assert page.count("<tr data-arch") == 2 and "EARLIER" not in page
    run(ip, "K = 3.25")  # (the inspector refreshes after the cell)
    page = inspector.variants_view.value
    assert page.count('data-state="earlier"') == 2 and "global K 2.5 -&gt; 3.25" in page
    assert len(kernel.variants) == 2  # (compiles the new state's variants)
    run(ip, "pass")
    inspector.select("cubin", kernel.last.stages["cubin"].token)
    page = inspector.variants_view.value
    assert page.count("<tr data-arch") == 2 and "EARLIER" not in page


def test_a_compile_made_by_reading_variants_or_by_use_says_so(ip, capsys):
    """The one line a compile after the cell prints names what made it: a
    `variants` read or `use()`, not a launch (none happened)."""
    run(ip, "K = 2.5")
    cell(ip, "--sm 86 --max-registers none,32", READS_K)
    run(ip, "K = 3.25")
    capsys.readouterr()
    assert len(ip.user_ns["kern"].variants) == 2
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("gpukernel: compiled")]
    assert len(lines) == 2 and all(" as its variants were read (" in line for line in lines), lines
    assert "global K 2.5 -> 3.25" in lines[0], lines  # (the second built on what the first just compiled)
    run(ip, "K = 4.5")
    ip.user_ns["kern"].use(max_registers=32)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("gpukernel: compiled")]
    assert lines and all(" at use(max_registers=32) (" in line for line in lines), lines
    run(ip, "K = 5.5")
    run(ip, "import numpy as np; out = np.ones(1, np.float32); kern[1, 1](out)")
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("gpukernel: compiled")]
    assert lines and all(" at this launch (" in line for line in lines), lines
