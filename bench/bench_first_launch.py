#!/usr/bin/env python
"""The first launch of a lazy kernel in a script, cold against warm.

A script using ``gpucache_ext.jit`` is run as a new process, as a user runs
it: once with an empty cache folder (cold: every stage compiles at the first
launch) and then again with the folder the cold run filled (warm: every
stage is found on disk), the warm run once with the default audit policy
(the first disk hit of each kernel is audited in the background) and once
with ``GPUCACHE_AUDIT=off``.  Each process times its first launch
(``act[1, 256](r, x)``, compile and run on numba's simulator without a GPU,
on the GPU where there is one) and its second, garbage collected before each
(a full collection comes when earlier allocations make it due, 50-70 ms with
numba loaded: it would be charged to whichever launch it fell in).  ``--runs`` rounds, each a
fresh folder; the medians, and the ratios warm / cold of each round
(medians of those).

    python bench/bench_first_launch.py             # 5 rounds
    python bench/bench_first_launch.py --check     # exit 1 unless warm < cold

Target (issue 35, item 9): a warm process's first launch faster than a cold
one's, with the audit on as well as off (the audit must not land on the
user's first launch).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

SCRIPT = r'''
import gc, json, time
import numpy as np
import gpucache_ext
from numba import cuda

@gpucache_ext.jit
def act(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = x[i] * 2.0 + 1.0

x = np.arange(256, dtype=np.float32)
r = np.zeros_like(x)
gc.collect()  # (a full collection falls where earlier allocations put it: charged to neither launch)
start = time.perf_counter()
act[1, 256](r, x)
first = time.perf_counter()
gc.collect()
first_done = time.perf_counter()
act[1, 256](r, x)
second = time.perf_counter()
assert np.allclose(r, x * 2 + 1)
print(json.dumps({"first": first - start, "second": second - first_done}))
'''


def run(folder: str, audit: str | None) -> dict:
    env = {**os.environ, "GPUCACHE_DIR": folder, "GPUCACHE_REDIS_URL": "off", "PYTHONPATH": ROOT}
    env.pop("GPUCACHE_AUDIT", None)
    if audit is not None:
        env["GPUCACHE_AUDIT"] = audit
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True,
                         timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--check", action="store_true", help="exit 1 unless warm is faster than cold")
    args = parser.parse_args(argv)
    rows = {"cold": [], "warm": [], "warm, audit off": []}
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as folder:
            rows["cold"].append(run(folder, None))
            rows["warm"].append(run(folder, None))
            rows["warm, audit off"].append(run(folder, "off"))
    cold = [r["first"] for r in rows["cold"]]
    print(f"first launch of a lazy kernel in a new process ({args.runs} rounds, medians)")
    print(f"{'process':<18}{'first launch':>14}{'second':>10}{'/ cold':>9}")
    ok = True
    for name, found in rows.items():
        first = statistics.median(r["first"] for r in found)
        second = statistics.median(r["second"] for r in found)
        ratio = statistics.median(r["first"] / c for r, c in zip(found, cold))
        print(f"{name:<18}{first * 1e3:>11.0f} ms{second * 1e3:>7.1f} ms{ratio:>8.2f}x")
        if name != "cold" and ratio >= 1.0:
            ok = False
    print("target: warm < cold, audit on and off:", "met" if ok else "NOT MET")
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
