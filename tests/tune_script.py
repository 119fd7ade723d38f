"""Run by tests/test_tuning.py in a fresh process against the recording
stand-in driver: a kernel of three variants tuned over two block sizes on
device arrays; prints the result as JSON (the cache folder is GPUCACHE_DIR)."""

import json
import sys

import numpy as np
from numba import cuda

from gpucache_ext import CompileConfig, Kernel, KernelCache


def scale(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = x[i] * 2.0


def main():
    cache = KernelCache.from_environment()
    base = CompileConfig(sm=90)
    kernel = Kernel(scale, ["void(float32[:], float32[:])"], base, cache,
                    variants=[base, base.replace(max_registers=32), base.replace(fastmath=True)])
    kernel.compile_declared()
    x = cuda.to_device(np.ones(1024, np.float32))
    r = cuda.device_array(1024, np.float32)
    result = kernel.tune(r, x, blocks=(128, 256), runs=3, force="--force" in sys.argv)
    print(json.dumps({"config": result.config.summary(), "block": result.block, "grid": result.grid,
                      "measured": result.measured, "remembered": result.remembered,
                      "bound": kernel.config.summary(), "rows": len(result.table), "note": result.note}))


main()
