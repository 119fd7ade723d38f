#!/usr/bin/env python
"""Per-launch Python time of a cached kernel against numba-cuda's own dispatcher.

A `gpucache_ext` kernel is numba-cuda's dispatcher with the cache as the
source of its variants, plus one check per launch (has a cell run since the
variants were checked?).  This measures what that costs: the time of
``configured(*arrays)`` for an already compiled kernel with 0 to 4 device
array arguments, for ``gpucache_ext.jit`` and for ``numba.cuda.jit``, in one
run: ``--runs`` batches of ``--launches`` launches, the two alternating batch
by batch; the medians of the batches' per-launch times, and the median of
the batches' ratios (ours over numba's, each pair measured back to back).

Without a GPU it runs itself under the recording stand-in driver
(``tests/fakecuda``, recording off), which answers every driver call at
once: the figures are then Python time alone, the part the two differ in.

    python bench/bench_launch.py              # 41 batches of 300 launches
    python bench/bench_launch.py --check      # exit 1 above 1.1x numba's time

Target (issue 21): at most 1.1x numba-cuda's per-launch time for every
argument count.  numba-cuda's own launch benchmark reports about 5.6 us per
launch with no arguments on a GPU.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.append(ROOT)

TARGET = 1.1
ARGS = range(5)


def kernels(nargs: int):
    """A kernel taking `nargs` float32 arrays and doing nothing, made twice
    from the same text: for numba and for gpucache_ext."""
    params = ", ".join(f"a{i}" for i in range(nargs))
    source = f"def launched_{nargs}({params}):\n    return\n"
    made = []
    for _ in range(2):
        namespace = {}
        exec(compile(source, f"<bench_launch {nargs}>", "exec"), namespace)
        made.append(namespace[f"launched_{nargs}"])
    return made


def measure(runs: int, launches: int):
    import numpy as np
    from numba import cuda

    import gpucache_ext

    gpucache_ext.configure_default_cache(directory="off")
    rows = []
    for nargs in ARGS:
        plain, cached = kernels(nargs)
        arrays = [cuda.device_array(128, np.float32) for _ in range(nargs)]
        launchers = {"numba": cuda.jit(plain)[128, 128], "gpucache_ext": gpucache_ext.jit(cached)[128, 128]}
        for launch in launchers.values():  # compile, load
            launch(*arrays)
        times = {name: [] for name in launchers}
        for _ in range(runs):
            for name, launch in launchers.items():  # interleaved in short batches: drift hits both
                start = time.perf_counter()
                for _ in range(launches):
                    launch(*arrays)
                times[name].append((time.perf_counter() - start) / launches)
        ratios = [ours / numba for ours, numba in zip(times["gpucache_ext"], times["numba"])]
        rows.append((nargs, statistics.median(times["numba"]) * 1e6,
                     statistics.median(times["gpucache_ext"]) * 1e6, statistics.median(ratios)))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=41, help="batches per kernel and argument count")
    parser.add_argument("--launches", type=int, default=300, help="launches per batch")
    parser.add_argument("--check", action="store_true", help=f"exit 1 above {TARGET}x numba's time")
    parser.add_argument("--here", action="store_true", help="measure in this process (a GPU or the stand-in)")
    args = parser.parse_args()
    from gpucache_ext.backends.numba_cuda.launch.device import gpu_available

    if not args.here:
        if not gpu_available():
            from tests import fakecuda

            done = fakecuda.run(os.path.abspath(__file__), cc=("9.0",), trace=False,
                                args=["--here", "--runs", str(args.runs), "--launches", str(args.launches)]
                                + (["--check"] if args.check else []))
            sys.stdout.write(done.stdout)
            sys.stderr.write(done.stderr)
            return done.returncode
    import warnings

    from numba.cuda.core.errors import NumbaPerformanceWarning

    warnings.simplefilter("ignore", NumbaPerformanceWarning)
    where = "a GPU" if os.environ.get("FAKECUDA_DEVICES") is None else "the recording stand-in driver"
    print(f"per-launch time, medians of {args.runs} batches of {args.launches} launches, on {where}")
    print(f"{'arguments':>9}  {'numba-cuda':>11}  {'gpucache_ext':>12}  {'ratio (median of pairs)':>6}")
    rows = measure(args.runs, args.launches) if gpu_available() else []
    if not rows:
        print("no GPU and no stand-in driver: nothing measured", file=sys.stderr)
        return 1
    worst = 0.0
    for nargs, numba_us, ours_us, ratio in rows:
        worst = max(worst, ratio)
        print(f"{nargs:>9}  {numba_us:>9.2f}us  {ours_us:>10.2f}us  {ratio:>5.2f}x")
    print(f"worst ratio {worst:.2f}x (target <= {TARGET}x)")
    return 1 if args.check and worst > TARGET else 0


if __name__ == "__main__":
    raise SystemExit(main())
