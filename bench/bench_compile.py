#!/usr/bin/env python
"""Compile-speed benchmark for gpucache_ext, reported as ratios to numba-cuda.

The machine this runs on is noisy, so absolute times mean little.  Every
number is therefore a ratio against a baseline measured in the same process,
interleaved with the scenarios (per run: the baseline, then each scenario), so
that a slow spell of the machine affects both sides alike.  Each figure is the
median over ``--runs`` runs.

Baseline ("numba-cuda"): numba-cuda's own path for one kernel and one config,
on a fresh function object each run::

    ptx, _ = numba.cuda.compile_ptx(fn, SIG, cc=(8, 6), opt=True)
    Linker(ObjectCode.from_ptx(ptx.encode(), name="k.ptx"),
           options=LinkerOptions(arch="sm_86")).link("cubin")

Scenarios (each the time of one ``KernelCache.compile`` call):

    cold            new cache, fresh function, sm 86              target >= 0.9x
    exact repeat    same cache, same function, same config         target >= 100x
    sm change       new cache warmed at sm 80, time sm 86          target >= 2.5x
    opt change      new cache warmed at opt 3, time opt 0 / opt 1  target >= 2.5x
    maxreg change   new cache warmed with max_registers None, 32   target >= 5x
    fastmath change new cache warmed at fastmath False, True       target >= 1.3x

No GPU is needed: the target is always given explicitly.

    python bench/bench_compile.py               # 7 runs
    python bench/bench_compile.py --quick       # 3 runs
    python bench/bench_compile.py --runs 11 --json bench/results/compile.json --check

Exit status is 0 (this is a report), unless --check is given: then 1 when a
target is missed or a scenario failed.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
import traceback
from collections import Counter
from typing import Callable, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, ROOT)

from numba import cuda  # noqa: E402
from cuda.core import Linker, LinkerOptions, ObjectCode  # noqa: E402

from gpucache_ext import STAGES, CompileConfig, KernelCache, samples  # noqa: E402

SIG = samples.MATMUL_SIG

# The 16x16 tiled matmul of gpucache_ext/samples.py, C = A @ B.  Kept as text:
# every run execs it into a fresh namespace, so each run gets a new function
# object and nothing is memoised on it (numba keeps per-function state; so
# could a cache).


def fresh_kernel():
    """A new function object for the kernel, in a new globals dict."""
    return samples.load(samples.MATMUL, module="bench_kernels")["matmul"].py_func


BASE = CompileConfig(sm=86, opt=3, fastmath=False, max_registers=None)


# ---------------------------------------------------------------------------
# Measurements.  Each returns a dict with "seconds" (the timed region only)
# and details; set-up (function creation, cache warm-up) is outside the timer.


def _timed(fn: Callable[[], object]):
    gc.collect()
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def run_baseline() -> dict:
    fn = fresh_kernel()
    parts = {}

    def compile_and_link():
        t0 = time.perf_counter()
        ptx, _resty = cuda.compile_ptx(fn, SIG, cc=(8, 6), opt=True)
        t1 = time.perf_counter()
        linker = Linker(ObjectCode.from_ptx(ptx.encode(), name="k.ptx"),
                        options=LinkerOptions(arch="sm_86"))
        try:
            cubin = linker.link("cubin").code
        finally:
            linker.close()
        t2 = time.perf_counter()
        parts["compile_ptx"] = t1 - t0
        parts["link"] = t2 - t1
        return cubin

    cubin, seconds = _timed(compile_and_link)
    _check_cubin(bytes(cubin), "baseline")
    return {"seconds": seconds, "parts": parts}


def _check_cubin(cubin: bytes, what: str):
    if not cubin.startswith(b"\x7fELF"):
        raise RuntimeError(f"{what}: the cubin is not an ELF image ({cubin[:8]!r})")


def _result_details(res, seconds) -> dict:
    _check_cubin(res.cubin, "gpucache_ext")
    return {
        "seconds": seconds,
        "recompiled": tuple(s for s in STAGES if not res.stages[s].hit),
        "stage_seconds": {s: res.stages[s].seconds for s in STAGES},
    }


def scenario_cold() -> dict:
    cache = KernelCache()
    fn = fresh_kernel()
    res, seconds = _timed(lambda: cache.compile(fn, SIG, BASE))
    return _result_details(res, seconds)


class ExactRepeat:
    """One cache and one function, compiled once up front; each run repeats it."""

    def __init__(self):
        self.cache = KernelCache()
        self.fn = fresh_kernel()
        self.cache.compile(self.fn, SIG, BASE)

    def __call__(self) -> dict:
        res, seconds = _timed(lambda: self.cache.compile(self.fn, SIG, BASE))
        return _result_details(res, seconds)


def partial_recompile(warm: CompileConfig, timed: CompileConfig) -> Callable[[], dict]:
    """New cache and function per run, warmed with `warm`, then `timed` is timed."""

    def scenario() -> dict:
        cache = KernelCache()
        fn = fresh_kernel()
        cache.compile(fn, SIG, warm)  # untimed warm-up
        res, seconds = _timed(lambda: cache.compile(fn, SIG, timed))
        return _result_details(res, seconds)

    return scenario


def make_scenarios():
    """(key, label, target ratio, change description, callable)."""
    return [
        ("cold", "cold", 0.9, "new cache, fresh fn, sm 86", scenario_cold),
        ("exact_repeat", "exact repeat", 100.0, "same cache, same config", ExactRepeat()),
        ("sm_change", "sm change", 2.5, "warm sm 80 -> sm 86",
         partial_recompile(BASE.replace(sm=80), BASE)),
        # Two opt changes: opt 0's unoptimised PTX makes nvJitLink's ptxas
        # step several times slower, whatever the cache does.
        ("opt_change", "opt change 3->0", 2.5, "warm opt 3 -> opt 0",
         partial_recompile(BASE, BASE.replace(opt=0))),
        ("opt_change_1", "opt change 3->1", 2.5, "warm opt 3 -> opt 1",
         partial_recompile(BASE, BASE.replace(opt=1))),
        ("maxreg_change", "max-registers change", 5.0, "warm None -> 32",
         partial_recompile(BASE, BASE.replace(max_registers=32))),
        ("fastmath_change", "fastmath change", 1.3, "warm False -> True",
         partial_recompile(BASE, BASE.replace(fastmath=True))),
    ]


# ---------------------------------------------------------------------------
# Driver


def _median(values: List[float]) -> Optional[float]:
    return statistics.median(values) if values else None


def _ms(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    ms = seconds * 1e3
    return f"{ms:.3f}" if ms < 10 else f"{ms:.1f}"


def _ratio(value: Optional[float]) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}x" if value >= 10 else f"{value:.2f}x"


def measure(runs: int, warmup: int, verbose: bool) -> dict:
    scenarios = make_scenarios()
    say = (lambda *a: print(*a, file=sys.stderr, flush=True)) if verbose else (lambda *a: None)

    # The first numba compile in a process pays imports and initialisation
    # (typing/target contexts, libNVVM and nvJitLink loading): untimed rounds
    # of everything, baseline and gpucache_ext alike.
    for i in range(warmup):
        say(f"warm-up round {i + 1}/{warmup}")
        run_baseline()
        for _key, _label, _target, _desc, fn in scenarios:
            fn()

    baseline: List[dict] = []
    samples: Dict[str, List[dict]] = {key: [] for key, *_ in scenarios}
    errors: Dict[str, str] = {}
    for run in range(runs):
        start = time.perf_counter()
        baseline.append(run_baseline())
        for key, _label, _target, _desc, fn in scenarios:
            if key in errors:
                continue
            try:
                samples[key].append(fn())
            except Exception as exc:  # report it, keep measuring the rest
                errors[key] = f"{type(exc).__name__}: {exc}"
                traceback.print_exc(file=sys.stderr)
        say(f"run {run + 1}/{runs}: {time.perf_counter() - start:.1f} s")

    base_seconds = [b["seconds"] for b in baseline]
    base_median = _median(base_seconds)
    report = {
        "baseline": {
            "name": "numba-cuda compile_ptx(cc=(8, 6), opt=True) + nvJitLink sm_86",
            "median_s": base_median,
            "seconds": base_seconds,
            "median_parts_s": {
                part: _median([b["parts"][part] for b in baseline]) for part in ("compile_ptx", "link")
            },
        },
        "scenarios": [],
    }
    for key, label, target, desc, _fn in scenarios:
        rows = samples[key]
        seconds = [r["seconds"] for r in rows]
        median = _median(seconds)
        ratio = base_median / median if median else None
        # Paired ratios (same run) as a second, noise-robust view.
        paired = [b["seconds"] / r["seconds"] for b, r in zip(baseline, rows) if r["seconds"] > 0]
        recompiled = Counter(r["recompiled"] for r in rows)
        stage_medians = {s: _median([r["stage_seconds"][s] for r in rows]) for s in STAGES}
        # Time of the call not spent in any stage: source identity, tokens, lookups.
        outside = _median([r["seconds"] - sum(r["stage_seconds"].values()) for r in rows])
        if key in errors:
            status = "ERROR"
        else:
            status = "PASS" if ratio is not None and ratio >= target else "FAIL"
        report["scenarios"].append({
            "key": key,
            "scenario": label,
            "change": desc,
            "runs": len(rows),
            "median_s": median,
            "seconds": seconds,
            "baseline_median_s": base_median,
            "ratio": ratio,
            "paired_ratio_median": _median(paired),
            "target": target,
            "status": status,
            "error": errors.get(key),
            "recompiled": [list(k) for k, _ in recompiled.most_common()],
            "recompiled_consistent": len(recompiled) <= 1,
            "stage_median_s": stage_medians,
            "outside_median_s": outside,
        })
    return report


def _recompiled_text(entry) -> str:
    sets = entry["recompiled"]
    if not sets:
        return "-"
    text = ",".join(sets[0]) or "none"
    if not entry["recompiled_consistent"]:
        text += " (varies)"
    return text


def print_report(report: dict, runs: int, out=sys.stdout):
    base = report["baseline"]
    print(f"gpucache_ext compile benchmark: 16x16 tiled matmul, {SIG}", file=out)
    print(f"baseline: {base['name']}", file=out)
    parts = base["median_parts_s"]
    print(f"  median {_ms(base['median_s'])} ms over {runs} runs "
          f"(compile_ptx {_ms(parts['compile_ptx'])} ms, link {_ms(parts['link'])} ms)", file=out)
    print(file=out)

    header = ("scenario", "median ms", "baseline ms", "ratio", "paired", "target", "result", "recompiled")
    rows = []
    for s in report["scenarios"]:
        rows.append((
            s["scenario"], _ms(s["median_s"]), _ms(s["baseline_median_s"]), _ratio(s["ratio"]),
            _ratio(s["paired_ratio_median"]), f">= {s['target']:g}x", s["status"], _recompiled_text(s),
        ))
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    right = {1, 2, 3, 4}

    def line(cells):
        return "  ".join(
            str(c).rjust(w) if i in right else str(c).ljust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    print(line(header), file=out)
    print("  ".join("-" * w for w in widths), file=out)
    for r in rows:
        print(line(r), file=out)
    print(file=out)
    print("ratio = baseline median / scenario median; paired = median of per-run "
          "baseline/scenario ratios; recompiled = stages with hit False.", file=out)
    print(file=out)

    # Where the time goes: per-stage medians (res.stages[stage].seconds).
    print("per-stage median ms (res.stages[stage].seconds; a hit's time is its lookup; "
          "outside = call minus stages):", file=out)
    sheader = ("scenario",) + STAGES + ("outside", "call")
    srows = []
    for s in report["scenarios"]:
        st = s["stage_median_s"]
        srows.append((s["scenario"],) + tuple(_ms(st[x]) for x in STAGES)
                     + (_ms(s["outside_median_s"]), _ms(s["median_s"])))
    swidths = [max(len(str(r[i])) for r in [sheader] + srows) for i in range(len(sheader))]
    for r in [sheader] + srows:
        print("  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)
                        for i, (c, w) in enumerate(zip(r, swidths))), file=out)

    missed = [s for s in report["scenarios"] if s["status"] != "PASS"]
    if missed:
        print(file=out)
        for s in missed:
            if s["status"] == "ERROR":
                print(f"ERROR {s['scenario']}: {s['error']}", file=out)
                continue
            st = {k: v for k, v in s["stage_median_s"].items() if v is not None}
            if s["outside_median_s"] is not None:
                st["outside the stages (source identity, tokens, lookups)"] = s["outside_median_s"]
            dominant = max(st, key=st.get) if st else "?"
            share = st[dominant] / s["median_s"] * 100 if st and s["median_s"] else 0.0
            print(f"MISS {s['scenario']}: {_ratio(s['ratio'])} vs target {s['target']:g}x "
                  f"({s['ratio'] / s['target'] * 100:.0f}% of target); "
                  f"dominant stage: {dominant} ({_ms(st.get(dominant))} ms, {share:.0f}% of the call)",
                  file=out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs per scenario (default 7)")
    parser.add_argument("--quick", action="store_true", help="3 runs, 1 warm-up round")
    parser.add_argument("--warmup", type=int, default=None,
                        help="untimed warm-up rounds of everything (default 2; 1 with --quick)")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers to PATH as JSON")
    parser.add_argument("--check", action="store_true", help="exit 1 if any target is missed")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)

    runs = 3 if args.quick and args.runs == parser.get_default("runs") else args.runs
    if runs < 1:
        parser.error("--runs must be >= 1")
    warmup = args.warmup if args.warmup is not None else (1 if args.quick else 2)

    report = measure(runs, warmup, verbose=not args.quiet)
    report["meta"] = {
        "runs": runs,
        "warmup_rounds": warmup,
        "signature": SIG,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "versions": _versions(),
        "git": _git_state(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    print_report(report, runs)

    if args.json:
        directory = os.path.dirname(os.path.abspath(args.json))
        os.makedirs(directory, exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
        print(f"\nwrote {args.json}")

    failed = any(s["status"] != "PASS" for s in report["scenarios"])
    return 1 if args.check and failed else 0


def _versions() -> dict:
    from importlib import metadata

    out = {}
    for dist in ("numba", "numba-cuda", "llvmlite", "cuda-core", "cuda-bindings", "gpucache_ext"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def _git_state() -> Optional[str]:
    """The checkout's commit, with '-dirty' when the working tree has changes."""
    import subprocess

    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT,
                              capture_output=True, text=True, timeout=10).stdout.strip() or None
    except Exception:
        return None


if __name__ == "__main__":
    sys.exit(main())
