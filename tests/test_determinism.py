"""Artifacts are byte-identical in every process.

numba collects the libraries a kernel links (its device functions) in a set,
so their order follows memory addresses; the pipeline puts them in a
canonical order.  Each compile here runs in a fresh interpreter with its own
PYTHONHASHSEED (and its own address layout), and the NVVM IR, PTX and cubin
must come out the same every time.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow  # fresh interpreters

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent(
    """
    import hashlib, json, sys
    from numba import cuda
    from gpucache_ext import CompileConfig, KernelCache

    @cuda.jit(device=True)
    def leaf(x):
        return x * 3.0

    @cuda.jit(device=True)
    def left(x):
        return leaf(x) + 1.0

    @cuda.jit(device=True)
    def right(x):
        return leaf(x) - 2.0

    @cuda.jit(device=True)
    def third(x):
        return x / 7.0

    def kernel(r, x):
        i = cuda.grid(1)
        if i < r.size:
            r[i] = left(x[i]) * right(x[i]) + third(x[i])

    out = {}
    for config in (CompileConfig(sm=80), CompileConfig(sm=86, debug=True, opt=0),
                   CompileConfig(sm=90, lto=True)):
        res = KernelCache().compile(kernel, "void(float64[:], float64[:])", config)
        out[config.summary()] = [hashlib.sha256(x).hexdigest() for x in
                                 (res.llvm_ir.encode(), res.ptx.encode(), res.cubin)]
    json.dump(out, sys.stdout)
    """
)


def _compile_in_fresh_process(seed):
    env = dict(os.environ, PYTHONHASHSEED=str(seed))
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_artifacts_are_identical_across_processes_and_hash_seeds():
    runs = [_compile_in_fresh_process(seed) for seed in (0, 1, 12345, 987654321)]
    for run in runs[1:]:
        assert run == runs[0]
