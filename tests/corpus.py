"""The kernels of numba-cuda's own test suite, compiled through the staged
cache and compared with numba-cuda's output.

Harvest, as a user would hit the kernels: each test module installed with
numba-cuda (``numba/cuda/tests/cudapy`` and ``doc_examples``) is imported and
its tests are run, with numba's compile of every kernel recorded (the
dispatcher's Python function, argument types and decorator options).  There is
no GPU: numba asks a stand-in for the compute capability, launches do nothing,
and numba.cuda's memory API is the simulator's.  Tests fail after that, which
does not matter: only what numba compiled on the way is kept.

Compare: each recorded kernel is compiled for a few targets and flag sets by
numba-cuda (`compile_ptx`, the reference) and by `KernelCache` (all four
stages, down to the cubin), and sorted into

* ``equivalent``: the same PTX, symbol names normalised (`equivalence.py`);
* ``different``: PTX that differs;
* ``refused``: a `UnsupportedKernelError`, grouped by its reason;
* ``failed``: any other error;
* ``numba-fails``: numba-cuda itself does not compile it (left out).

Run as ``python -m tests.corpus [MODULE...] [--variants all|default]``; it
prints the table.  Each module runs in a subprocess of its own (numba's tests
change process state), two at a time.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import contextlib
import importlib
import inspect
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import unittest
from pathlib import Path

CC = (8, 6)

# name -> (compute capability, options given to both compilers)
VARIANTS = {
    "sm86": ((8, 6), {}),
    "sm75": ((7, 5), {}),
    "sm90-fastmath": ((9, 0), {"fastmath": True}),
    "sm80-opt0": ((8, 0), {"opt": False}),
    "sm86-lineinfo": ((8, 6), {"lineinfo": True}),
}

# Modules that start processes or threads, or test numba's own disk cache:
# nothing to harvest there that other modules do not have, and slow.
SKIPPED_MODULES = {
    "test_ipc", "test_multiprocessing", "test_multithreads", "test_multigpu",
    "test_caching", "test_nondet", "test_cupy_bfloat16_interop",
}

TEST_TIMEOUT = 60  # seconds per harvested test
COMPARE_OPTIONS = ("debug", "lineinfo", "fastmath", "opt", "launch_bounds", "forceinline")


def modules():
    """Every harvestable test module name, cudapy then doc examples."""
    import numba.cuda.tests as tests

    root = Path(tests.__file__).parent
    names = []
    for folder in ("cudapy", "doc_examples"):
        for path in sorted((root / folder).glob("test_*.py")):
            if path.stem not in SKIPPED_MODULES:
                names.append(f"numba.cuda.tests.{folder}.{path.stem}")
    return names


class _StandIn:
    def __init__(self, cc):
        self.compute_capability = cc
        self.id = 0
        self.name = b"stand-in"


class _Timeout(BaseException):
    pass


def _alarm(signum, frame):
    raise _Timeout()


@contextlib.contextmanager
def _harvesting(found):
    """numba compiles without a GPU (the stand-in answers for the device),
    launches do nothing, memory is the simulator's; every kernel numba
    compiles is appended to `found` as (dispatcher, argtypes)."""
    import numba.cuda
    import numba.cuda.api as api
    import numba.cuda.dispatcher as dispatcher
    from numba.core import sigutils
    from numba.cuda import testing

    try:
        from gpucache_ext.backends.numba_cuda.launch.simulator import simulate_memory
    except ImportError:  # an older gpucache_ext (measuring before/after): numba's memory API
        def simulate_memory(enable):
            pass

    saved = {
        (dispatcher, "get_current_device"): dispatcher.get_current_device,
        (dispatcher.CUDADispatcher, "compile"): dispatcher.CUDADispatcher.compile,
        (dispatcher._Kernel, "launch"): dispatcher._Kernel.launch,
        (testing, "cc_X_or_above"): testing.cc_X_or_above,
        (numba.cuda, "get_current_device"): numba.cuda.get_current_device,
        (api, "get_current_device"): api.get_current_device,
        (api, "is_fp8_supported"): api.is_fp8_supported,
    }
    original_compile = dispatcher.CUDADispatcher.compile

    def compile(self, sig):
        if not self.targetoptions.get("device"):
            args, _ = sigutils.normalize_signature(sig)
            found.append((self, tuple(args), _settings_now()))
        return original_compile(self, sig)

    dispatcher.get_current_device = numba.cuda.get_current_device = api.get_current_device = \
        lambda: _StandIn(CC)
    api.is_fp8_supported = lambda: CC >= (8, 9)
    dispatcher.CUDADispatcher.compile = compile
    dispatcher._Kernel.launch = lambda self, *args, **kwargs: None
    testing.cc_X_or_above = lambda major, minor: CC >= (major, minor)
    simulate_memory(True)
    try:
        yield
    finally:
        simulate_memory(False)
        for (owner, name), value in saved.items():
            setattr(owner, name, value)


_IMPORTED: dict = {}  # numba's helper cache as the harvested module's import left it


def harvest(module_name):
    """[(dispatcher, argtypes)] numba compiled while running the module's
    tests, without duplicates (same function, types and options)."""
    from .equivalence import numbas_helpers

    found = []
    with _harvesting(found):
        module = importlib.import_module(module_name)
        # what the import compiled (device functions with signatures): what a
        # fresh process importing the module starts from (`compare`)
        _IMPORTED["helpers"] = dict(numbas_helpers())
        suite = unittest.defaultTestLoader.loadTestsFromModule(module)
        previous = signal.signal(signal.SIGALRM, _alarm)
        try:
            for test in _flatten(suite):
                signal.alarm(TEST_TIMEOUT)
                try:
                    with contextlib.redirect_stdout(io.StringIO()), \
                            contextlib.redirect_stderr(io.StringIO()):
                        test.run(unittest.TestResult())
                except _Timeout:
                    pass
                finally:
                    signal.alarm(0)
        finally:
            signal.signal(signal.SIGALRM, previous)
    unique, seen = [], set()
    for dispatcher, argtypes, settings in found:
        key = (dispatcher.py_func.__code__, argtypes, _options_key(dispatcher), repr(settings))
        if key not in seen:
            seen.add(key)
            unique.append((dispatcher, argtypes, settings))
    return unique


def _settings_now():
    """numba's settings a test may change around a compile (`numba.cuda.config`)."""
    from numba.cuda import config

    from gpucache_ext.toolchain import NEUTRALISED_SETTINGS, SETTINGS_READ_BY_LOWERING

    return {name: getattr(config, name, None)
            for name in SETTINGS_READ_BY_LOWERING + NEUTRALISED_SETTINGS + ("CUDA_NVRTC_EXTRA_SEARCH_PATHS",)}


@contextlib.contextmanager
def _settings(settings):
    from numba.cuda import config

    saved = _settings_now()
    for name, value in settings.items():
        setattr(config, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(config, name, value)


def _flatten(suite):
    for test in suite:
        if isinstance(test, unittest.TestSuite):
            yield from _flatten(test)
        else:
            yield test


def _options_key(dispatcher):
    return repr(sorted((k, repr(v)) for k, v in dispatcher.targetoptions.items()))


def _first_difference(theirs: str, ours: str) -> str:
    """The first line where our normalised PTX departs from numba-cuda's."""
    a, b = theirs.splitlines(), ours.splitlines()
    for number, (x, y) in enumerate(zip(a, b), 1):
        if x != y:
            return f"line {number}: numba-cuda {x.strip()[:160]!r}, ours {y.strip()[:160]!r}"
    return f"numba-cuda has {len(a)} lines, ours {len(b)}"


def _reason(exc) -> str:
    """An error's first line with the specifics (names, numbers, paths) blurred
    so that reasons group."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    text = re.sub(r"[\w.]*<locals>[\w.<>]*|numba\.cuda\.tests[\w.]*", "K", text)
    text = re.sub(r"'[^']*'|\"[^\"]*\"|\([^()]*\)", "…", text)
    text = re.sub(r"\b\d+\b", "N", text)
    return text[:140]


def compare(dispatcher, argtypes, settings, variant):
    """(outcome, reason) of one kernel in one variant."""
    from numba import cuda

    from gpucache_ext import CompileConfig, KernelCache, UnsupportedKernelError

    try:
        from gpucache_ext.backends.numba_cuda.options import config_with_options, explicit_options
    except ImportError:  # an older gpucache_ext (measuring before/after)
        def explicit_options(options):
            return {k: v for k, v in options.items() if k in ("fastmath", "debug", "lineinfo") and v}

        def config_with_options(config, options):
            return config.replace(**{k: bool(v) for k, v in options.items()})

    from .equivalence import forget_numbas_compiles, normalise_ptx, stand_in_gpu

    cc, flags = VARIANTS[variant]
    # the kernel's own options where they differ from numba's defaults override
    # the variant's flags, for both compilers (as in a %%gpukernel cell)
    explicit = explicit_options(dispatcher.targetoptions)
    numba_options = {**flags, **{k: v for k, v in explicit.items() if k in COMPARE_OPTIONS}}
    def reference(helpers):
        # numba's own compile, as a fresh process with these helpers compiled compiles it
        forget_numbas_compiles(dispatcher.py_func, helpers)
        with stand_in_gpu(cc), _settings(settings), contextlib.redirect_stderr(io.StringIO()):
            return cuda.compile_ptx(dispatcher.py_func, argtypes, cc=cc, **numba_options)[0]

    try:
        expected = reference(_IMPORTED.get("helpers"))  # (those the module's import compiled)
    except Exception as exc:
        return "numba-fails", _reason(exc)
    try:
        config = config_with_options(CompileConfig(sm=cc[0] * 10 + cc[1], **_config_flags(flags)), explicit)
        with _settings(settings), contextlib.redirect_stderr(io.StringIO()):
            cache = KernelCache(audit=False)
            link = {"link": dispatcher.targetoptions.get("link") or ()} \
                if "link" in inspect.signature(cache.compile).parameters else {}
            result = cache.compile(dispatcher.py_func, argtypes, config, **link)
    except UnsupportedKernelError as exc:
        return "refused", _reason(exc)
    except Exception as exc:
        return "failed", f"{type(exc).__name__}: {_reason(exc)}"
    ours, theirs = normalise_ptx(result.ptx), normalise_ptx(expected)
    # numba reuses a helper the import compiled for a device function with
    # other flags (without lineinfo, say); the pipeline lowers helpers with
    # the flags of what calls them, as numba does where none was compiled before
    if ours == theirs or ours == normalise_ptx(reference({})):
        return "equivalent", ""
    return "different", _first_difference(theirs, ours)


def _config_flags(flags):
    out = dict(flags)
    if "opt" in out:
        out["opt"] = 3 if out["opt"] else 0
    return out


def run_module(module_name, variants):
    """Harvest one module and compare its kernels; JSON records on stdout."""
    os.environ.setdefault("GPUCACHE_DIR", "off")
    try:
        kernels = harvest(module_name)
    except Exception as exc:  # the module does not import here
        print(json.dumps({"module": module_name, "kernel": None, "outcome": "no-import",
                          "reason": _reason(exc)}), flush=True)
        return
    for index, (dispatcher, argtypes, settings) in enumerate(kernels):
        names = variants(index)
        for variant in names:
            started = time.perf_counter()
            outcome, reason = compare(dispatcher, argtypes, settings, variant)
            print(json.dumps({
                "module": module_name.rsplit(".", 1)[-1],
                "kernel": dispatcher.py_func.__qualname__,
                "sig": ", ".join(str(t) for t in argtypes),
                "variant": variant, "outcome": outcome, "reason": reason,
                "seconds": round(time.perf_counter() - started, 3),
            }), flush=True)


def _variant_plan(kind):
    rotating = [name for name in VARIANTS if name != "sm86"]
    if kind == "default":
        return lambda index: ["sm86"]
    # every kernel for sm86, plus one other variant in turn
    return lambda index: ["sm86", rotating[index % len(rotating)]]


def collect(module_names, variants="default", jobs=2, timeout=1800):
    """Records of every kernel of `module_names`, each module in a subprocess."""
    root = Path(__file__).resolve().parent.parent

    def one(name):
        proc = subprocess.run(
            [sys.executable, "-m", "tests.corpus", "--one", name, "--variants", variants],
            cwd=root, capture_output=True, text=True, timeout=timeout,
            env={**os.environ, "GPUCACHE_DIR": "off", "NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS": "0"})
        records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0:
            records.append({"module": name, "kernel": None, "outcome": "crashed",
                            "reason": (proc.stderr.strip().splitlines() or ["?"])[-1][:200]})
        return records

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        return [record for records in pool.map(one, module_names) for record in records]


def table(records):
    """Counts by outcome, refusals and failures by reason (text)."""
    kernels = [r for r in records if r.get("kernel")]
    counted = [r for r in kernels if r["outcome"] != "numba-fails"]
    by_outcome = collections.Counter(r["outcome"] for r in counted)
    lines = [f"compiles (kernel x variant): {len(kernels)} harvested, "
             f"{len(kernels) - len(counted)} that numba-cuda itself does not compile left out, "
             f"{len(counted)} counted"]
    for outcome in ("equivalent", "different", "refused", "failed"):
        n = by_outcome.get(outcome, 0)
        share = 100.0 * n / len(counted) if counted else 0.0
        lines.append(f"  {outcome:<11} {n:5d}  {share:5.1f}%")
        if outcome in ("refused", "failed", "different"):
            reasons = collections.Counter(r["reason"] or r["kernel"] for r in counted
                                          if r["outcome"] == outcome)
            for reason, count in reasons.most_common():
                lines.append(f"      {count:4d}  {reason}")
    broken = [r for r in records if not r.get("kernel")]
    for r in broken:
        lines.append(f"  module {r['module']}: {r['outcome']}: {r['reason']}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="module names (default: all)")
    parser.add_argument("--variants", choices=("default", "all"), default="all")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", help="also write the records to this file")
    args = parser.parse_args(argv)
    if args.one:
        run_module(args.one, _variant_plan(args.variants))
        return 0
    names = modules()
    if args.modules:
        names = [n for n in names if n.rsplit(".", 1)[-1] in args.modules]
    records = collect(names, args.variants, args.jobs)
    if args.json:
        Path(args.json).write_text("\n".join(json.dumps(r) for r in records) + "\n")
    print(table(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
