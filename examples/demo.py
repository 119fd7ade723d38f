"""A tour of gpucache_ext's staged cache, on any machine (no GPU needed).

Compiles a tiled matmul calling a device function, then changes one thing at
a time and shows which stages recompiled and why.

    python examples/demo.py
"""

import time

from numba import cuda, float32

from gpucache_ext import CompileConfig, KernelCache

TILE = 16


@cuda.jit(device=True)
def fma_tile(acc, a, b):
    for k in range(TILE):
        acc += a[cuda.threadIdx.y, k] * b[k, cuda.threadIdx.x]
    return acc


def matmul(c, a, b):
    sa = cuda.shared.array((TILE, TILE), float32)
    sb = cuda.shared.array((TILE, TILE), float32)
    x, y = cuda.grid(2)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    acc = float32(0.0)
    for tile in range((a.shape[1] + TILE - 1) // TILE):
        sa[ty, tx] = a[y, tile * TILE + tx] if y < a.shape[0] and tile * TILE + tx < a.shape[1] else 0
        sb[ty, tx] = b[tile * TILE + ty, x] if x < b.shape[1] and tile * TILE + ty < b.shape[0] else 0
        cuda.syncthreads()
        acc = fma_tile(acc, sa, sb)
        cuda.syncthreads()
    if y < c.shape[0] and x < c.shape[1]:
        c[y, x] = acc


SIG = "void(float32[:,:], float32[:,:], float32[:,:])"


def show(title, cache, config):
    start = time.perf_counter()
    result = cache.compile(matmul, SIG, config)
    elapsed = (time.perf_counter() - start) * 1e3
    print(f"\n== {title}: {elapsed:.1f} ms")
    print(result.explain())
    return result


def main():
    cache = KernelCache()
    base = CompileConfig(sm=86)
    show("cold compile", cache, base)
    show("exact repeat", cache, base)
    show("another GPU (sm 80): IR reused", cache, base.replace(sm=80))
    show("opt 0: only PTX and cubin", cache, base.replace(opt=0))
    show("max registers 32: only the link", cache, base.replace(max_registers=32))
    result = show("fastmath: lowering again on cached typed IR", cache, base.replace(fastmath=True))
    global TILE
    TILE = 8
    show("a global the kernel reads changed", cache, base)
    TILE = 16
    show("...and changed back: all hits", cache, base)
    print("\nper-stage counters:")
    for stage, numbers in cache.stats().items():
        print(f"  {stage:<6} hits {numbers['hits']:>2}  misses {numbers['misses']:>2}  "
              f"entries {numbers['entries']:>2}  {numbers['bytes'] / 1024:7.1f} KiB")
    print(f"\nentry {result.entry_name[:60]}...")
    print("nvJitLink:", result.link_log.splitlines()[-1].strip())


if __name__ == "__main__":
    main()
