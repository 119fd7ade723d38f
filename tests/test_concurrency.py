"""Threads sharing one cache, against a real Redis server.

Eight threads compile overlapping kernels and configs at once through one
`KernelCache` with a disk and a shared tier: every result equals a fresh
compile, each entry is built once (the others wait for that entry alone,
then find it), and no thread waits for another's tier I/O: a shared tier
that stops answering holds up only the compiles that asked it something.
"""

from __future__ import annotations

import collections
import os
import signal
import sys
import threading
import time


from gpucache_ext import CompileConfig, KernelCache
from gpucache_ext.store.shared import RedisTier
from gpucache_ext.store.signing import Keyring

from . import kernels

SECRET = "a secret the threads share"
KERNELS = [(kernels.axpy, kernels.AXPY_SIG), (kernels.copy, kernels.COPY_SIG), (kernels.tanh_kernel, kernels.TANH_SIG)]
# overlapping configs: sm 86 shares typing and llvm with sm 80, max_registers shares ptx with sm 86
CONFIGS = [CompileConfig(sm=86), CompileConfig(sm=80), CompileConfig(sm=86, fastmath=True),
           CompileConfig(sm=86, max_registers=32)]
TASKS = [(func, sig, config) for func, sig in KERNELS for config in CONFIGS]
THREADS = 8


def _artifacts(result):
    return result.llvm_ir, result.ptx, result.cubin


def _run_threads(count, work):
    """`work(i)` in `count` threads started together; their results, or the first error raised."""
    barrier = threading.Barrier(count)
    results, errors = [None] * count, []

    def run(i):
        try:
            barrier.wait()
            results[i] = work(i)
        except BaseException as exc:  # (re-raised in the test's thread)
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,), name=f"compiler-{i}") for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert not any(thread.is_alive() for thread in threads), "a compiling thread never finished"
    if errors:
        raise errors[0]
    return results


def test_eight_threads_build_each_entry_once_and_equal_a_fresh_compile(tmp_path, redis_server):
    cache = KernelCache(directory=tmp_path / "disk", redis_url=redis_server.url, secret=SECRET, audit=False)

    def work(i):  # every task, each thread in another order
        order = TASKS[i % len(TASKS):] + TASKS[:i % len(TASKS)]
        if i % 2:
            order.reverse()
        return [(task, cache.compile(*task)) for task in order]

    per_thread = _run_threads(THREADS, work)

    # each entry built once: one miss per (stage, token), every other lookup a hit
    built = collections.Counter((miss["stage"], miss["token"]) for miss in cache.recent_misses())
    assert built and max(built.values()) == 1, [key for key, count in built.items() if count > 1]
    stats = cache.stats()
    for stage in ("typing", "llvm", "ptx", "cubin"):
        tokens = {result.stages[stage].token for results in per_thread for _, result in results}
        assert stats[stage].misses == sum(1 for s, _ in built if s == stage) == len(tokens), stage
        misses = sum(result.stages[stage].outcome.value == "miss" for results in per_thread for _, result in results)
        assert misses == stats[stage].misses, stage
    assert stats["llvm"].hits + stats["llvm"].misses == THREADS * len(TASKS)
    assert len(cache._flights) == 0  # (no flight left behind)

    # every thread got the same artifacts for a task, and a fresh compile gives them too
    fresh = KernelCache(audit=False)
    for task in TASKS:
        want = _artifacts(fresh.compile(*task))
        for results in per_thread:
            (result,) = [result for each, result in results if each == task]
            assert _artifacts(result) == want, (task[0].__name__, task[2].summary())

    # another process (a new cache on the same server, no disk): every entry from the shared tier
    other = KernelCache(redis_url=redis_server.url, secret=SECRET, audit=False)
    for task in TASKS:
        result = other.compile(*task)
        # (llvm: from the shared tier for a kernel's first config, then from memory for the others)
        assert all(result.stages[s].tier in ("memory", "shared") for s in ("llvm", "ptx", "cubin"))
        assert _artifacts(result) == _artifacts(fresh.compile(*task))
    assert other.stats()["cubin"].misses == 0
    assert other.stats()["cubin"].tiers["shared"].hits == len(TASKS)


def _in_redis_call(thread) -> bool:
    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        if f"{os.sep}redis{os.sep}" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


def test_a_stopped_shared_tier_holds_up_only_the_compile_that_asked_it(redis_server):
    tier = RedisTier(redis_server.url, Keyring((SECRET,)), timeout=20)
    cache = KernelCache(tiers=[tier], audit=False)
    cached = cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))  # now in memory
    os.kill(redis_server.proc.pid, signal.SIGSTOP)  # the server stops answering (a network partition)
    try:
        asking = threading.Thread(target=cache.compile, args=(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=86)))
        asking.start()
        deadline = time.monotonic() + 60
        while not _in_redis_call(asking):
            assert asking.is_alive() and time.monotonic() < deadline, "the compile never asked the shared tier"
            time.sleep(0.01)
        # meanwhile: a memory hit, the stats' counters, the entries in memory: none waits for that call
        again = cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))
        assert [layer.tier for layer in again.stages.values()] == ["memory"] * 4
        assert again.cubin == cached.cubin
        assert cache.lookups()["cubin"] == (1, 1, 0)  # (the first compile's miss, this hit)
        assert _in_redis_call(asking), "the first thread's Redis call ended before the other compile returned"
    finally:
        os.kill(redis_server.proc.pid, signal.SIGCONT)
        asking.join(timeout=120)
    assert not asking.is_alive()


def test_an_audit_swaps_a_results_artifacts_under_the_results_lock():
    """What an audit that found a mismatch does to the result a kernel holds:
    the three artifacts change at once, never while a reader holds the result."""
    cache = KernelCache(audit=False)
    target = cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))
    fresh = KernelCache(audit=False).compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))
    before = target.artifacts()
    assert all(before[stage] is not fresh.artifacts()[stage] for stage in before)
    with target._lock:  # a reader in the middle of `artifacts()`
        swap = threading.Thread(target=target.replace_artifacts, args=(fresh,))
        swap.start()
        swap.join(timeout=0.5)
        assert swap.is_alive(), "the artifacts were swapped while a reader held the result"
        assert (target._llvm, target._ptx, target._cubin) == tuple(before.values())
    swap.join(timeout=30)
    assert target.artifacts() == fresh.artifacts()
