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
    exact repeat    same cache, same function, same config         target >= 800x
    exact repeat, warm   the same, 21 calls in a row (no collection)    target >= 800x
    sm change       new cache warmed at sm 80, time sm 86          target >= 2.5x
    opt change      new cache warmed at opt 3, time opt 0 / opt 1  target >= 2.5x
    maxreg change   new cache warmed with max_registers None, 32   target >= 5x
    fastmath change new cache warmed at fastmath False, True       target >= 1.3x

Early cutoff (issue 12), on a float32 copy without floating-point maths, each
against its own baseline: numba-cuda compiling the timed config from scratch
(fastmath=True; libNVVM opt=2; prec_div=0, the last two through numba-cuda's
code library, as compile_ptx cannot say them)::

    fastmath toggle, no FP maths      warm fastmath False, time True   target >= 3x
    opt 3->2, same PTX                warm opt 3, time opt 2           target >= 3x
    prec_div change, same PTX         warm prec_div None, time False   target >= 3x

The last two assert that the cubin was a cutoff hit (skipped when the
gpucache_ext measured has no StageResult.cutoff).  The fastmath toggle rebuilds
llvm, ptx and cubin: numba puts the fastmath flags in the kernel's mangled
name, which is in the PTX, and ftz/prec_div/prec_sqrt follow fastmath.

No GPU is needed: the target is always given explicitly.

    python bench/bench_compile.py               # 7 runs
    python bench/bench_compile.py --quick       # 3 runs
    python bench/bench_compile.py --runs 11 --json bench/results/compile.json --check

Exit status is 0 (this is a report), unless --check is given: then 1 when a
target is missed or a scenario failed.

Before/after: PYTHONPATH goes before this checkout, so

    PYTHONPATH=/other/checkout python bench/bench_compile.py

measures /other/checkout's gpucache_ext with this script (the header says which).
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
from typing import Callable, Dict, List, NamedTuple, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:  # run from a checkout without installing
    # ... but after PYTHONPATH: `PYTHONPATH=/other/checkout python bench/bench_compile.py`
    # measures that checkout's gpucache_ext with this script (before/after comparisons).
    _env = {os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    _at = max((i + 1 for i, p in enumerate(sys.path) if p and os.path.abspath(p) in _env), default=0)
    sys.path.insert(_at, ROOT)

from numba import cuda  # noqa: E402
from numba.cuda import compiler as numba_compiler  # noqa: E402
from cuda.core import Linker, LinkerOptions, ObjectCode  # noqa: E402

import gpucache_ext  # noqa: E402
from gpucache_ext import STAGES, CompileConfig, KernelCache, samples  # noqa: E402

SIG = samples.MATMUL_SIG

# The 16x16 tiled matmul of gpucache_ext/samples.py, C = A @ B.  Kept as text:
# every run execs it into a fresh namespace, so each run gets a new function
# object and nothing is memoised on it (numba keeps per-function state; so
# could a cache).

# A kernel without floating-point maths, for the early-cutoff scenarios: loads
# and stores only, so fastmath, prec_div or opt 3->2 leave its PTX body as it
# is.  (tests/kernels.py's `copy` adds a float constant, which fastmath turns
# into add.ftz.f32.)
COPY = '''\
from numba import cuda


@cuda.jit
def copy(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = x[i]
'''
COPY_SIG = "void(float32[:], float32[:])"

# name -> (source, function name, signature, description)
KERNELS = {
    "matmul": (samples.MATMUL, "matmul", SIG, "16x16 tiled matmul"),
    "copy": (COPY, "copy", COPY_SIG, "float32 copy, no floating-point maths"),
}


def fresh_kernel(kernel: str = "matmul"):
    """A new function object for the kernel, in a new globals dict."""
    source, name, _sig, _desc = KERNELS[kernel]
    return samples.load(source, module="bench_kernels")[name].py_func


BASE = CompileConfig(sm=86, opt=3, fastmath=False, max_registers=None)


# ---------------------------------------------------------------------------
# Measurements.  Each returns a dict with "seconds" (the timed region only)
# and details; set-up (function creation, cache warm-up) is outside the timer.


def _timed(fn: Callable[[], object]):
    gc.collect()
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def numba_ptx(fn, sig: str, config: CompileConfig) -> str:
    """numba-cuda's PTX for `config`, compiled from scratch.

    ``cuda.compile_ptx`` where its options can say `config` (opt 0 or 3, the
    math options following fastmath).  Otherwise (opt 1 or 2, prec_div set
    apart from fastmath) the steps compile_ptx takes, with the libNVVM options
    set on numba's code library before it runs libNVVM (which it does lazily,
    in get_asm_strs): numba-cuda's own typing, lowering and libNVVM call.
    """
    unsupported = {k: v for k, v in config.fields().items()
                   if k in ("debug", "lineinfo", "max_registers", "launch_bounds", "lto")
                   and v != CompileConfig().fields()[k]}
    if unsupported:
        raise ValueError(f"the numba-cuda baseline does not handle {unsupported}")
    math = {k: getattr(config, k) for k in ("ftz", "prec_div", "prec_sqrt", "fma")
            if getattr(config, k) is not None}
    if config.opt in (0, 3) and not math:
        ptx, _resty = cuda.compile_ptx(fn, sig, cc=config.cc, opt=config.opt == 3,
                                       fastmath=config.fastmath)
        return ptx
    lib, _resty = numba_compiler._compile_pyfunc_with_fixup(
        fn, sig, device=False, fastmath=config.fastmath, cc=config.cc, opt=True, abi="numba")
    lib._nvvm_options = {**lib._nvvm_options, "opt": config.opt, **math}
    (ptx,) = lib.get_asm_strs(cc=config.cc)
    return ptx


class Baseline:
    """numba-cuda compiling one kernel at one config from scratch: a fresh
    function object each run, numba's PTX, then nvJitLink."""

    def __init__(self, kernel: str, config: CompileConfig, name: str):
        self.kernel, self.config, self.name = kernel, config, name

    def __call__(self) -> dict:
        fn = fresh_kernel(self.kernel)
        sig = KERNELS[self.kernel][2]
        parts = {}

        def compile_and_link():
            t0 = time.perf_counter()
            ptx = numba_ptx(fn, sig, self.config)
            t1 = time.perf_counter()
            linker = Linker(ObjectCode.from_ptx(ptx.encode(), name="k.ptx"),
                            options=LinkerOptions(arch=self.config.sm_name))
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


COPY_FASTMATH = BASE.replace(fastmath=True)
COPY_OPT2 = BASE.replace(opt=2)
COPY_PREC_DIV = BASE.replace(prec_div=False)

# key -> baseline; the scenarios name theirs.
BASELINES = {
    "matmul": Baseline("matmul", BASE,
                       "numba-cuda compile_ptx(cc=(8, 6), opt=True) + nvJitLink sm_86, matmul"),
    "copy_fastmath": Baseline("copy", COPY_FASTMATH,
                              "numba-cuda compile_ptx(cc=(8, 6), opt=True, fastmath=True) + nvJitLink, copy"),
    "copy_opt2": Baseline("copy", COPY_OPT2, "numba-cuda, libNVVM opt=2, + nvJitLink, copy"),
    "copy_prec_div": Baseline("copy", COPY_PREC_DIV, "numba-cuda, libNVVM prec_div=0, + nvJitLink, copy"),
}


def _check_cubin(cubin: bytes, what: str):
    if not cubin.startswith(b"\x7fELF"):
        raise RuntimeError(f"{what}: the cubin is not an ELF image ({cubin[:8]!r})")


def _cutoffs(res):
    """Stages that were cutoff hits; None where StageResult has no `cutoff`
    (gpucache_ext from before early cutoff)."""
    if not all(hasattr(res.stages[s], "cutoff") for s in STAGES):
        return None
    return tuple(s for s in STAGES if res.stages[s].cutoff)


def _result_details(res, seconds) -> dict:
    _check_cubin(res.cubin, "gpucache_ext")
    return {
        "seconds": seconds,
        "recompiled": tuple(s for s in STAGES if not res.stages[s].hit),
        "cutoffs": _cutoffs(res),
        "stage_seconds": {s: res.stages[s].seconds for s in STAGES},
    }


def scenario_cold() -> dict:
    cache = KernelCache()
    fn = fresh_kernel()
    res, seconds = _timed(lambda: cache.compile(fn, SIG, BASE))
    return _result_details(res, seconds)


class ExactRepeat:
    """One cache and one function, compiled once up front; each run repeats it.

    Every timed call follows a full garbage collection (as every scenario's),
    which leaves the CPU's caches cold: the call then pays for each line of
    memory it touches.  `warm` times the median of 21 repeats in a row
    instead, as a loop of compiles (a tuning sweep) sees them."""

    def __init__(self, warm: bool = False):
        self.cache = KernelCache()
        self.fn = fresh_kernel()
        self.cache.compile(self.fn, SIG, BASE)
        self.warm = warm

    def __call__(self) -> dict:
        if not self.warm:
            res, seconds = _timed(lambda: self.cache.compile(self.fn, SIG, BASE))
            return _result_details(res, seconds)
        times = []
        for _ in range(21):
            start = time.perf_counter()
            res = self.cache.compile(self.fn, SIG, BASE)
            times.append(time.perf_counter() - start)
        return _result_details(res, statistics.median(times))


def partial_recompile(warm: CompileConfig, timed: CompileConfig, kernel: str = "matmul",
                      cutoff: Optional[str] = None) -> Callable[[], dict]:
    """New cache and function per run, warmed with `warm`, then `timed` is timed.

    With `cutoff` (a stage), the timed compile must have been a cutoff hit at
    that stage, so that the scenario measures what it says; the check is
    skipped where StageResult has no `cutoff` (gpucache_ext from before early
    cutoff, for before/after runs)."""
    sig = KERNELS[kernel][2]

    def scenario() -> dict:
        cache = KernelCache()
        fn = fresh_kernel(kernel)
        cache.compile(fn, sig, warm)  # untimed warm-up
        res, seconds = _timed(lambda: cache.compile(fn, sig, timed))
        details = _result_details(res, seconds)
        if cutoff is not None and details["cutoffs"] is not None and cutoff not in details["cutoffs"]:
            raise AssertionError(
                f"{timed.summary()} after {warm.summary()}: {cutoff} was not a cutoff hit "
                f"(recompiled {', '.join(details['recompiled']) or 'nothing'}); "
                f"the scenario would not measure early cutoff")
        return details

    scenario.cutoff = cutoff
    return scenario


class Scenario(NamedTuple):
    key: str
    label: str
    target: float
    change: str
    run: Callable[[], dict]
    baseline: str = "matmul"  # a key of BASELINES


def make_scenarios() -> List[Scenario]:
    return [
        Scenario("cold", "cold", 0.9, "new cache, fresh fn, sm 86", scenario_cold),
        Scenario("exact_repeat", "exact repeat", 800.0, "same cache, same config", ExactRepeat()),
        Scenario("exact_repeat_warm", "exact repeat, warm", 800.0, "21 repeats in a row, median",
                 ExactRepeat(warm=True)),
        Scenario("sm_change", "sm change", 2.5, "warm sm 80 -> sm 86",
                 partial_recompile(BASE.replace(sm=80), BASE)),
        # Two opt changes: opt 0's unoptimised PTX makes nvJitLink's ptxas
        # step several times slower, whatever the cache does.
        Scenario("opt_change", "opt change 3->0", 2.5, "warm opt 3 -> opt 0",
                 partial_recompile(BASE, BASE.replace(opt=0))),
        Scenario("opt_change_1", "opt change 3->1", 2.5, "warm opt 3 -> opt 1",
                 partial_recompile(BASE, BASE.replace(opt=1))),
        Scenario("maxreg_change", "max-registers change", 5.0, "warm None -> 32",
                 partial_recompile(BASE, BASE.replace(max_registers=32))),
        Scenario("fastmath_change", "fastmath change", 1.3, "warm False -> True",
                 partial_recompile(BASE, BASE.replace(fastmath=True))),
        # Early cutoff (issue 12), on the copy kernel, each against numba-cuda
        # compiling the timed config from scratch.  fastmath changes the NVVM
        # IR (numba puts the flags in the kernel's mangled name, an abi tag)
        # and the libNVVM options (ftz, prec_div, prec_sqrt follow it), so
        # llvm, ptx and cubin all rebuild: 3x is the goal, not met.
        Scenario("copy_fastmath", "fastmath toggle, no FP maths", 3.0, "copy: warm False -> True",
                 partial_recompile(BASE, COPY_FASTMATH, kernel="copy"), baseline="copy_fastmath"),
        Scenario("copy_opt2", "opt 3->2, same PTX (cubin reused)", 3.0, "copy: warm opt 3 -> opt 2",
                 partial_recompile(BASE, COPY_OPT2, kernel="copy", cutoff="cubin"), baseline="copy_opt2"),
        Scenario("copy_prec_div", "prec_div change, same PTX (cubin reused)", 3.0,
                 "copy: warm prec_div None -> False",
                 partial_recompile(BASE, COPY_PREC_DIV, kernel="copy", cutoff="cubin"),
                 baseline="copy_prec_div"),
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
    # Each run measures a baseline, then the scenarios compared with it, then
    # the next baseline: every ratio is taken within the same stretch of time.
    order = []
    for sc in scenarios:
        if sc.baseline not in order:
            order.append(sc.baseline)
    groups = [(b, [sc for sc in scenarios if sc.baseline == b]) for b in order]

    # The first numba compile in a process pays imports and initialisation
    # (typing/target contexts, libNVVM and nvJitLink loading): untimed rounds
    # of everything, baseline and gpucache_ext alike.
    for i in range(warmup):
        say(f"warm-up round {i + 1}/{warmup}")
        for bkey, group in groups:
            BASELINES[bkey]()
            for sc in group:
                sc.run()

    baselines: Dict[str, List[dict]] = {b: [] for b in order}
    samples: Dict[str, List[dict]] = {sc.key: [] for sc in scenarios}
    # Per scenario: its sample and its baseline's from the same run.
    pairs: Dict[str, List[tuple]] = {sc.key: [] for sc in scenarios}
    errors: Dict[str, str] = {}
    for run in range(runs):
        start = time.perf_counter()
        for bkey, group in groups:
            base = BASELINES[bkey]()
            baselines[bkey].append(base)
            for sc in group:
                if sc.key in errors:
                    continue
                try:
                    sample = sc.run()
                except Exception as exc:  # report it, keep measuring the rest
                    errors[sc.key] = f"{type(exc).__name__}: {exc}"
                    traceback.print_exc(file=sys.stderr)
                    continue
                samples[sc.key].append(sample)
                pairs[sc.key].append((base["seconds"], sample["seconds"]))
        say(f"run {run + 1}/{runs}: {time.perf_counter() - start:.1f} s")

    def baseline_report(bkey):
        rows, b = baselines[bkey], BASELINES[bkey]
        return {
            "name": b.name,
            "kernel": b.kernel,
            "config": b.config.summary(),
            "median_s": _median([r["seconds"] for r in rows]),
            "seconds": [r["seconds"] for r in rows],
            "median_parts_s": {
                part: _median([r["parts"][part] for r in rows]) for part in ("compile_ptx", "link")
            },
        }

    report = {
        "baseline": baseline_report("matmul"),  # docs/benchmarks.md's "numba-cuda"
        "baselines": {bkey: baseline_report(bkey) for bkey in order},
        "scenarios": [],
    }
    for sc in scenarios:
        rows = samples[sc.key]
        seconds = [r["seconds"] for r in rows]
        median = _median(seconds)
        base_median = report["baselines"][sc.baseline]["median_s"]
        ratio = base_median / median if median else None
        # Paired ratios (same run) as a second, noise-robust view.
        paired = [b / s for b, s in pairs[sc.key] if s > 0]
        recompiled = Counter(r["recompiled"] for r in rows)
        cutoffs = Counter(r["cutoffs"] for r in rows)
        stage_medians = {s: _median([r["stage_seconds"][s] for r in rows]) for s in STAGES}
        # Time of the call not spent in any stage: source identity, tokens, lookups.
        outside = _median([r["seconds"] - sum(r["stage_seconds"].values()) for r in rows])
        if sc.key in errors:
            status = "ERROR"
        else:
            status = "PASS" if ratio is not None and ratio >= sc.target else "FAIL"
        expected_cutoff = getattr(sc.run, "cutoff", None)
        report["scenarios"].append({
            "key": sc.key,
            "scenario": sc.label,
            "change": sc.change,
            "kernel": BASELINES[sc.baseline].kernel,
            "baseline": sc.baseline,
            "runs": len(rows),
            "median_s": median,
            "seconds": seconds,
            "baseline_median_s": base_median,
            "ratio": ratio,
            "paired_ratio_median": _median(paired),
            "target": sc.target,
            "status": status,
            "error": errors.get(sc.key),
            "recompiled": [list(k) for k, _ in recompiled.most_common()],
            "recompiled_consistent": len(recompiled) <= 1,
            # stages that were cutoff hits, per distinct outcome; None: the
            # gpucache_ext measured has no StageResult.cutoff
            "cutoffs": [None if k is None else list(k) for k, _ in cutoffs.most_common()],
            "cutoff_asserted": (expected_cutoff if expected_cutoff and rows
                                and all(r["cutoffs"] is not None for r in rows) else None),
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


def _cutoff_text(entry) -> str:
    sets = entry["cutoffs"]
    if not sets:
        return "-"
    if sets[0] is None:
        return "n/a"  # no StageResult.cutoff in the gpucache_ext measured
    text = ",".join(sets[0]) or "none"
    if len(sets) > 1:
        text += " (varies)"
    if entry["cutoff_asserted"]:
        text += " (asserted)"
    return text


def print_report(report: dict, runs: int, out=sys.stdout):
    meta = report.get("meta", {})
    print(f"gpucache_ext compile benchmark: 16x16 tiled matmul, {SIG}; "
          f"copy (no floating-point maths), {COPY_SIG}", file=out)
    if meta.get("gpucache_ext"):
        print(f"gpucache_ext measured: {meta['gpucache_ext']} ({meta.get('gpucache_ext_git') or '?'})",
              file=out)
    print(f"baselines (numba-cuda from scratch, a fresh function each run), medians over {runs} runs:",
          file=out)
    for bkey, base in report["baselines"].items():
        parts = base["median_parts_s"]
        print(f"  {bkey}: {base['name']}", file=out)
        print(f"    median {_ms(base['median_s'])} ms "
              f"(compile_ptx {_ms(parts['compile_ptx'])} ms, link {_ms(parts['link'])} ms)", file=out)
    print(file=out)

    header = ("scenario", "median ms", "baseline ms", "ratio", "paired", "target", "result", "recompiled",
              "cutoff", "vs")
    rows = []
    for s in report["scenarios"]:
        rows.append((
            s["scenario"], _ms(s["median_s"]), _ms(s["baseline_median_s"]), _ratio(s["ratio"]),
            _ratio(s["paired_ratio_median"]), f">= {s['target']:g}x", s["status"], _recompiled_text(s),
            _cutoff_text(s), s["baseline"],
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
          "baseline/scenario ratios; recompiled = stages with hit False; cutoff = stages "
          "that were cutoff hits (n/a: this gpucache_ext has no StageResult.cutoff; "
          "asserted: the scenario fails unless it is); vs = the scenario's baseline.", file=out)
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
        "copy_signature": COPY_SIG,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "versions": _versions(),
        "git": _git_state(ROOT),  # this script's checkout
        # where gpucache_ext came from (PYTHONPATH can name another checkout)
        "gpucache_ext": os.path.dirname(os.path.abspath(gpucache_ext.__file__)),
        "gpucache_ext_git": _git_state(os.path.dirname(os.path.abspath(gpucache_ext.__file__))),
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


def _git_state(path: str) -> Optional[str]:
    """The commit of the checkout at `path`, with '-dirty' when its working tree has changes."""
    import subprocess

    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=path,
                              capture_output=True, text=True, timeout=10).stdout.strip() or None
    except Exception:
        return None


if __name__ == "__main__":
    sys.exit(main())
