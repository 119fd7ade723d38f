"""numba-cuda's own documentation examples, run as %%gpukernel cells.

The examples ship with numba-cuda (``numba/cuda/tests/doc_examples``).  Each
test method's body is run as written in one %%gpukernel cell (no GPU here:
kernels compile through the staged cache and launch on the simulator, and
numba.cuda's memory API is the simulator's), with the example's own
assertions.  Sizes are scaled down where the simulator, which runs every
thread in Python, would take minutes; nothing else is changed.

An example passes, skips itself as written (it asks the device whether it can
run), or is one of `REFUSED`: refused with a gpucache_ext error that says
what is not supported (hardware-only features, and what the staged cache does
not support yet).
"""

from __future__ import annotations

import ast
import textwrap
import unittest
from pathlib import Path

import pytest

from gpucache_ext import GpuCacheError

# Every example is `slow` (they run on the simulator); the quick run takes
# these: one that launches and checks its numbers, one refused.
QUICK = ("test_laplace.test_ex_laplace", "test_cpointer.test_ex_cpointer")

DOC_EXAMPLES = Path(__import__("numba.cuda.tests.doc_examples", fromlist=["_"]).__file__).parent

# (example file, test) -> [(text, replacement)]: sizes for the simulator.
SCALED = {
    ("test_montecarlo", "test_ex_montecarlo"): [("nsamps = 1000000", "nsamps = 4000"),
                                                ("atol=0.001", "atol=0.03")],
    ("test_random", "test_ex_3d_grid"): [("X, Y, Z = 701, 900, 719", "X, Y, Z = 25, 20, 20"),
                                         ("gx, gy, gz = 16, 16, 16", "gx, gy, gz = 2, 1, 1"),
                                         ("bx, by, bz = 8, 8, 8", "bx, by, bz = 4, 4, 2")],
    ("test_laplace", "test_ex_laplace"): [("size = 1001", "size = 101"), ("data[500]", "data[50]"),
                                          ("niter = 10000", "niter = 20")],
    ("test_ffi", "test_ex_extra_includes"): [("size = 10_000", "size = 300")],
    ("test_vecadd", "test_ex_vecadd"): [("N = 100000", "N = 2000")],
    ("test_cg", "test_ex_grid_sync"): [("np.zeros((1024, 1024)", "np.zeros((64, 64)")],
}


# Examples refused, with what the refusal must say: hardware-only features,
# and what the staged cache does not support yet (docs/design.md, "Not supported").
REFUSED = {
    ("test_cpointer", "test_ex_cpointer"): "raw pointers, which need a GPU",
    # these compile (the .cu files are linked); the simulator cannot run external code
    ("test_ffi", "test_ex_linking_cu"): "external code cannot run on the simulator",
    ("test_ffi", "test_ex_extra_includes"): "external code cannot run on the simulator",
    ("test_ffi", "test_ex_from_buffer"): "external code cannot run on the simulator",
}


def doc_examples(scaled=True):
    """(id, path, imports, body, refusal) of every example: the test method's
    body, dedented, its sizes scaled for the simulator where `scaled`."""
    for path in sorted(DOC_EXAMPLES.glob("test_*.py")):
        source = path.read_text()
        tree = ast.parse(source)
        imports = [ast.unparse(node) for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
        lines = source.splitlines()
        for cls in (node for node in tree.body if isinstance(node, ast.ClassDef)):
            for method in cls.body:
                if isinstance(method, ast.FunctionDef) and method.name.startswith("test_"):
                    body = textwrap.dedent("\n".join(lines[method.body[0].lineno - 1:method.end_lineno]))
                    for old, new in SCALED.get((path.stem, method.name), ()) if scaled else ():
                        assert old in body, f"{path.stem}.{method.name}: {old!r} is gone"
                        body = body.replace(old, new)
                    yield (f"{path.stem}.{method.name}", path, imports, body,
                           REFUSED.get((path.stem, method.name)))


def examples(only=None):
    for name, path, imports, body, refusal in doc_examples():
        if only is None or name in only:
            yield pytest.param(path, imports, body, refusal, id=name)


@pytest.mark.slow
@pytest.mark.parametrize("path, imports, body, refusal", list(examples()))
def test_doc_example_runs_as_a_cell(ip, path, imports, body, refusal):
    run_as_a_cell(ip, path, imports, body, refusal)


@pytest.mark.parametrize("path, imports, body, refusal", list(examples(QUICK)))
def test_a_sample_of_the_doc_examples_runs_as_cells(ip, path, imports, body, refusal):
    run_as_a_cell(ip, path, imports, body, refusal)


def test_the_quick_sample_is_there():
    assert sorted(name for name, *_ in doc_examples(scaled=False) if name in QUICK) == sorted(QUICK)


def run_as_a_cell(ip, path, imports, body, refusal):
    """Run an example's body as one %%gpukernel cell; it passes, skips itself, or is refused as `refusal` says."""
    for line in imports:  # the example module's own imports (numpy as np, override_config...)
        try:
            exec(line, ip.user_ns)
        except ImportError:  # numba's test harness (it needs numba-cuda's test extras)
            pass
    ip.user_ns["self"] = unittest.TestCase()  # the examples assert with self.assert*
    ip.user_ns["__file__"] = str(path)  # some find their data files beside it
    result = ip.run_cell(f"%%gpukernel --sm 86 --quiet\n{body}")
    error = result.error_in_exec or result.error_before_exec
    if isinstance(error, unittest.SkipTest):
        pytest.skip(f"the example skips itself here: {error}")
    if refusal is not None:
        assert isinstance(error, GpuCacheError) and refusal in str(error), \
            f"expected a refusal saying {refusal!r}, got {type(error).__name__}: {error}"
        return
    assert result.success, f"{type(error).__name__}: {error}"
