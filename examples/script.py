"""A plain Python script whose kernels are compiled through gpucache_ext's cache.

    python examples/script.py

``gpucache_ext.jit`` stands in for ``numba.cuda.jit``.  The kernels are
cached per stage on disk (``GPUCACHE_DIR``, default the user cache folder),
so a second run of this script compiles nothing: it prints where each stage
came from.  Without a GPU the kernels run on numba's CUDA simulator; their
PTX and cubin are still built and cached.
"""

import numpy as np
from numba import cuda

import gpucache_ext


@gpucache_ext.jit(device=True)
def clamp(x, low, high):
    return min(max(x, low), high)


@gpucache_ext.jit("void(float32[:], float32, float32[:], float32[:])", fastmath=True)
def axpy(r, a, x, y):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = a * x[i] + y[i]


@gpucache_ext.jit  # compiled at its first launch, for the arguments' types
def clipped(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = clamp(x[i], 0.0, 1.0)


def main() -> int:
    n = 1000
    x = np.linspace(-1, 2, n).astype(np.float32)
    y = np.ones(n, np.float32)
    r = np.zeros(n, np.float32)
    blocks = (n + 127) // 128
    axpy[blocks, 128](r, np.float32(2.0), x, y)
    np.testing.assert_allclose(r, 2 * x + y, rtol=1e-6)

    out = np.zeros(n)
    clipped[blocks, 128](out, x.astype(np.float64))
    np.testing.assert_allclose(out, np.clip(x, 0, 1))

    for kernel in (axpy, clipped):
        result = kernel.last
        where = ", ".join(f"{stage} {layer.outcome.value}" + (f" ({layer.tier})" if layer.tier else "")
                          for stage, layer in result.stages.items())
        print(f"{kernel.__name__}{result.signature_text} [{kernel.summary()}]: {where}")
    stats = gpucache_ext.default_cache().stats()
    print("cache:", ", ".join(f"{stage} {s.hits} hit{'s' * (s.hits != 1)}/{s.misses} miss"
                              f"{'es' * (s.misses != 1)}" for stage, s in stats.items() if s.lookups))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
