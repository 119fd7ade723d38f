"""A tour of gpucache_ext's staged cache, on any machine (no GPU needed).

Compiles the sample tiled matmul (gpucache_ext/samples.py), then changes one
thing at a time and shows which stages recompiled and why.  The cache is a
new one in this process's memory (no disk tier), so every run starts cold and
tells the same story.  Each step's heading names what changed; what it
compiled and what it reused is read from the cache's result, not written in
advance.

    python examples/demo.py
"""

import time

from gpucache_ext import STAGES, CompileConfig, KernelCache, samples


def summary(result) -> str:
    """Which stages were compiled and which were served, as the cache says."""
    missed = [s for s in STAGES if not result.stages[s].hit]
    served = [f"{s} ({result.stages[s].tier})" for s in STAGES if result.stages[s].hit]
    if not missed:
        return "nothing compiled: every stage from the cache"
    if not served:
        return "compiled every stage"
    return f"compiled {', '.join(missed)}; reused {', '.join(served)}"


def show(title, cache, kernel, config):
    start = time.perf_counter()
    result = cache.compile(kernel, samples.MATMUL_SIG, config)
    elapsed = (time.perf_counter() - start) * 1e3
    print(f"\n== {title}: {elapsed:.1f} ms, {summary(result)}")
    print(result.explain())
    return result


def main():
    namespace = samples.load(samples.MATMUL, module="demo")
    matmul = namespace["matmul"]
    cache = KernelCache()  # memory only: nothing from earlier runs
    base = CompileConfig(sm=86)
    show("first compile, new cache", cache, matmul, base)
    show("the same again", cache, matmul, base)
    show("another GPU: sm 80", cache, matmul, base.replace(sm=80))
    show("libNVVM opt 0", cache, matmul, base.replace(opt=0))
    show("max registers 32", cache, matmul, base.replace(max_registers=32))
    result = show("fastmath", cache, matmul, base.replace(fastmath=True))
    namespace["TPB"] = 8
    show("a global the kernel reads changed: TPB = 8", cache, matmul, base)
    namespace["TPB"] = 16
    show("...and back: TPB = 16", cache, matmul, base)
    print("\nper-stage counters:")
    stats = cache.stats()
    for stage in STAGES:  # (the fatbin layer: multi-target builds, which this demo does not make)
        numbers = stats[stage]
        print(f"  {stage:<6} hits {numbers.hits:>2}  misses {numbers.misses:>2}  "
              f"entries {numbers.entries:>2}  {numbers.bytes / 1024:7.1f} KiB")
    print(f"\nentry {result.entry_name[:60]}...")
    print("nvJitLink:", result.link_log.splitlines()[-1].strip())


if __name__ == "__main__":
    main()
