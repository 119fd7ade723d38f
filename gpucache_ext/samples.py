"""Sample kernels, written once: the tests, the benchmarks, `examples/demo.py`
and `scripts/gpu_check.py` all use these.

Each sample is source text, complete with its imports and globals, because a
``%%gpukernel`` cell is text::

    ip.run_cell_magic("gpukernel", f"--sm 86 --sig '{MATMUL_SIG}'", MATMUL)

Kernels are decorated with a bare ``@cuda.jit`` (no signature, so nothing is
compiled when the text runs); give the magic ``--sig``, and `KernelCache` or
`Kernel` the signature. Where code needs function objects, `load` execs a
sample into a new namespace and returns it (globals included, so a global the
kernel reads can be changed there)::

    ns = load(MATMUL)
    cache.compile(ns["matmul"], MATMUL_SIG, CompileConfig(sm=86))
    ns["TPB"] = 8   # the next compile sees the change

The text is exec'd under a file name that is not a path, so the kernels are
user code for the cache (as a notebook cell's are) wherever gpucache_ext is
installed: code from files in site-packages would be keyed as a library's.
"""

import hashlib
import linecache

__all__ = ["AXPY", "AXPY_SIG", "MATMUL", "MATMUL_SIG", "TOTAL", "TOTAL_SIG", "load"]

AXPY_SIG = "void(float32[:], float32, float32[:], float32[:])"

# r = a * x + y through a device function.
AXPY = '''\
from numba import cuda


@cuda.jit(device=True)
def fused(a, x, y):
    return a * x + y


@cuda.jit
def axpy(r, a, x, y):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = fused(a, x[i], y[i])
'''

MATMUL_SIG = "void(float32[:,:], float32[:,:], float32[:,:])"

# C = A @ B, a TPB x TPB tile of A and of B at a time in shared memory; launch
# with (TPB, TPB) threads per block and enough blocks to cover C.
MATMUL = '''\
from numba import cuda, float32

TPB = 16


@cuda.jit
def matmul(A, B, C):
    sA = cuda.shared.array(shape=(TPB, TPB), dtype=float32)
    sB = cuda.shared.array(shape=(TPB, TPB), dtype=float32)
    x, y = cuda.grid(2)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    acc = float32(0.0)
    for i in range((A.shape[1] + TPB - 1) // TPB):
        sA[ty, tx] = A[y, tx + i * TPB] if y < A.shape[0] and tx + i * TPB < A.shape[1] else 0
        sB[ty, tx] = B[ty + i * TPB, x] if x < B.shape[1] and ty + i * TPB < B.shape[0] else 0
        cuda.syncthreads()
        for j in range(TPB):
            acc += sA[ty, j] * sB[j, tx]
        cuda.syncthreads()
    if y < C.shape[0] and x < C.shape[1]:
        C[y, x] = acc
'''

TOTAL_SIG = "void(float64[:], float64[:])"

# acc[0] += sum(x) with float64 atomic adds (lowered differently below sm_60).
TOTAL = '''\
from numba import cuda


@cuda.jit
def total(acc, x):
    i = cuda.grid(1)
    if i < x.size:
        cuda.atomic.add(acc, 0, x[i])
'''

_NAMES = {AXPY: "axpy", MATMUL: "matmul", TOTAL: "total"}


def load(source: str, module: str = "gpucache_ext.samples") -> dict:
    """Exec `source` (a sample, or a variant of one) into a new namespace and
    return the namespace: new function objects every call, nothing shared
    with earlier loads.  `module` becomes the functions' ``__module__``."""
    name = _NAMES.get(source) or "variant " + hashlib.sha256(source.encode()).hexdigest()[:8]
    filename = f"<gpucache_ext.samples {name}>"  # for tracebacks and error messages
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"__name__": module}
    exec(compile(source, filename, "exec"), namespace)
    return namespace
