"""numba's CUDA simulator as users turn it on: ``NUMBA_ENABLE_CUDASIM=1``.

numba reads the variable once, at import, so each test runs its cells in a
fresh process with it set.  Under the simulator numba compiles nothing (and
numba-cuda's compiler cannot even be imported): the extension loads, a
%%gpukernel cell runs exactly as the same cell runs without the magic (its
output, its last value, its error), says in one line that the simulator is
on, and the cache, ``%gpucache``, the inspector and the ``gpucache`` command
still show what the persistent tiers hold.  `.ci/run` runs this module once
more with the variable set for pytest itself.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import run_notebook, run_python

ROOT = Path(__file__).resolve().parent.parent
SIMULATOR = {"NUMBA_ENABLE_CUDASIM": "1"}

# Cells as numba-cuda's tutorials write them, each run plain and then under %%gpukernel.
CELLS = [
    # a kernel, a launch, the last expression shown
    """from numba import cuda
import numpy as np

@cuda.jit
def add_one(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = x[i] + 1

x = np.arange(8, dtype=np.float32)
r = np.zeros_like(x)
add_one[2, 4](r, x)
print("sum", r.sum())
r""",
    # shared memory and a signature, the result hidden by ';'
    """@cuda.jit("void(float32[:], float32[:])")
def reverse(r, x):
    tile = cuda.shared.array(8, dtype=np.float32)
    i = cuda.threadIdx.x
    tile[i] = x[i]
    cuda.syncthreads()
    r[i] = tile[7 - i]

reverse[1, 8](r, x)
r;""",
    # a device function, an atomic, device arrays
    """@cuda.jit(device=True)
def square(v):
    return v * v

@cuda.jit
def total(acc, x):
    cuda.atomic.add(acc, 0, square(x[cuda.grid(1)]))

acc = cuda.to_device(np.zeros(1, dtype=np.float32))
total[1, 8](acc, cuda.to_device(x))
float(acc.copy_to_host()[0])""",
    # an error raised inside a kernel
    """@cuda.jit
def broken(r):
    r[0] = undefined_name

broken[1, 1](r)""",
]

COMPARE = r"""
import contextlib, io, json, re, sys
from IPython.testing.globalipapp import start_ipython

cells = json.loads(sys.argv[1])
ip = start_ipython()
ip.run_line_magic("load_ext", "gpucache_ext")
outcomes = {}
# (the plain cell's first line a comment: its lines are numbered as the magic cell's)
for way, prefix in (("plain", "# a plain cell\n"), ("magic", "%%gpukernel --sm 86\n")):
    ip.reset()
    seen = []
    for cell in cells:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            result = ip.run_cell(prefix + cell, store_history=True)
        error = result.error_in_exec or result.error_before_exec
        value = result.result
        printed = re.sub(r"Cell In\[\d+\]", "Cell In[N]", out.getvalue())
        seen.append({"printed": printed, "value": value.tolist() if hasattr(value, "tolist") else value,
                     "error": None if error is None else [type(error).__name__, str(error).split(":")[-1]],
                     "kernels": sorted(type(v).__name__ for k, v in ip.user_ns.items()
                                       if type(v).__name__.endswith("Kernel"))})
    outcomes[way] = seen
print(json.dumps(outcomes))
"""


def under_the_simulator(code, *args):
    return run_python(code, *args, env=SIMULATOR, json_line=True)


def test_a_cell_under_the_magic_runs_as_the_plain_cell_runs_on_the_simulator():
    outcomes = under_the_simulator(COMPARE, json.dumps(CELLS))
    note = "numba's CUDA simulator is on (NUMBA_ENABLE_CUDASIM=1): this cell ran as a plain cell"
    for plain, magic in zip(outcomes["plain"], outcomes["magic"], strict=True):
        assert note not in plain["printed"]
        assert (note in magic["printed"]) == (magic["error"] is None)  # (a failed cell shows its error alone)
        magic["printed"] = "".join(line for line in magic["printed"].splitlines(True) if note not in line)
        assert magic == plain
    first, hidden, total, broken = outcomes["magic"]
    assert first["value"] == [1, 2, 3, 4, 5, 6, 7, 8] and "sum 36.0" in first["printed"]
    assert hidden["value"] is None  # the ';'
    assert total["value"] == 140.0
    assert broken["error"][0] == "NameError"
    assert set(first["kernels"]) == {"FakeCUDAKernel"}  # numba's simulator's own kernels


@pytest.mark.slow  # (about 5 s of processes under the simulator; the simulator's own cells are quick, above)
def test_the_cache_the_inspector_and_the_cli_still_show_the_persistent_tiers(tmp_path):
    run_python("""
        import sys
        from gpucache_ext import CompileConfig, KernelCache
        from tests import kernels
        KernelCache(directory=sys.argv[1]).compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=86))
        """, tmp_path, env={"NUMBA_ENABLE_CUDASIM": "0"})  # compiled without the simulator
    code = """
        import json, sys
        from IPython.testing.globalipapp import start_ipython
        import gpucache_ext
        ip = start_ipython()
        ip.run_line_magic("load_ext", "gpucache_ext")
        inspector = ip.run_line_magic("gpucache", "")
        stats = ip.run_line_magic("gpucache", "stats")
        explained = ip.run_cell("%gpucache explain axpy").error_in_exec
        print(json.dumps({"inspector": type(inspector).__name__, "stats": type(stats).__name__,
                          "entries": sorted(e.stage for e in gpucache_ext.default_cache().entries()),
                          "text": inspector._repr_mimebundle_()["text/plain"], "explained": str(explained)}))
        """
    seen = run_python(code, env={**SIMULATOR, "GPUCACHE_DIR": str(tmp_path)}, json_line=True)
    assert seen["inspector"] == "Inspector" and seen["stats"] == "StatsView"
    assert seen["entries"] == ["cubin", "llvm", "ptx"]  # what the disk tier holds
    assert "axpy" in seen["text"]
    assert "numba's CUDA simulator is on" in seen["explained"]
    done = subprocess.run([sys.executable, "-m", "gpucache_ext", "--dir", str(tmp_path), "ls"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env={**os.environ, **SIMULATOR})
    assert done.returncode == 0 and done.stdout.count("axpy") == 3, done.stdout + done.stderr


@pytest.mark.slow  # a Jupyter kernel
def test_a_notebook_under_the_simulator_gives_the_plain_notebooks_outputs(monkeypatch):
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")  # (the kernel inherits it)

    def executed(prefix):
        return run_notebook(["%load_ext gpucache_ext"] + [prefix + cell for cell in CELLS])

    def outputs(cell):
        found = []
        for output in cell.outputs:
            if output.output_type == "error":
                found.append(("error", output.ename))
            elif output.output_type == "execute_result":
                found.append(("result", output.execution_count, output.data["text/plain"]))
            elif output.output_type == "stream":
                found.append(("stream", output.text))
        return found

    plain, magic = executed(""), executed("%%gpukernel --sm 86\n")
    for ours, theirs in zip(magic.cells[1:], plain.cells[1:], strict=True):
        shown = [o for o in ours.outputs if o.output_type == "display_data"]
        failed = any(o.output_type == "error" for o in ours.outputs)
        assert [o.data["text/plain"].startswith("numba's CUDA simulator is on") for o in shown] == \
            ([] if failed else [True])
        assert outputs(ours) == outputs(theirs)
    assert ("result", 1 + 1, "array([1., 2., 3., 4., 5., 6., 7., 8.], dtype=float32)") in outputs(magic.cells[1])


@pytest.mark.slow  # an interpreter (CI's simulator step runs this module whole)
def test_the_python_api_under_the_simulator_jit_as_numba_and_the_compile_api_says_why_not():
    """``gpucache_ext.jit`` is numba's simulator ``jit`` there (the same
    kernels, run in Python); ``KernelCache.compile`` refuses, naming the
    simulator and the fix, since numba-cuda's compiler cannot load."""
    seen = run_python("""
        import json
        import numpy as np
        from numba import cuda
        import gpucache_ext
        from gpucache_ext import CompileConfig, GpuCacheError, KernelCache

        def fill(r):
            i = cuda.grid(1)
            if i < r.size:
                r[i] = i * 2.5

        results = []
        for decorate in (cuda.jit, gpucache_ext.jit, gpucache_ext.jit("void(float64[:])")):
            kernel = decorate(fill)
            r = np.zeros(4)
            kernel[1, 4](r)
            results.append([type(kernel).__name__, r.tolist()])
        try:
            KernelCache().compile(fill, "void(float64[:])", CompileConfig(sm=86))
            refused = None
        except GpuCacheError as exc:
            refused = str(exc)
        print(json.dumps({"results": results, "refused": refused}))
        """, env=SIMULATOR, json_line=True)
    assert seen["results"] == [["FakeCUDAKernel", [0.0, 2.5, 5.0, 7.5]]] * 3
    assert "NUMBA_ENABLE_CUDASIM" in seen["refused"] and "unset" in seen["refused"]
