"""Kernels shared by the tests (module-level, so their source is stable)."""

import math

from numba import cuda

SCALE = 2.0
OFFSETS = (1.0, 2.0)


@cuda.jit(device=True)
def twice(x):
    return x * SCALE


def axpy(r, a, x, y):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = a * twice(x[i]) + y[i]


AXPY_SIG = "void(float32[:], float32, float32[:], float32[:])"


def copy(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = x[i] + OFFSETS[0]


COPY_SIG = "void(float32[:], float32[:])"


def tanh_kernel(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = math.tanh(x[i])


TANH_SIG = "void(float32[:], float32[:])"


def grid_sync(a):
    """Each thread takes its right neighbour's value, after a grid-wide sync."""
    i = cuda.grid(1)
    g = cuda.cg.this_grid()
    v = a[(i + 1) % a.size]
    g.sync()
    a[i] = v


GRID_SYNC_SIG = "void(int64[:])"


@cuda.jit
def jitted_copy(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = x[i]
