#!/usr/bin/env python
"""A helper-heavy kernel's first compile per new config and target, against numba-cuda.

The kernel (``cmath.exp/sqrt/log/tanh/acos/asinh``, ``w ** n``,
``x ** 2.5``, ``x ** 3``, ``math.atan2``) lowers through numba's helpers
(``context.compile_internal``): numba compiles each helper once and keeps it
in its helper cache, keyed without the lowering context or the target.  The
pipeline shares a helper between lowerings whose context is the same
(fastmath, debug info, error model, ...) for every target its compile's
target questions answer alike (`gpucache_ext.backends.numba_cuda.stages.numbering`).

Each run starts two fresh interpreters (alternating which goes first), both
on the recording stand-in driver (tests/fakecuda: numba asks for a device
while compiling cmath's device functions) and a memory-only cache, and
times, in order, each a compile to a cubin:

    cold           sm 80, the first compile of the process
    launch bounds  sm 80, launch_bounds=256 (the kernel is lowered again)
    new target     sm 90 (the pipeline's llvm stage serves sm 80's IR)
    edited, new    an edited kernel (another constant), sm 86, launch_bounds=(128, 2):
      config         typed and lowered again, helpers as they were
    opt            sm 80, opt 2 (ptx and cubin only)
    fastmath       sm 80, fastmath (the helpers' lowering context changes)

numba-cuda: ``numba.cuda.compiler.compile(heavy, SIG, device=False,
abi="numba", cc=..., opt=..., fastmath=..., launch_bounds=...)`` and the PTX
linked by cuda.core's Linker, as bench_compile.py does.  numba reuses its
helpers for the fastmath compile as well: its PTX then differs from a fresh
process's (its helper cache is keyed without the context a helper inherits),
which the pipeline does not do; that row compares unlike work.

Printed: per step the medians of ``--runs`` runs, ours and numba's, and the
median of the runs' ratios (numba / ours: above 1.0 the pipeline is faster).

    python bench/bench_helpers.py               # 5 runs
    PYTHONPATH=/other/checkout python bench/bench_helpers.py   # another checkout's gpucache_ext

Measured
--------
See bench/README.md ("Helpers once").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STEPS = [
    ("cold", "heavy", dict(sm=80)),
    ("launch bounds", "heavy", dict(sm=80, launch_bounds=256)),
    ("new target", "heavy", dict(sm=90)),
    ("edited, new config", "edited", dict(sm=86, launch_bounds=(128, 2))),
    ("opt", "heavy", dict(sm=80, opt=2)),
    ("fastmath", "heavy", dict(sm=80, fastmath=True)),
]

HEAVY = """
def heavy(r, z, n):
    i = cuda.grid(1)
    if i < r.size:
        w = z[i]
        a = cmath.exp(w) + cmath.sqrt(w) + cmath.log(w + 1) + cmath.tanh(w)
        b = cmath.acos(w) + cmath.asinh(w) + w ** n + w.real ** n + w ** 2.5
        r[i] = a * b + math.atan2(w.real, w.imag) + w.real ** 3
"""
# the edit: another constant, the same helpers
KERNELS = "import cmath, math\nfrom numba import cuda\n" + HEAVY + HEAVY.replace("def heavy", "def edited").replace(
    "w + 1", "w + 2")

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
side, steps = sys.argv[2], json.loads(sys.argv[3])
import gpucache_ext
print("gpucache_ext from", gpucache_ext.__file__, file=sys.stderr)
from numba import types
import heavy_kernels as k
SIG = (types.complex128[::1], types.complex128[::1], types.int64)
out = []
if side == "ours":
    from gpucache_ext import CompileConfig, KernelCache
    cache = KernelCache()
    for name, func, config in steps:
        start = time.perf_counter()
        cache.compile(getattr(k, func), SIG, CompileConfig(**{**config, "launch_bounds": (
            tuple(config["launch_bounds"]) if isinstance(config.get("launch_bounds"), list)
            else config.get("launch_bounds"))}))
        out.append(time.perf_counter() - start)
else:
    from cuda.core import Linker, LinkerOptions, ObjectCode
    from numba.cuda.compiler import compile as numba_compile
    for name, func, config in steps:
        bounds = config.get("launch_bounds")
        start = time.perf_counter()
        ptx, _ = numba_compile(getattr(k, func), SIG, device=False, abi="numba", cc=divmod(config["sm"], 10),
                               opt=config.get("opt", 3) > 0, fastmath=config.get("fastmath", False),
                               launch_bounds=tuple(bounds) if isinstance(bounds, list) else bounds)
        Linker(ObjectCode.from_ptx(ptx.encode(), name="k.ptx"),
               options=LinkerOptions(arch=f"sm_{config['sm']}")).link("cubin")
        out.append(time.perf_counter() - start)
print(json.dumps(out))
"""


def one_run(side: str, folder: Path, env: dict) -> list:
    done = subprocess.run([sys.executable, "-c", CHILD, str(folder), side, json.dumps(STEPS)], cwd=str(folder),
                          env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{side} failed:\n{done.stdout}{done.stderr[-4000:]}")
    where = [line for line in done.stderr.splitlines() if line.startswith("gpucache_ext from")]
    if side == "ours" and where and where[0] not in SEEN:
        SEEN.add(where[0])
        print(where[0], flush=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


SEEN: set = set()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)

    from tests import fakecuda

    if fakecuda.skip_reason():
        print(f"the stand-in driver cannot be built here: {fakecuda.skip_reason()}")
        return 2
    times = {"ours": [], "numba": []}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "heavy_kernels.py").write_text(KERNELS)
        env = dict(os.environ, GPUCACHE_DIR="off", PYTHONWARNINGS="ignore")
        env = fakecuda.environment(fakecuda.build(), ("9.0",), str(folder / "trace.jsonl"), env)
        # (after the stand-in's environment, which puts this checkout on the path)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (os.environ.get("PYTHONPATH"), str(ROOT))))
        for run in range(args.runs):
            for side in (("ours", "numba") if run % 2 == 0 else ("numba", "ours")):
                times[side].append(one_run(side, folder, env))
            print(f"run {run + 1}/{args.runs}: ours {sum(times['ours'][-1]):.2f} s, "
                  f"numba {sum(times['numba'][-1]):.2f} s", flush=True)
    print(f"\nmedians of {args.runs} runs, seconds; ratio = median of the runs' numba / ours (above 1.0: ours faster)")
    print(f"{'step':<22}{'ours':>8}{'numba':>8}{'ratio':>8}")
    for i, (name, _, _) in enumerate(STEPS):
        ours = [t[i] for t in times["ours"]]
        numba = [t[i] for t in times["numba"]]
        ratio = statistics.median(n / o for n, o in zip(numba, ours))
        print(f"{name:<22}{statistics.median(ours):>8.3f}{statistics.median(numba):>8.3f}{ratio:>7.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
