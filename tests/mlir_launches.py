"""Launches of numba-cuda-mlir kernels, run under the recording stand-in
driver (tests/fakecuda) one way or the other (tests/test_mlir_launch.py):

    python tests/mlir_launches.py plain|cached CACHE_DIR

``plain``: numba-cuda-mlir's own ``cuda.jit`` kernels; ``cached``: the same
kernels through `gpucache_ext.backends.numba_cuda_mlir.launch.jit` (overloads
from a `KernelCache` in CACHE_DIR).  The last line printed is JSON: what each
compile did (cached: per stage, hit or miss).
"""

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from numba_cuda_mlir import cuda  # noqa: E402

from tests import mlir_kernels as mk  # noqa: E402

mode, folder = sys.argv[1], sys.argv[2]
if mode == "cached":
    from gpucache_ext import KernelCache
    from gpucache_ext.backends.numba_cuda_mlir.launch import jit

    cache = KernelCache(directory=folder)

    def wrap(kernel):
        return jit(kernel, cache=cache)
else:
    def wrap(kernel):
        return kernel

axpy, transcendental, shared_sum, tiled_2d = (wrap(k) for k in (mk.axpy, mk.transcendental, mk.shared_sum,
                                                                 mk.tiled_2d))
n = 256
x = np.arange(n, dtype=np.float32) + 1
y = np.ones(n, dtype=np.float32)
r = np.zeros(n, dtype=np.float32)
axpy[2, 128](r, np.float32(2.0), x, y)                      # host arrays: copied in and back
dx, dy, dr = cuda.to_device(x), cuda.to_device(y), cuda.device_array_like(r)
axpy[4, 64](dr, np.float32(3.0), dx, dy)                    # device arrays, another configuration
axpy[4, 64](dr, np.float32(3.0), dx, dy)                    # the same again
transcendental[1, 256](dr, dx)
shared_sum[2, 128](dr, dx)
stream = cuda.stream()
a = cuda.to_device(np.ones((16, 8)), stream=stream)
b = cuda.to_device(np.ones((8, 16)), stream=stream)
c = cuda.device_array((16, 16), stream=stream)
tiled_2d[(2, 2), (8, 8), stream](c, a, b)                    # 2-D, on a stream
stream.synchronize()
done = {}
if mode == "cached":
    for kernel in (axpy, transcendental, shared_sum, tiled_2d):
        for result in kernel.results.values():
            done[f"{kernel.py_func.__name__} #{len(done)}"] = {s: r.outcome.name for s, r in result.stages.items()}
print(json.dumps(done))
