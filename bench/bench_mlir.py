#!/usr/bin/env python
"""numba-cuda-mlir through the cache, as ratios to numba-cuda-mlir doing the same work.

    python bench/bench_mlir.py [--runs 7] [--json PATH]

Every figure is a ratio against a baseline measured in the same run,
interleaved (per run: the baseline, then each scenario), the median over
``--runs`` runs; higher is better.  No GPU: numba-cuda-mlir's host query is
answered with the target (`backends.numba_cuda_mlir.compiler.answering_host_query`).

Baseline, in this process: numba-cuda-mlir's own ``compile_cubin`` of a
fresh function object (the 16x16 tiled matmul of `gpucache_ext.samples`,
imported from numba_cuda_mlir) for the timed config.  Scenarios, each one
``KernelCache.compile`` (set-up untimed):

    cold            new cache, fresh function, sm 86
    exact repeat    the same call again
    opt 3 -> 0      new cache warmed at opt 3, time opt 0
    fastmath        warmed without, time with (the cubin: a cut-off hit where the PTX repeats)
    sm 80 -> 86     warmed at sm 80, time sm 86
    launch bounds   warmed without, time launch_bounds=256
    cell of 4       four kernels (the matmul and three more) cold, against four compile_cubin

In new processes (imports before the timer): the first compile of the
matmul in a process whose disk cache holds it, against numba-cuda-mlir's
cold compile in a new process, and against numba-cuda-mlir's own
``cache=True`` loading it in a new process (its cache keys none of opt,
fastmath, lineinfo, debug: the figure is its speed, not its soundness).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpucache_ext import CompileConfig, KernelCache, samples  # noqa: E402

SIG = samples.MATMUL_SIG
EXTRA = '''
from numba_cuda_mlir import cuda
import math

@cuda.jit
def axpy(r, a, x, y):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = a * x[i] + y[i]

@cuda.jit
def wave(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = math.sin(x[i]) * math.exp(-x[i])

@cuda.jit
def scale2d(c, a):
    i, j = cuda.grid(2)
    if i < c.shape[0] and j < c.shape[1]:
        c[i, j] = 2 * a[i, j]
'''
EXTRA_SIGS = {"axpy": "void(float32[:], float32, float32[:], float32[:])", "wave": "void(float32[:], float32[:])",
              "scale2d": "void(float32[:, :], float32[:, :])"}


def matmul_source() -> str:
    """The sample's matmul, its import swapped: what a user migrating writes."""
    assert "from numba import cuda, float32" in samples.MATMUL
    return samples.MATMUL.replace(
        "from numba import cuda, float32",
        "from numba_cuda_mlir import cuda\nfrom numba_cuda_mlir.numba_cuda.types import float32")


def fresh(source: str, name: str):
    """A new numba_cuda_mlir kernel object from `source` (nothing memoised on it)."""
    namespace = {"__name__": f"bench_mlir_{time.perf_counter_ns()}"}
    exec(compile(source, f"<bench_mlir {name}>", "exec"), namespace)
    return namespace[name]


def own_cubin(kernel, sig, config: CompileConfig) -> float:
    from numba_cuda_mlir import cuda

    from gpucache_ext.backends.numba_cuda_mlir import compiler

    options = {"chip": config.sm_name, "opt_level": config.opt, "fastmath": config.fastmath}
    if config.launch_bounds:
        options["launch_bounds"] = config.launch_bounds[0]
    start = time.perf_counter()
    with compiler.answering_host_query(config.cc):
        cuda.compile_cubin(kernel.py_func, sig, **options)
    return time.perf_counter() - start


def timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def _compile_all(cache, kernels, config) -> None:
    for kernel, sig in kernels:
        cache.compile(kernel, sig, config)


def in_process(runs: int) -> dict:
    source = matmul_source()
    base = CompileConfig(sm=86)
    changes = {"opt 3 -> 0": (base, base.replace(opt=0)),
               "fastmath": (base, base.replace(fastmath=True)),
               "sm 80 -> 86": (base.replace(sm=80), base),
               "launch bounds": (base, base.replace(launch_bounds=256))}
    times = {name: [] for name in ("baseline", "cold", "exact repeat", *changes, "cell of 4", "own cell of 4")}
    own_times = {name: [] for name in changes}
    # warm up both compilers (numba-cuda-mlir's first compile in a process initialises it: seconds)
    own_cubin(fresh(source, "matmul"), SIG, base)
    KernelCache().compile(fresh(source, "matmul"), SIG, base)
    for _ in range(runs):
        times["baseline"].append(own_cubin(fresh(source, "matmul"), SIG, base))
        cache, kernel = KernelCache(), fresh(source, "matmul")
        times["cold"].append(timed(functools.partial(cache.compile, kernel, SIG, base)))
        times["exact repeat"].append(timed(functools.partial(cache.compile, kernel, SIG, base)))
        for name, (before, after) in changes.items():
            own_times[name].append(own_cubin(fresh(source, "matmul"), SIG, after))
            cache, kernel = KernelCache(), fresh(source, "matmul")
            cache.compile(kernel, SIG, before)
            times[name].append(timed(functools.partial(cache.compile, kernel, SIG, after)))
        kernels = [(fresh(source, "matmul"), SIG)] + [(fresh(EXTRA, n), s) for n, s in EXTRA_SIGS.items()]
        times["own cell of 4"].append(sum(own_cubin(k, s, base) for k, s in kernels))
        kernels = [(fresh(source, "matmul"), SIG)] + [(fresh(EXTRA, n), s) for n, s in EXTRA_SIGS.items()]
        times["cell of 4"].append(timed(functools.partial(_compile_all, KernelCache(), kernels, base)))
    median = {name: statistics.median(values) for name, values in times.items()}
    own = {name: statistics.median(values) for name, values in own_times.items()}
    figures = {"baseline ms": median["baseline"] * 1e3,
               "cold": median["baseline"] / median["cold"],
               "exact repeat": median["baseline"] / median["exact repeat"],
               "exact repeat ms": median["exact repeat"] * 1e3}
    figures.update({name: own[name] / median[name] for name in changes})
    figures["cell of 4"] = median["own cell of 4"] / median["cell of 4"]
    return figures


CHILD = """
import sys, time
from gpucache_ext import CompileConfig, KernelCache
from gpucache_ext.backends.numba_cuda_mlir import compiler
sys.path.insert(0, sys.argv[2])
import bench_kernel
config = CompileConfig(sm=86)
start = time.perf_counter()
if sys.argv[3] == "cache":
    result = KernelCache(directory=sys.argv[1]).compile(bench_kernel.matmul, bench_kernel.SIG, config)
    what = "".join("h" if r.hit else "m" for r in result.stages.values())
else:  # numba-cuda-mlir's own: cold, or its cache=True (the kernel is cuda.jit(cache=True))
    with compiler.answering_host_query(config.cc):
        bench_kernel.cached.compile(bench_kernel.SIG)
    what = str(dict(bench_kernel.cached.stats.cache_hits))
print(time.perf_counter() - start, what)
"""


def _child(folder, module, env, mode):
    out = subprocess.run([sys.executable, "-c", CHILD, str(Path(folder) / "cache"), str(module), mode],
                         cwd=ROOT, env=env, check=True, capture_output=True, text=True).stdout.split()
    return float(out[0]), out[1]


def new_processes(runs: int) -> dict:
    source = matmul_source()
    figures = {"first hit": [], "own cold": [], "own cache=True": []}
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as folder:
            module = Path(folder) / "module"
            module.mkdir()
            cached = source.replace("@cuda.jit", "@cuda.jit(cache=True)")
            (module / "bench_kernel.py").write_text(
                textwrap.dedent(f"""
{source}
SIG = {SIG!r}
""") + "\n" + cached.replace("def matmul", "def cached_matmul") + "\ncached = cached_matmul\n")
            env = {**os.environ, "NUMBA_CACHE_DIR": str(Path(folder) / "own"), "GPUCACHE_DIR": folder}

            child = functools.partial(_child, folder, module, env)
            figures["own cold"].append(child("own")[0])  # (also fills its cache=True folder)
            figures["own cache=True"].append(child("own")[0])
            child("cache")
            seconds, what = child("cache")
            assert "m" not in what.replace("m", "", 0) or what.count("m") <= 1, what  # (typing: not needed)
            figures["first hit"].append(seconds)
    median = {name: statistics.median(values) for name, values in figures.items()}
    return {"new process: first hit vs its cold compile": median["own cold"] / median["first hit"],
            "new process: first hit vs its own cache=True": median["own cache=True"] / median["first hit"],
            "new process: first hit ms": median["first hit"] * 1e3}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", help="write the figures here as JSON")
    args = parser.parse_args(argv)
    figures = {**in_process(args.runs), **new_processes(max(3, args.runs // 2))}
    print(f"gpucache_ext's mlir backend against numba-cuda-mlir, medians of {args.runs} runs (ratio: higher is better)")
    for name, value in figures.items():
        print(f"  {name:48s} {value:10.2f}{'' if name.endswith('ms') else 'x'}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
