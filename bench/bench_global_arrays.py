#!/usr/bin/env python
"""What a kernel reading a large global numpy array pays at every hit.

A compile hashes everything the kernel reads, arrays by content, at every
call (a hit too, and the first launch after each cell), because only the
content says whether the array changed.  This measures that cost for a
kernel reading a 64 MiB float64 global, against the same kernel reading a
4 KiB one (the fixed cost of a hit) and against SHA-256 over the 64 MiB (how
arrays were hashed before XXH3-128), in one run, as medians of ``--runs``.

The timed call is `KernelCache.tokens`: every token of the compile, from a
fresh snapshot of what the kernel reads, which is what a hit computes before
its lookups (the lookups do not depend on the array's size).  A real hit of
this kernel needs a cold compile first, and numba takes minutes to bake a
64 MiB constant into the code.  No GPU is needed.

    python bench/bench_global_arrays.py              # 15 runs
    python bench/bench_global_arrays.py --check      # exit 1 above 20 ms per hit

Target (issue 20): at most 20 ms per hit with a 64 MiB global.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.append(ROOT)

import numpy as np  # noqa: E402

from gpucache_ext import CompileConfig, KernelCache  # noqa: E402

SIG = "void(float64[:])"
CONFIG = CompileConfig(sm=86)
TARGET_MS = 20.0


def kernel_reading(array):
    ns = {"BIG": array}
    exec("def kernel(r):\n    r[0] = BIG[7]\n", ns)
    return ns["kernel"]


def median_ms(fn, runs: int) -> float:
    fn()  # warm: imports, memos
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--check", action="store_true", help=f"exit 1 when a hit costs more than {TARGET_MS} ms")
    args = parser.parse_args(argv)
    cache = KernelCache()
    big = np.random.default_rng(0).random(8 * 1024 * 1024)  # 64 MiB
    small = big[:512].copy()  # 4 KiB
    big_kernel, small_kernel = kernel_reading(big), kernel_reading(small)
    big_ms = median_ms(lambda: cache.tokens(big_kernel, SIG, CONFIG), args.runs)
    small_ms = median_ms(lambda: cache.tokens(small_kernel, SIG, CONFIG), args.runs)
    sha_ms = median_ms(lambda: hashlib.sha256(big.view(np.uint8)).hexdigest(), args.runs)
    print(f"gpucache_ext: a hit's tokens with a global array, median of {args.runs} runs")
    print(f"{'64 MiB global':<28} {big_ms:8.2f} ms   target <= {TARGET_MS:g} ms   "
          f"{'PASS' if big_ms <= TARGET_MS else 'FAIL'}")
    print(f"{'4 KiB global':<28} {small_ms:8.2f} ms   (64 MiB costs {big_ms / small_ms:.1f}x a 4 KiB one)")
    print(f"{'SHA-256 of the 64 MiB':<28} {sha_ms:8.2f} ms   (the hit costs {big_ms / sha_ms:.2f}x of "
          "hashing the array alone with SHA-256)")
    return 1 if args.check and big_ms > TARGET_MS else 0


if __name__ == "__main__":
    sys.exit(main())
