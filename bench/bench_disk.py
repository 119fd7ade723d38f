"""Benchmark of the persistent disk tier, as ratios measured in one run.

    python bench/bench_disk.py [--runs 5] [--json PATH] [--check]

1. A new process's first compile of a kernel that is on disk, against a cold
   compile of it in a new process with an empty cache (imports and the
   CompileConfig are made before the timer in both; GPUCACHE_DIR is the
   cache's folder, as for the magic).  Target >= 50x.
2. The toolchain fingerprint of all four stages in a new process, read from
   the disk tier's memo against probed (libNVVM, NVRTC, nvJitLink loaded,
   libdevice and libcudadevrt hashed).  Target >= 5x.
3. Lookup time with 10,000 entries on disk against 100 entries: a new
   KernelCache (empty memory) compiling a kernel whose artifacts are on disk,
   and a raw DiskTier.get of random stored tokens.  Target within 1.5x.
4. What signing costs (GPUCACHE_SECRET): a signed folder against an unsigned
   one, for a raw DiskTier.get (HMAC-SHA256 checked on every read) and for a
   new KernelCache compiling a kernel found on disk.  Targets within 1.5x
   (a raw read: the HMAC is one more pass over the bytes, as the checksum is)
   and 1.2x (a compile from disk).
5. What the default audit costs the cell that hits: a new process's first
   compile of a kernel on disk (which the default policy audits, in the
   background) and 100 ms of the cell's own work after it, against the same
   with the audit off.  Target within 1.1x.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CHILD = """
import sys, time
from gpucache_ext import CompileConfig, KernelCache, samples
matmul = samples.load(samples.MATMUL)["matmul"]
config = CompileConfig(sm=86)
cache = KernelCache(directory=sys.argv[1], audit=sys.argv[2] if len(sys.argv) > 2 else None)
start = time.perf_counter()
result = cache.compile(matmul, samples.MATMUL_SIG, config)
if len(sys.argv) > 2:  # the rest of the cell: 100 ms of Python work
    end = time.perf_counter() + 0.1
    while time.perf_counter() < end:
        sum(range(1000))
elapsed = time.perf_counter() - start
print(elapsed, "".join("h" if result.stages[s].hit else "m" for s in ("typing", "llvm", "ptx", "cubin")))
"""


FINGERPRINT_CHILD = """
import sys, time
import gpucache_ext.pipeline.cache
from gpucache_ext import toolchain
import numba.cuda  # (as a compiling process has: the versions the fingerprint reads cost no import)
start = time.perf_counter()
for stage in ("typing", "llvm", "ptx", "cubin"):
    toolchain.toolchain_component(stage, sys.argv[1])
elapsed = time.perf_counter() - start
print(elapsed, sum(toolchain.probes.values()))
"""


def child(directory, code=CHILD, *extra):
    out = subprocess.run([sys.executable, "-c", code, str(directory), *extra], cwd=ROOT, check=True,
                         capture_output=True, text=True, env={**os.environ, "GPUCACHE_DIR": str(directory)},
                         ).stdout.split()
    return float(out[0]), out[1]


def fingerprint(runs):
    """New processes learning the toolchain fingerprint: probed (empty folder) or from the memo."""
    probed, remembered = [], []
    with tempfile.TemporaryDirectory() as warm_dir:
        child(warm_dir, FINGERPRINT_CHILD)  # write the memo once
        for _ in range(runs):
            with tempfile.TemporaryDirectory() as empty:
                seconds, count = child(empty, FINGERPRINT_CHILD)
                assert count == "5", count
                probed.append(seconds)
            seconds, count = child(warm_dir, FINGERPRINT_CHILD)
            assert count == "0", count
            remembered.append(seconds)
    return statistics.median(probed), statistics.median(remembered)


def new_process(runs):
    cold, warm = [], []
    with tempfile.TemporaryDirectory() as warm_dir:
        child(warm_dir)  # fill the warm directory once
        for _ in range(runs):
            with tempfile.TemporaryDirectory() as empty:
                seconds, hits = child(empty)
                assert hits == "mmmm", hits
                cold.append(seconds)
            seconds, hits = child(warm_dir)
            assert hits == "hhhh", hits
            warm.append(seconds)
    return statistics.median(cold), statistics.median(warm)


def audited_cell(runs):
    """New processes whose first compile hits on disk, then run 100 ms of the
    cell: with the default audit (it picks this hit) and with it off."""
    on, off = [], []
    with tempfile.TemporaryDirectory() as warm_dir:
        child(warm_dir)  # fill it once
        for _ in range(runs):
            for setting, found in (("first", on), ("off", off)):
                seconds, hits = child(warm_dir, CHILD, setting)
                assert hits == "hhhh", hits
                found.append(seconds)
    return statistics.median(on), statistics.median(off)


def fill(directory, count, size=8192, keyring=None):
    from gpucache_ext.store.codec import content_digest
    from gpucache_ext.store.disk import DiskTier
    from gpucache_ext.backends.numba_cuda.stages import CubinArtifact
    from gpucache_ext.store.tiers import Entry
    from gpucache_ext.keys.tokens import component, make_token

    tier = DiskTier(directory, max_bytes=None, keyring=keyring)
    blob = random.Random(0).randbytes(size)
    artifact = CubinArtifact(blob, "", None, "k")
    digest = content_digest("cubin", artifact)  # (an entry without one is refused)
    tokens = []
    for i in range(count):
        token = make_token("cubin", {"n": component(i)})
        tier.put("cubin", Entry(token.hex, "filler", artifact, token.components, size, 0.01, digest=digest))
        tokens.append(token.hex)
    return tier, tokens


def _interleaved_lookups(folders, runs, seed):
    """Median lookup times per folder, measured interleaved: each round times
    every folder in turn, so machine noise falls on all of them alike.
    `folders`: label -> (entries to fill it with, secret or None).  Returns
    (raw DiskTier.get medians, compile-from-disk medians), by label."""
    from gpucache_ext import CompileConfig, KernelCache
    from gpucache_ext.store.signing import Keyring
    from tests import kernels

    config = CompileConfig(sm=86)
    rng = random.Random(seed)
    raw = {label: [] for label in folders}
    through_cache = {label: [] for label in folders}
    with tempfile.TemporaryDirectory() as root:
        stores = {}
        for label, (count, secret) in folders.items():
            directory = Path(root) / str(label)
            tier, tokens = fill(directory, count, keyring=Keyring([secret] if secret else [], True))
            KernelCache(directory=directory, secret=secret or "").compile(kernels.axpy, kernels.AXPY_SIG, config)
            stores[label] = (directory, secret, tier, tokens)
        for _ in range(runs * 20):
            for label, (directory, secret, tier, tokens) in stores.items():
                for token in rng.sample(tokens, 10):
                    start = time.perf_counter()
                    assert tier.get("cubin", token) is not None
                    raw[label].append(time.perf_counter() - start)
                cache = KernelCache(directory=directory, secret=secret or "")
                start = time.perf_counter()
                result = cache.compile(kernels.axpy, kernels.AXPY_SIG, config)
                through_cache[label].append(time.perf_counter() - start)
                assert result.stages["cubin"].tier == "disk"
    return ({label: statistics.median(v) for label, v in raw.items()},
            {label: statistics.median(v) for label, v in through_cache.items()})


def lookups(sizes, runs):
    """Lookups with each of `sizes` entries on disk (unsigned)."""
    return _interleaved_lookups({n: (n, None) for n in sizes}, runs, seed=1)


def signing(runs):
    """Lookups from an unsigned folder and a signed one (100 entries each)."""
    return _interleaved_lookups({"unsigned": (100, None), "signed": (100, "bench-secret")}, runs, seed=2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args()
    # this process's CompileConfig leaves the user's cache folder alone (children get their own)
    os.environ["GPUCACHE_DIR"] = "off"

    cold, warm = new_process(args.runs)
    probed, remembered = fingerprint(args.runs)
    raw, through_cache = lookups((100, 10_000), args.runs)
    raw_100, raw_10k = raw[100], raw[10_000]
    cache_100, cache_10k = through_cache[100], through_cache[10_000]
    signed_raw, signed_cache = signing(args.runs)
    audit_on, audit_off = audited_cell(args.runs)
    rows = [
        ("new process, kernel on disk vs cold", cold, warm, cold / warm, ">= 50x", cold / warm >= 50),
        ("new process, toolchain: probed vs memo", probed, remembered, probed / remembered, ">= 5x",
         probed / remembered >= 5),
        ("DiskTier.get, 10,000 vs 100 entries", raw_10k, raw_100, raw_10k / raw_100, "<= 1.5x",
         raw_10k / raw_100 <= 1.5),
        ("compile from disk, 10,000 vs 100 entries", cache_10k, cache_100, cache_10k / cache_100, "<= 1.5x",
         cache_10k / cache_100 <= 1.5),
        ("DiskTier.get, signed vs unsigned", signed_raw["signed"], signed_raw["unsigned"],
         signed_raw["signed"] / signed_raw["unsigned"], "<= 1.5x",
         signed_raw["signed"] / signed_raw["unsigned"] <= 1.5),
        ("compile from disk, signed vs unsigned", signed_cache["signed"], signed_cache["unsigned"],
         signed_cache["signed"] / signed_cache["unsigned"], "<= 1.2x",
         signed_cache["signed"] / signed_cache["unsigned"] <= 1.2),
        ("cell hitting on disk, default audit vs off", audit_on, audit_off, audit_on / audit_off, "<= 1.1x",
         audit_on / audit_off <= 1.1),
    ]
    print(f"disk tier benchmark, medians of {args.runs} runs (16x16 tiled matmul, sm_86)\n")
    print(f"{'measure':<42}{'a (ms)':>10}{'b (ms)':>10}{'a/b':>9}  target    result")
    for name, a, b, ratio, target, ok in rows:
        print(f"{name:<42}{a * 1e3:>10.3f}{b * 1e3:>10.3f}{ratio:>8.2f}x  {target:<8}  {'PASS' if ok else 'FAIL'}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([dict(zip(("measure", "a_s", "b_s", "ratio", "target", "pass"), r))
                                         for r in rows], indent=2))
    return 1 if args.check and not all(r[-1] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
