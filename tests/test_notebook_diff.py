"""Notebooks in the style of the public numba-cuda tutorials run as written
and under the magic, each in fresh Jupyter kernels, must show the same cell
by cell (tests/notebook_diff.py), on the simulator and on the recording
stand-in driver, where they must also make the same driver calls; a second
run in the same kernel is all hits."""

import pytest

from . import fakecuda, notebook_diff
from .notebook_diff import Cell, Run, differences, same_text
from .test_launch_traces import comparable, first_difference
from .tutorial_notebooks import NOTEBOOKS, doc_examples_notebook


def needs(where):
    if where == "fakecuda" and fakecuda.skip_reason():
        pytest.skip(fakecuda.skip_reason())


def test_the_comparison_finds_what_differs():
    def run(*cells):
        return Run([Cell("x = 1", *cell) for cell in cells], [], 0.0)

    plain = run((None, "1.0\n", "array([1., 2.])", []), ("ZeroDivisionError: division by zero", "", None, []))
    assert differences(plain, plain) == []
    assert differences(plain, run((None, "1.0000001\n", "array([1., 2.])", []),
                                  ("ZeroDivisionError: division by zero", "", None, []))) == []  # within tolerance
    found = differences(plain, run((None, "1.0\n", "array([1., 3.])", []), (None, "", None, ["shown"])))
    assert [line.split(": ")[1].split()[0] for line in found] == ["result", "error", "displayed"]
    assert not same_text("a 1 b", "a 1 c") and not same_text(None, "") and same_text(None, None)
    assert same_text("AttributeError: tid=[3, 0, 0] ctaid=[0, 0, 0]: no width",
                     "AttributeError: tid=[4, 0, 0] ctaid=[0, 0, 0]: no width")  # (the simulator's threads)
    assert same_text("<DeviceNDArray object at 0x7f19b8044610>", "<DeviceNDArray object at 0x7fc270882190>")
    assert not same_text("<DeviceNDArray object at 0x7f19b8044610>", "<HostArray object at 0x7f19b8044610>")


@pytest.mark.slow  # two Jupyter kernels (tests/test_cell_errors.py: the same through nbclient, quick)
def test_cells_that_fail_fail_alike_under_the_magic(tmp_path):
    """The quick sample: a typing error at a launch, a cell that raises after
    defining a kernel (it stays bound, as in a plain cell), a declared kernel
    launched with an array of another layout (numba converts it; one of
    another dtype the magic refuses, where numba would reinterpret its bytes:
    tests/test_launch_types.py)."""
    needs("fakecuda")
    cells = NOTEBOOKS["cells_that_fail"]
    plain = notebook_diff.run(cells, "plain", "fakecuda", tmp_path / "plain")
    magic = notebook_diff.run(cells, "magic", "fakecuda", tmp_path / "magic")
    assert differences(plain, magic) == []
    errors = [cell.error.split(":")[0] if cell.error else None for cell in magic.cells]
    assert errors[:5] == [None, None, "TypingError", "ZeroDivisionError", None] and errors[6] is None
    assert magic.cells[4].result == "'launched'" and magic.cells[6].stdout == "still going\n"


@pytest.mark.slow  # two Jupyter kernels a notebook and a place
@pytest.mark.parametrize("where", ["fakecuda", "simulator"])
@pytest.mark.parametrize("name", list(NOTEBOOKS))
def test_a_tutorial_notebook_shows_the_same_under_the_magic(tmp_path, name, where):
    needs(where)
    cells = NOTEBOOKS[name]
    plain = notebook_diff.run(cells, "plain", where, tmp_path / "plain")
    magic = notebook_diff.run(cells, "magic", where, tmp_path / "magic", again=True)
    assert differences(plain, magic) == []
    assert differences(Run(magic.cells, [], 0), Run(magic.again, [], 0)) == []  # the second run shows the same
    if where == "fakecuda":  # (numba's simulator has no CUDA ufuncs: there both runs fail alike)
        assert sum(cell.error is None for cell in magic.cells) >= len(cells) // 2  # (the notebook mostly ran)
        expected, got = comparable(plain.calls), comparable(magic.calls[:len(magic.calls)])
        got = got[:len(expected)]  # (the second run's calls follow)
        assert expected == got, first_difference(expected, got)
        # the second run in the same kernel compiles nothing (a kernel that fails to type is typed again)
        assert magic.misses and {stage: n for stage, n in magic.misses.items() if stage != "typing"} == \
            dict.fromkeys([s for s in magic.misses if s != "typing"], 0)
        if name != "cells_that_fail":
            assert magic.misses["typing"] == 0


@pytest.mark.slow  # two Jupyter kernels
def test_one_line_at_the_top_gives_a_notebook_the_cache_and_changes_nothing_it_shows(tmp_path):
    needs("fakecuda")
    cells = NOTEBOOKS["basics"]
    plain = notebook_diff.run(cells, "plain", "fakecuda", tmp_path / "plain")
    auto = notebook_diff.run(cells, "auto", "fakecuda", tmp_path / "auto", again=True)
    assert differences(plain, auto) == []
    assert auto.misses["cubin"] == 0 and auto.misses["llvm"] == 0
    assert (tmp_path / "auto" / "cache").is_dir()  # (the cache was used: its disk tier exists)


@pytest.mark.slow  # two Jupyter kernels
def test_numba_cudas_documentation_examples_show_the_same_under_the_magic(tmp_path):
    """numba-cuda's own documentation examples, one notebook, on the stand-in
    driver: every example compiles and launches (kernels compute nothing
    there, so each example's check of its numbers fails, at the same place
    under the magic), with the same driver calls."""
    needs("fakecuda")
    cells = doc_examples_notebook()
    plain = notebook_diff.run(cells, "plain", "fakecuda", tmp_path / "plain")
    magic = notebook_diff.run(cells, "magic", "fakecuda", tmp_path / "magic")
    assert differences(plain, magic) == []
    launched = [cell for cell in plain.cells[1:] if cell.error is None or cell.error.startswith("AssertionError")]
    assert len(launched) >= len(cells) - 3  # (as written, nearly every example got as far as its checks)
    # every call in order, but for frees: numba frees what the garbage collector finalised, in
    # batches, and which of the examples' arrays the kernel still holds after their errors (their
    # tracebacks, Jupyter's history of them) differs; each run frees only what it allocated, once
    expected, got = ([call for call in comparable(run.calls) if call["call"] != "cuMemFree"] for run in (plain, magic))
    assert expected == got, first_difference(expected, got)
    for run in (plain, magic):
        allocated = {c["args"]["address"]: c["args"]["size"] for c in run.calls if c["call"] == "cuMemAlloc"}
        freed = [(c["args"]["address"], c["args"]["size"]) for c in run.calls if c["call"] == "cuMemFree"]
        assert freed and len(set(freed)) == len(freed) and all(allocated.get(a) == size for a, size in freed)
    assert sum(call["call"].startswith("cuLaunch") for call in magic.calls) >= len(cells) - 3
