"""Kernels written for numba-cuda-mlir (``from numba_cuda_mlir import cuda``),
as a user migrating from numba-cuda writes them: the tests of the mlir
backend compile these (import this module only where numba-cuda-mlir is
installed: `pytest.importorskip`)."""

import math

import numpy as np
from numba_cuda_mlir import cuda

ALPHA = np.float32(2.5)


@cuda.jit
def axpy(r, a, x, y):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = a * x[i] + y[i]


AXPY_SIG = "void(float32[:], float32, float32[:], float32[:])"


@cuda.jit
def transcendental(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = math.sin(x[i]) / x[i] + math.sqrt(x[i]) + math.exp(-x[i] * x[i])


UNARY_SIG = "void(float32[:], float32[:])"


@cuda.jit
def scaled(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = ALPHA * x[i]


@cuda.jit
def shared_sum(r, x):
    tile = cuda.shared.array(128, dtype=np.float32)
    i = cuda.grid(1)
    t = cuda.threadIdx.x
    tile[t] = x[i] if i < x.size else np.float32(0)
    cuda.syncthreads()
    if t == 0:
        total = np.float32(0)
        for k in range(128):
            total += tile[k]
        cuda.atomic.add(r, 0, total)


@cuda.jit
def tiled_2d(c, a, b):
    row, col = cuda.grid(2)
    if row < c.shape[0] and col < c.shape[1]:
        acc = 0.0
        for k in range(a.shape[1]):
            acc += a[row, k] * b[k, col]
        c[row, col] = acc


MATMUL_SIG = "void(float64[:, :], float64[:, :], float64[:, :])"

# (kernel, signature) of each, for the tests that go over them all
ALL = ((axpy, AXPY_SIG), (transcendental, UNARY_SIG), (scaled, UNARY_SIG), (shared_sum, UNARY_SIG),
       (tiled_2d, MATMUL_SIG))


FACTOR = np.float32(2.0)


@cuda.jit(device=True)
def times_factor(x):
    return x * FACTOR


@cuda.jit
def through_device(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = times_factor(x[i])
