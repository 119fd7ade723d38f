"""A tour of gpucache_ext's staged cache, on any machine (no GPU needed).

Compiles the sample tiled matmul (gpucache_ext/samples.py), then changes one
thing at a time and shows which stages recompiled and why.

    python examples/demo.py
"""

import time

from gpucache_ext import CompileConfig, KernelCache, samples

# The sample tiled matmul (gpucache_ext/samples.py); its globals live in `kernel`.
kernel = samples.load(samples.MATMUL, module="demo")
matmul = kernel["matmul"]
SIG = samples.MATMUL_SIG


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
    kernel["TPB"] = 8
    show("a global the kernel reads changed", cache, base)
    kernel["TPB"] = 16
    show("...and changed back: all hits", cache, base)
    print("\nper-stage counters:")
    for stage, numbers in cache.stats().items():
        print(f"  {stage:<6} hits {numbers['hits']:>2}  misses {numbers['misses']:>2}  "
              f"entries {numbers['entries']:>2}  {numbers['bytes'] / 1024:7.1f} KiB")
    print(f"\nentry {result.entry_name[:60]}...")
    print("nvJitLink:", result.link_log.splitlines()[-1].strip())


if __name__ == "__main__":
    main()
