#!/usr/bin/env python
"""Multi-target (fatbin) builds, as ratios measured in one run.

    python bench/bench_fatbin.py [--runs 7] [--json PATH] [--check]

The kernel is the 16x16 tiled matmul of gpucache_ext/samples.py, exec'd
into a fresh namespace before each run (a new function object: nothing is
memoised on it).  No GPU is needed: every target is given explicitly.  The
runs are interleaved (per run: each baseline, then its scenario), and every
figure is the median over the runs; "paired" is the median of the per-run
ratios.

1. Cold 3-target build (sm 80, 86, 90, PTX 80): one
   ``KernelCache.compile_fatbin`` in a new cache, against numba-cuda
   compiling the kernel three times, once per target
   (``cuda.compile_ptx(fn, sig, cc=...)`` then nvJitLink through
   ``cuda.core.Linker``).  Typing and llvm run once.  Target >= 2x.
2. Adding a 4th target (sm 75) to a cached 3-target build: the fatbin for
   75, 80, 86, 90 in the cache that built 80, 86, 90, against numba-cuda
   compiling the kernel for sm 75 from scratch.  Target >= 3x.
3. A new process building the cached 3-target fatbin (its disk tier holds
   it) against a new process building it cold (an empty folder): imports
   and the function are made before the timer in both.  Target >= 20x.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cuda.core import Linker, LinkerOptions, ObjectCode  # noqa: E402
from numba import cuda  # noqa: E402

from gpucache_ext import CompileConfig, KernelCache, samples  # noqa: E402

SIG = samples.MATMUL_SIG
TARGETS = (80, 86, 90)
TARGETS_PLUS = (75, 80, 86, 90)

CHILD = """
import sys, time
from gpucache_ext import CompileConfig, KernelCache, samples
matmul = samples.load(samples.MATMUL)["matmul"]
config = CompileConfig()
cache = KernelCache(directory=sys.argv[1])
start = time.perf_counter()
result = cache.compile_fatbin(matmul, samples.MATMUL_SIG, config, sms=(80, 86, 90))
elapsed = time.perf_counter() - start
misses = sum(s.misses for s in cache.stats().values())
print(elapsed, misses, len(result.fatbin))
"""


def fresh_matmul():
    return samples.load(samples.MATMUL, module="bench_fatbin_kernels")["matmul"].py_func


def timed(fn):
    gc.collect()
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def numba_build(fn, sm: int) -> bytes:
    """numba-cuda compiling `fn` for one target from scratch, then nvJitLink."""
    ptx, _ = cuda.compile_ptx(fn, SIG, cc=divmod(sm, 10), opt=True)
    linker = Linker(ObjectCode.from_ptx(ptx.encode(), name="k.ptx"), options=LinkerOptions(arch=f"sm_{sm}"))
    try:
        return bytes(linker.link("cubin").code)
    finally:
        linker.close()


def cold_three():
    """(numba-cuda three times, gpucache_ext's fatbin) seconds, one run."""
    fn = fresh_matmul()
    cubins, baseline = timed(lambda: [numba_build(fn, sm) for sm in TARGETS])
    assert all(c[:4] == b"\x7fELF" for c in cubins)
    fn = fresh_matmul()
    cache = KernelCache()
    result, ours = timed(lambda: cache.compile_fatbin(fn, SIG, CompileConfig(), sms=TARGETS))
    missed = {s: v.misses for s, v in cache.stats().items()}
    assert missed == {"typing": 1, "llvm": 1, "ptx": 3, "cubin": 3, "fatbin": 1}, missed
    return baseline, ours


def add_a_target():
    """(numba-cuda for sm 75 alone, adding 75 to a cached 80/86/90 fatbin) seconds, one run."""
    fn = fresh_matmul()
    cubin, baseline = timed(lambda: numba_build(fn, 75))
    assert cubin[:4] == b"\x7fELF"
    fn = fresh_matmul()
    cache = KernelCache()
    cache.compile_fatbin(fn, SIG, CompileConfig(), sms=TARGETS)
    before = {s: v.misses for s, v in cache.stats().items()}
    _, ours = timed(lambda: cache.compile_fatbin(fn, SIG, CompileConfig(), sms=TARGETS_PLUS))
    added = {s: v.misses - before[s] for s, v in cache.stats().items()}
    assert added == {"typing": 0, "llvm": 0, "ptx": 1, "cubin": 1, "fatbin": 1}, added
    return baseline, ours


def child(directory):
    out = subprocess.run([sys.executable, "-c", CHILD, str(directory)], cwd=ROOT, check=True,
                         capture_output=True, text=True,
                         env={**os.environ, "GPUCACHE_DIR": str(directory)}).stdout.split()
    return float(out[0]), int(out[1])


def new_process(warm_dir):
    """(cold, from disk) seconds of a new process building the 3-target fatbin, one run."""
    with tempfile.TemporaryDirectory() as empty:
        cold, misses = child(empty)
        assert misses == 9, misses  # typing, llvm, 3 ptx, 3 cubin, fatbin
    warm, misses = child(warm_dir)
    assert misses == 0, misses
    return cold, warm


SCENARIOS = (
    ("cold 3-target build (80, 86, 90 + PTX 80)", "numba-cuda x3 (compile_ptx + nvJitLink per target)", 2.0),
    ("add a 4th target (75) to a cached 3-target build", "numba-cuda for sm_75 from scratch", 3.0),
    ("new process, cached 3-target fatbin on disk", "new process, cold (empty folder)", 20.0),
)


def measure(runs: int) -> list:
    samples_ = [[] for _ in SCENARIOS]
    with tempfile.TemporaryDirectory() as warm_dir:
        child(warm_dir)  # fill the folder the warm new processes read
        cold_three()  # warm-up: numba's and the libraries' one-time costs
        for run in range(runs):
            for index, step in enumerate((cold_three, add_a_target, lambda: new_process(warm_dir))):
                samples_[index].append(step())
            print(f"  run {run + 1}/{runs} done", file=sys.stderr)
    report = []
    for (name, baseline_name, target), pairs in zip(SCENARIOS, samples_):
        base = statistics.median(b for b, _ in pairs)
        ours = statistics.median(o for _, o in pairs)
        paired = statistics.median(b / o for b, o in pairs)
        report.append({"scenario": name, "baseline": baseline_name, "baseline_ms": base * 1e3,
                       "ms": ours * 1e3, "ratio": base / ours, "paired": paired, "target": target,
                       "met": base / ours >= target})
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    report = measure(args.runs)
    print(f"Multi-target builds, matmul {SIG}; medians over {args.runs} interleaved runs")
    print(f"{'scenario':<52} {'baseline':>10} {'gpucache':>10} {'ratio':>7} {'paired':>7} {'target':>7}")
    for row in report:
        print(f"{row['scenario']:<52} {row['baseline_ms']:>8.1f}ms {row['ms']:>8.1f}ms {row['ratio']:>6.2f}x "
              f"{row['paired']:>6.2f}x {'>=' + format(row['target'], 'g') + 'x':>7} "
              f"{'PASS' if row['met'] else 'MISS'}")
        print(f"  baseline: {row['baseline']}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 1 if args.check and not all(row["met"] for row in report) else 0


if __name__ == "__main__":
    sys.exit(main())
