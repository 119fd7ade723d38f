#!/usr/bin/env python
"""Sweeps (issue 24): 18 variants of one kernel, as ratios measured in one run.

    python bench/bench_sweep.py [--runs 7] [--quick] [--json PATH] [--check]

The kernel is the 16x16 tiled matmul of gpucache_ext/samples.py, exec'd into
a fresh namespace before each run (a new function object: nothing is
memoised on it), signature ``samples.MATMUL_SIG``.  The sweep is every
combination of 3 register caps (None, 64, 32) x 3 targets (sm 80, 86, 90) x
2 fastmath values (off, on): 18 variants.  No GPU is needed: every target is
given explicitly.  The runs are interleaved (per run: a baseline, then what
is compared with it), every figure is the median over the runs, and "paired"
is the median of the per-run ratios.

1. Cold sweep: a new ``KernelCache()`` (memory only) compiling the 18
   variants one after another, ``cache.compile(fn, sig, CompileConfig(sm=...,
   max_registers=..., fastmath=...))`` (the configs `gpucache_ext.sweeps`
   makes for ``%%gpukernel --max-registers none,64,32 --fastmath off,on``, at
   each target), against numba-cuda compiling the same 18 variants from
   scratch, one after another: ``cuda.compile_ptx(fn, sig, cc=..., opt=True,
   fastmath=...)`` (typing, lowering, libNVVM) then nvJitLink through
   ``cuda.core.Linker`` with ``max_register_count=cap`` (what numba-cuda's own
   linker passes for ``cuda.jit(max_registers=...)``), per variant.
   Target >= 3x.  Stage misses asserted: typing 1, llvm 2 (one per fastmath),
   ptx 6 (per target and fastmath), cubin 18.
2. Adding a value to the cached sweep: a 4th cap (48) in the cache of (1),
   its 6 new variants (3 targets x 2 fastmath).  Stage misses asserted:
   typing 0, llvm 0, ptx 0, cubin 6.  Its time is given as a fraction of the
   cold sweep's (same run), and against numba-cuda compiling those 6
   variants from scratch.

Before the timed runs, an untimed round checks that both sides did the same
work: for every variant, the register count nvJitLink reports for numba's
PTX linked with the cap equals the cache's (so the cap was applied on both).
The cubins differ only in the kernel's mangled name (numba's unique suffix).

Exit status is 0 (this is a report), unless --check is given: then 1 when
the cold sweep's ratio is under 3x.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cuda.core import Linker, LinkerOptions, ObjectCode  # noqa: E402
from numba import cuda  # noqa: E402

import gpucache_ext  # noqa: E402
from gpucache_ext import CompileConfig, KernelCache, samples  # noqa: E402
from gpucache_ext.pipeline.results import parse_resources  # noqa: E402
from gpucache_ext.sweeps import combinations  # noqa: E402

SIG = samples.MATMUL_SIG
CAPS = (None, 64, 32)
TARGETS = (80, 86, 90)
FASTMATH = (False, True)
ADDED_CAP = 48
TARGET_RATIO = 3.0
STAGE_NAMES = ("typing", "llvm", "ptx", "cubin")
EXPECTED_COLD = {"typing": 1, "llvm": 2, "ptx": 6, "cubin": 18}
EXPECTED_ADDED = {"typing": 0, "llvm": 0, "ptx": 0, "cubin": 6}


def variants(caps) -> list:
    """The sweep's configs: per target, every (fastmath, cap) combination,
    as the magic's sweep makes them (`gpucache_ext.sweeps.combinations`)."""
    return [config for sm in TARGETS
            for config in combinations(CompileConfig(sm=sm),
                                       {"fastmath": FASTMATH, "max_registers": tuple(caps)})]


SWEEP = variants(CAPS)
ADDED = variants((ADDED_CAP,))
assert len(SWEEP) == 18 and len(ADDED) == 6


def fresh_matmul():
    return samples.load(samples.MATMUL, module="bench_sweep_kernels")["matmul"].py_func


def timed(fn):
    gc.collect()
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def numba_build(fn, config: CompileConfig, verbose: bool = False):
    """numba-cuda compiling `fn` at `config` from scratch: its typing,
    lowering and libNVVM call (compile_ptx), then nvJitLink with the
    register cap, as numba-cuda's linker does for cuda.jit(max_registers=...).
    Returns the cubin, and with `verbose` the register count too."""
    ptx, _ = cuda.compile_ptx(fn, SIG, cc=config.cc, opt=True, fastmath=config.fastmath)
    options = LinkerOptions(arch=config.sm_name, max_register_count=config.max_registers,
                            verbose=True if verbose else None)
    linker = Linker(ObjectCode.from_ptx(ptx.encode(), name="k.ptx"), options=options)
    try:
        cubin = bytes(linker.link("cubin").code)
        log = (linker.get_info_log() or "").replace("\x00", "") if verbose else ""
    finally:
        linker.close()
    if cubin[:4] != b"\x7fELF":
        raise RuntimeError(f"numba-cuda {config.summary()}: the cubin is not an ELF image")
    return (cubin, parse_resources(log)["registers"]) if verbose else cubin


def misses(cache) -> dict:
    return {s: v.misses for s, v in cache.stats().items() if s in STAGE_NAMES}


def compile_all(cache, fn, configs):
    results = [cache.compile(fn, SIG, config) for config in configs]
    for config, res in zip(configs, results):
        if bytes(res.cubin)[:4] != b"\x7fELF":
            raise RuntimeError(f"gpucache_ext {config.summary()}: the cubin is not an ELF image")
    return results


def check_same_work():
    """Untimed: the register count of every variant (the cap applied) is the
    same on both sides; also pays numba's and the libraries' one-time costs."""
    fn = fresh_matmul()
    cache = KernelCache()
    ours = compile_all(cache, fn, SWEEP + ADDED)
    rows = []
    for config, res in zip(SWEEP + ADDED, ours):
        _, theirs = numba_build(fresh_matmul(), config, verbose=True)
        mine = parse_resources(res.link_log)["registers"]
        if theirs != mine or not theirs:
            raise AssertionError(f"{config.summary()}: numba-cuda's cubin uses {theirs} registers, "
                                 f"the cache's {mine}: the two sides did not do the same work")
        rows.append((config.sm, config.fastmath, config.max_registers, mine))
    return rows


def one_run() -> dict:
    """One run: numba-cuda x18, our cold sweep, numba-cuda x6 (cap 48), adding cap 48."""
    fn = fresh_matmul()
    _, numba_18 = timed(lambda: [numba_build(fn, config) for config in SWEEP])

    fn = fresh_matmul()
    cache = KernelCache()
    _, cold = timed(lambda: compile_all(cache, fn, SWEEP))
    cold_misses = misses(cache)
    if cold_misses != EXPECTED_COLD:
        raise AssertionError(f"cold sweep: stage misses {cold_misses}, expected {EXPECTED_COLD}")
    cold_seconds = {s: v.compile_seconds for s, v in cache.stats().items() if s in STAGE_NAMES}

    other = fresh_matmul()
    _, numba_6 = timed(lambda: [numba_build(other, config) for config in ADDED])

    before = misses(cache)
    _, added = timed(lambda: compile_all(cache, fn, ADDED))
    added_misses = {s: n - before[s] for s, n in misses(cache).items()}
    if added_misses != EXPECTED_ADDED:
        raise AssertionError(f"adding cap {ADDED_CAP}: stage misses {added_misses}, expected {EXPECTED_ADDED}")
    audits = sum(v.audits for v in cache.stats().values())
    return {"numba_18": numba_18, "cold": cold, "numba_6": numba_6, "added": added,
            "cold_misses": cold_misses, "added_misses": added_misses,
            "cold_stage_seconds": cold_seconds, "audits": audits}


def measure(runs: int, verbose: bool = True) -> dict:
    started = time.perf_counter()
    registers = check_same_work()
    samples_ = []
    for run in range(runs):
        samples_.append(one_run())
        if verbose:
            print(f"  run {run + 1}/{runs} done", file=sys.stderr)
    med = {key: statistics.median(s[key] for s in samples_) for key in ("numba_18", "cold", "numba_6", "added")}
    paired = {
        "cold": statistics.median(s["numba_18"] / s["cold"] for s in samples_),
        "added_vs_cold": statistics.median(s["added"] / s["cold"] for s in samples_),
        "added_vs_numba": statistics.median(s["numba_6"] / s["added"] for s in samples_),
    }
    return {
        "runs": runs,
        "medians_ms": {k: v * 1e3 for k, v in med.items()},
        "ratio_cold": med["numba_18"] / med["cold"],
        "ratio_added_vs_cold": med["added"] / med["cold"],
        "ratio_added_vs_numba": med["numba_6"] / med["added"],
        "paired": paired,
        "target": TARGET_RATIO,
        "met": med["numba_18"] / med["cold"] >= TARGET_RATIO,
        "cold_misses": samples_[-1]["cold_misses"],
        "added_misses": samples_[-1]["added_misses"],
        "cold_stage_ms": {s: statistics.median(r["cold_stage_seconds"][s] for r in samples_) * 1e3
                          for s in STAGE_NAMES},
        "audits": max(s["audits"] for s in samples_),
        "registers": registers,
        "samples": [{k: v for k, v in s.items() if k not in ("cold_misses", "added_misses")} for s in samples_],
        "seconds_total": time.perf_counter() - started,
    }


def _git_describe() -> str:
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True,
                              text=True, timeout=10).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    parts = []
    for name in ("numba-cuda", "cuda-core"):
        try:
            parts.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            pass
    return ", ".join(parts)


def _misses_text(counts: dict) -> str:
    return ", ".join(f"{s} {counts[s]}" for s in STAGE_NAMES)


def _registers_text(rows) -> str:
    """"sm_80: none 32, 64 41, ...; ..." where fastmath off and on agree, else each given."""
    by_target = {}
    for sm, fastmath, cap, registers in rows:
        by_target.setdefault(sm, {}).setdefault(cap, {})[fastmath] = registers
    parts = []
    for sm, caps in by_target.items():
        items = []
        for cap, counts in caps.items():
            name = "none" if cap is None else str(cap)
            values = set(counts.values())
            items.append(f"{name} {values.pop()}" if len(values) == 1
                         else f"{name} {counts[False]}/{counts[True]} (fastmath off/on)")
        parts.append(f"sm_{sm}: " + ", ".join(items))
    return "; ".join(parts)


def report(result: dict) -> str:
    m = result["medians_ms"]
    cap_text = ", ".join("none" if c is None else str(c) for c in CAPS)
    lines = [
        f"Sweep of the matmul {SIG}: caps ({cap_text}) x sm {', '.join(map(str, TARGETS))} "
        f"x fastmath off/on = {len(SWEEP)} variants",
        f"gpucache_ext {os.path.dirname(gpucache_ext.__file__)} ({_git_describe()}); python "
        f"{platform.python_version()}, {_versions()}; {os.cpu_count()} cpus; "
        f"medians over {result['runs']} interleaved runs",
        "",
        f"{'scenario':<44} {'baseline':>10} {'gpucache':>10} {'ratio':>7} {'paired':>7} {'target':>7}",
        f"{'cold sweep, 18 variants':<44} {m['numba_18']:>8.0f}ms {m['cold']:>8.0f}ms "
        f"{result['ratio_cold']:>6.2f}x {result['paired']['cold']:>6.2f}x "
        f"{'>=' + format(TARGET_RATIO, 'g') + 'x':>7} {'PASS' if result['met'] else 'MISS'}",
        "  baseline: numba-cuda, 18 x (compile_ptx(cc, fastmath) + nvJitLink with the cap)",
        f"{'add cap ' + str(ADDED_CAP) + ' to the cached sweep, 6 variants':<44} {m['numba_6']:>8.0f}ms "
        f"{m['added']:>8.1f}ms {result['ratio_added_vs_numba']:>6.2f}x "
        f"{result['paired']['added_vs_numba']:>6.2f}x {'':>7}",
        "  baseline: numba-cuda, the 6 new variants from scratch",
        f"{'add cap ' + str(ADDED_CAP) + ', as a fraction of the cold sweep':<44} {m['cold']:>8.0f}ms "
        f"{m['added']:>8.1f}ms {result['ratio_added_vs_cold']:>6.3f}x "
        f"{result['paired']['added_vs_cold']:>6.3f}x",
        "",
        f"{'stage misses':<44} {'typing':>7} {'llvm':>7} {'ptx':>7} {'cubin':>7}",
        f"{'cold sweep (expected 1, 2, 6, 18)':<44} "
        + " ".join(f"{result['cold_misses'][s]:>7}" for s in STAGE_NAMES),
        f"{'add cap ' + str(ADDED_CAP) + ' (expected 0, 0, 0, 6)':<44} "
        + " ".join(f"{result['added_misses'][s]:>7}" for s in STAGE_NAMES),
        f"{'cold sweep, compile ms per stage (median)':<44} "
        + " ".join(f"{result['cold_stage_ms'][s]:>7.1f}" for s in STAGE_NAMES),
        "",
        f"registers per variant (nvJitLink's count, equal on both sides): {_registers_text(result['registers'])}",
        f"audits run: {result['audits']}; total {result['seconds_total']:.0f} s",
        "",
        f"summary: cold 18-variant sweep {result['ratio_cold']:.2f}x numba-cuda (target >= "
        f"{TARGET_RATIO:g}x, {'PASS' if result['met'] else 'MISS'}); adding cap {ADDED_CAP}: "
        f"{_misses_text(result['added_misses'])} misses, {result['ratio_added_vs_cold']:.3f}x the cold "
        f"sweep's time, {result['ratio_added_vs_numba']:.2f}x numba-cuda for its 6 variants",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs (default 7)")
    parser.add_argument("--quick", action="store_true", help="3 runs")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--check", action="store_true", help="exit 1 when the cold sweep is under 3x")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    runs = 3 if args.quick and args.runs == parser.get_default("runs") else args.runs
    if runs < 1:
        parser.error("--runs must be >= 1")
    result = measure(runs, verbose=not args.quiet)
    print(report(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        result["time"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        args.json.write_text(json.dumps(result, indent=2))
    return 1 if args.check and not result["met"] else 0


if __name__ == "__main__":
    sys.exit(main())
