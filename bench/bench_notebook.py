#!/usr/bin/env python
"""Notebooks of 1, 4 and 12 kernels under the magic against numba-cuda, in one run.

Each notebook is written in the style of the public numba-cuda tutorials: a
cell of imports, a cell of two ``@cuda.jit(device=True)`` functions, ONE
cell declaring the N kernels, each with an explicit signature (elementwise
math calling the device functions, a shared-memory block reduction, a loop,
atomics, a 2D grid: twelve bodies, the first N of them), and a cell that
launches each kernel once on small arrays and prints its name, its array's
shape and a checksum.  ``--lazy`` adds the same notebooks with kernels
without a signature (compiled at their first launch, in the launch cell).

Each notebook runs in a fresh Jupyter kernel (nbclient, ipykernel) on the
recording stand-in driver (tests/fakecuda: kernels launch without running,
so what is timed is Python, numba and the compiler, and what is copied back
is what was copied in: the checksums are the same both ways), as written
(plain numba-cuda) and with ``%%gpukernel --sm 90 --quiet`` on its kernel
cells (tests/notebook_diff.py's `under_magic`), each run with a new, empty
cache folder.  The two alternate which goes first, run by run.  Measured per
run, in the same kernel session:

1. first run: from the kernel's start to the last cell's end, cold;
2. kernel cell: the declaring cell's own time, from nbclient's per-cell
   timing (``cell.metadata.execution``: ``iopub.execute_input`` to
   ``shell.execute_reply``, both stamped by the kernel), and the declaring
   cell plus the launch cell (numba links a kernel's cubin at its first
   launch, the magic at its cell: the sum is the fair comparison);
3. edit: the first kernel's constant is changed in the declaring cell, and
   that cell and the launch cell run again; timed as in 2.  Plain numba
   recompiles every kernel the cell redefines, the magic should recompile
   the edited one only: its cache's misses by stage during the edit
   (``gpucache_ext.default_cache().stats()``, read from the kernel) say how
   many kernels it recompiled.

After the first run under the magic, the cache's compile seconds by stage
(``StageStats.compile_seconds``) say where its time went.  Printed: the
medians of ``--runs`` runs and the median of the runs' ratios (plain /
magic: above 1.0 the magic is faster), the stage breakdown, and whether the
launch cell printed the same both ways (first run and edit;
`notebook_diff.differences`).

    python bench/bench_notebook.py                 # 3 runs of the 1, 4 and 12 kernel notebooks
    python bench/bench_notebook.py --runs 5 --lazy --check

Targets (issue 36): the kernel cell of 4 kernels >= 1.5x, the whole
notebook's first run >= 1.1x, an edit recompiles one kernel.  ``--check``
exits 1 when one is missed.

Measured
--------
2026-12-06, 2 cores, idle, no GPU, stand-in driver; ``--runs 3``, the kernels of a
cell compiled one behind another (with ``GPUCACHE_COMPILE_THREADS=1``, one at a time, the
kernel cell was 0.92x, 0.97x and 0.94x; bench/README.md has both):

    medians of 3 runs, seconds; ratio = median of the runs' plain / magic (above 1.0: the magic faster)

    the first run, cold:
    notebook                      first run           kernel cell   kernel+launch cells
                        plain  magic  ratio   plain  magic  ratio   plain  magic  ratio
    1 kernel             1.71   1.91  0.90x    0.28   0.30  0.93x    0.29   0.32  0.88x
    4 kernels            1.93   2.03  0.96x    0.48   0.49  0.98x    0.49   0.51  0.95x
    12 kernels           2.42   2.54  0.95x    0.96   0.98  1.01x    0.97   1.01  0.99x

    the edit of one kernel, then its cell and the launch cell:
    notebook              edit: kernel cell   edit: kernel+launch  the magic's misses
                        plain  magic  ratio   plain  magic  ratio
    1 kernel             0.05   0.06  0.88x    0.06   0.06  0.89x  typing 1 llvm 1 ptx 1 cubin 1
    4 kernels            0.23   0.06  3.95x    0.24   0.07  3.56x  typing 1 llvm 1 ptx 1 cubin 1
    12 kernels           0.82   0.07 11.11x    0.83   0.09  9.34x  typing 1 llvm 1 ptx 1 cubin 1

    where the magic's first run spent its compile time (StageStats.compile_seconds, median of the runs):
      notebook            typing     llvm      ptx    cubin   stages     cell  first run
      1 kernel             0.201    0.016    0.009    0.013    0.239    0.323       1.91
      4 kernels            0.279    0.066    0.064    0.053    0.461    0.511       2.03
      12 kernels           0.491    0.171    0.313    0.163    1.138    1.010       2.54
      (cell: the kernel and launch cells' time under the magic; stages: the part of it spent compiling)

    the first run cell by cell, plain / magic (medians; outside: the kernel's start and the messages):
      notebook              %load_ext       imports    device fns       kernels        launch       outside
      1 kernel                -/1.031   0.931/0.002   0.009/0.041   0.285/0.299   0.006/0.023   0.484/0.532
      4 kernels               -/0.999   0.910/0.002   0.009/0.039   0.481/0.486   0.007/0.025   0.543/0.476
      12 kernels              -/1.015   0.934/0.002   0.009/0.041   0.962/0.975   0.013/0.035   0.477/0.482

    launch cell outputs, plain against magic (first run and after the edit):
      1 kernel         same
      4 kernels        same
      12 kernels       same

    targets (issue 36):
      kernel cell of 4 kernels >= 1.5x: 0.98x NOT MET
      whole notebook >= 1.1x, 1 kernel: 0.90x NOT MET
      whole notebook >= 1.1x, 4 kernels: 0.96x NOT MET
      whole notebook >= 1.1x, 12 kernels: 0.95x NOT MET
      an edit recompiles one kernel: met
"""

from __future__ import annotations

import argparse
import compileall
import dataclasses
import datetime
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SIZES = (1, 4, 12)
STAGES = ("typing", "llvm", "ptx", "cubin")
KERNEL_CELL_TARGET = 1.5  # the kernel cell of the 4-kernel notebook
NOTEBOOK_TARGET = 1.1  # each notebook's first run
TARGET_KERNELS = 4

IMPORTS = """\
import math
import numpy as np
from numba import cuda"""

DEVICE_FUNCTIONS = """\
@cuda.jit(device=True)
def clamp(x, lo, hi):
    return min(max(x, lo), hi)

@cuda.jit(device=True)
def smoothstep(x):
    t = clamp(x, 0.0, 1.0)
    return t * t * (3.0 - 2.0 * t)"""

V1 = "float32[:], float32[:]"
V2 = "float32[:], float32[:], float32[:]"
M2 = "float32[:, :], float32[:, :]"

# (name, signature's arguments, body with {c} for the constant an edit changes, launch)
# launch: how the launch cell calls it: on x, y (inputs) and r (output), float32 of N;
# a (input) and m (output), float32 16 x 16; total_ (output), float32 of 1
KERNELS = [
    ("scale_add", V2, """\
    i = cuda.grid(1)
    if i < r.size:
        r[i] = {c} * x[i] + clamp(y[i], -1.0, 1.0)""", "scale_add[BLOCKS, THREADS](r, x, y)"),
    ("smooth", V1, """\
    i = cuda.grid(1)
    if i < r.size:
        r[i] = smoothstep(x[i] * {c})""", "smooth[BLOCKS, THREADS](r, x)"),
    ("block_sum", V1, """\
    tile = cuda.shared.array(128, dtype=np.float32)
    i = cuda.grid(1)
    t = cuda.threadIdx.x
    tile[t] = x[i] * {c} if i < x.size else 0.0
    cuda.syncthreads()
    step = cuda.blockDim.x // 2
    while step > 0:
        if t < step:
            tile[t] += tile[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        r[cuda.blockIdx.x] = tile[0]""", "block_sum[BLOCKS, THREADS](r, x)"),
    ("total", V1, """\
    i = cuda.grid(1)
    if i < x.size:
        cuda.atomic.add(r, 0, x[i] * {c})""", "total[BLOCKS, THREADS](total_, x)"),
    ("transpose", M2, """\
    i, j = cuda.grid(2)
    if i < r.shape[0] and j < r.shape[1]:
        r[i, j] = a[j, i] + {c}""", "transpose[(2, 2), (8, 8)](m, a)"),
    ("horner", V1, """\
    i = cuda.grid(1)
    if i < r.size:
        acc = 0.0
        for k in range(8):
            acc = acc * x[i] + {c} / (k + 1)
        r[i] = acc""", "horner[BLOCKS, THREADS](r, x)"),
    ("gelu", V1, """\
    i = cuda.grid(1)
    if i < r.size:
        v = x[i]
        r[i] = 0.5 * v * (1.0 + math.tanh({c} * (v + 0.044715 * v * v * v)))""", "gelu[BLOCKS, THREADS](r, x)"),
    ("softplus_diff", V2, """\
    i = cuda.grid(1)
    if i < r.size:
        r[i] = math.log(1.0 + math.exp(x[i] - y[i])) * {c}""", "softplus_diff[BLOCKS, THREADS](r, x, y)"),
    ("histogram", V1, """\
    i = cuda.grid(1)
    if i < x.size:
        bin_ = int(clamp(x[i] * {c}, 0.0, r.size - 1.0))
        cuda.atomic.add(r, bin_, 1.0)""", "histogram[BLOCKS, THREADS](r, x)"),
    ("stencil", V1, """\
    i = cuda.grid(1)
    if 0 < i and i < x.size - 1:
        r[i] = (x[i - 1] + {c} * x[i] + x[i + 1]) / ({c} + 2.0)""", "stencil[BLOCKS, THREADS](r, x)"),
    ("blur_2d", M2, """\
    i, j = cuda.grid(2)
    n, m = a.shape
    if i < n and j < m:
        acc = 0.0
        for di in range(-1, 2):
            for dj in range(-1, 2):
                acc += a[min(max(i + di, 0), n - 1), min(max(j + dj, 0), m - 1)]
        r[i, j] = acc / {c}""", "blur_2d[(2, 2), (8, 8)](m, a)"),
    ("saxpy_stride", V2, """\
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for i in range(start, r.size, stride):
        r[i] = {c} * x[i] + y[i]""", "saxpy_stride[BLOCKS, THREADS](r, x, y)"),
]

CONSTANTS = ("2.0", "3.0")  # as written, and after the edit (of the first kernel)

LAUNCH_HEAD = """\
N = 512
THREADS = 128
BLOCKS = N // THREADS
x = np.linspace(0.0, 1.0, N).astype(np.float32)
y = np.linspace(1.0, -1.0, N).astype(np.float32)
a = np.arange(256, dtype=np.float32).reshape(16, 16)

def show(name, out):
    print(name, out.shape, round(float(out.sum()), 3))
"""


def kernel_cell(n: int, lazy: bool, edited: bool = False) -> str:
    """The cell declaring the first `n` kernels; `edited`: the first one's constant changed."""
    parts = []
    for at, (name, args, body, _) in enumerate(KERNELS[:n]):
        constant = CONSTANTS[1] if edited and at == 0 else CONSTANTS[0]
        names = ", ".join("r" if k == 0 else ("a" if "[:, :]" in args else "xy"[k - 1])
                          for k in range(args.count("float32")))
        decorator = "@cuda.jit" if lazy else f'@cuda.jit("void({args})")'
        parts.append(f"{decorator}\ndef {name}({names}):\n{body.format(c=constant)}")
    return "\n\n".join(parts)


def launch_cell(n: int) -> str:
    lines = [LAUNCH_HEAD]
    for name, args, _, launch in KERNELS[:n]:
        out = "total_" if "total_" in launch else ("m" if "[:, :]" in args else "r")
        lines.append(f"{out} = np.zeros({'(16, 16)' if out == 'm' else '1' if out == 'total_' else 'N'},"
                     f" dtype=np.float32)\n{launch}\nshow({name!r}, {out})")
    return "\n".join(lines)


def notebook(n: int, lazy: bool) -> List[str]:
    return [IMPORTS, DEVICE_FUNCTIONS, kernel_cell(n, lazy), launch_cell(n)]


PROBE = """\
import json as _json, gpucache_ext as _gc
print(_json.dumps({_s: [_v.misses, _v.compile_seconds] for _s, _v in _gc.default_cache().stats().stages.items()}))"""


@dataclasses.dataclass
class Session:
    seconds: float  # the first run, from the kernel's start to the last cell's end
    kernel_cell: float  # the declaring cell's own time, first run
    launch_cell: float
    edit_cell: float  # the declaring cell, edited, run again
    edit_launch: float  # the launch cell after it
    first: list  # notebook_diff.Cell of each cell of the first run
    edited: list  # of the declaring cell and the launch cell after the edit
    stages: Dict[str, list]  # magic: [misses, compile seconds] by stage after the first run
    edit_misses: Dict[str, int]  # magic: misses by stage during the edit
    cells: List[float]  # each cell's time in the first run, as CELL_NAMES names them (0.0: not run)


def cell_seconds(cell) -> float:
    """The cell's time as the kernel stamped it (nbclient's record_timing)."""
    stamps = cell.metadata["execution"]
    start, end = (datetime.datetime.strptime(stamps[k], "%Y-%m-%dT%H:%M:%S.%fZ")
                  for k in ("iopub.execute_input", "shell.execute_reply"))
    return (end - start).total_seconds()


def session(n: int, lazy: bool, mode: str, folder: Path, timeout: int = 600) -> Session:
    """One notebook in a fresh kernel: its first run, then the edit."""
    import nbformat
    from nbclient import NotebookClient

    from tests import notebook_diff

    folder.mkdir(parents=True, exist_ok=True)
    cells = notebook(n, lazy)
    sources = notebook_diff.under_magic(cells, mode)
    added = len(sources) - len(cells)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True, record_timing=True,
                            resources={"metadata": {"path": str(folder)}})
    declaring, launching = added + 2, added + 3

    def probe() -> dict:
        if mode == "plain":
            return {}
        cell = nbformat.v4.new_code_cell(PROBE)
        nb.cells.append(cell)
        try:
            client.execute_cell(cell, len(nb.cells) - 1)
        finally:
            nb.cells.pop()
        text = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
        return json.loads(text.strip().splitlines()[-1])

    start = time.perf_counter()
    with client.setup_kernel(env=notebook_diff.environment("fakecuda", folder), cwd=str(folder)):
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)
        seconds = time.perf_counter() - start
        first = [notebook_diff._outcome(cells[i - added], c) for i, c in enumerate(nb.cells) if i >= added]
        times = (cell_seconds(nb.cells[declaring]), cell_seconds(nb.cells[launching]))
        each = [0.0] * (1 - added) + [cell_seconds(c) for c in nb.cells]
        stages = probe()
        edited_source = notebook_diff.under_magic(["", kernel_cell(n, lazy, edited=True)], mode)[-1]
        nb.cells[declaring] = nbformat.v4.new_code_cell(edited_source)
        for index in (declaring, launching):
            client.execute_cell(nb.cells[index], index)
        edited = [notebook_diff._outcome(nb.cells[i].source, nb.cells[i]) for i in (declaring, launching)]
        after = probe()
    edit_misses = {s: after[s][0] - stages.get(s, [0])[0] for s in after}
    return Session(seconds, *times, cell_seconds(nb.cells[declaring]), cell_seconds(nb.cells[launching]),
                   first, edited, stages, edit_misses, each)


def same_outputs(plain: Session, magic: Session) -> List[str]:
    """What the two printed differently (first run, and the edit's two cells)."""
    from tests import notebook_diff

    def as_run(cells):
        return notebook_diff.Run(cells, [], 0.0)

    found = notebook_diff.differences(as_run(plain.first), as_run(magic.first))
    found += ["edit: " + d for d in notebook_diff.differences(as_run(plain.edited), as_run(magic.edited))]
    return found


@dataclasses.dataclass
class Row:
    name: str
    n: int
    lazy: bool
    plain: List[Session] = dataclasses.field(default_factory=list)
    magic: List[Session] = dataclasses.field(default_factory=list)
    differing: List[str] = dataclasses.field(default_factory=list)

    def medians(self, measure):
        """(plain median, magic median, median of the runs' plain / magic)"""
        p = [measure(s) for s in self.plain]
        m = [measure(s) for s in self.magic]
        return statistics.median(p), statistics.median(m), statistics.median(a / b for a, b in zip(p, m))

    def recompiled(self) -> List[int]:
        """Kernels the magic typed again during each run's edit."""
        return [s.edit_misses.get("typing", 0) for s in self.magic]


CELL_NAMES = ("%load_ext", "imports", "device fns", "kernels", "launch")

MEASURES = {
    "first run": lambda s: s.seconds,
    "kernel cell": lambda s: s.kernel_cell,
    "kernel+launch cells": lambda s: s.kernel_cell + s.launch_cell,
    "edit: kernel cell": lambda s: s.edit_cell,
    "edit: kernel+launch": lambda s: s.edit_cell + s.edit_launch,
}


def report(rows: List[Row], runs: int) -> bool:
    """Print the tables; True when every target is met."""
    print(f"\nmedians of {runs} runs, seconds; ratio = median of the runs' plain / magic (above 1.0: the magic faster)")
    ok = True
    first, edit = list(MEASURES)[:3], list(MEASURES)[3:]
    titles = {"the first run, cold": first, "the edit of one kernel, then its cell and the launch cell": edit}
    for title, names in titles.items():
        print(f"\n{title}:")
        misses_head = "  the magic's misses" if names == edit else ""
        print(f"{'notebook':<17}" + "".join(f"{name:>22}" for name in names) + misses_head)
        print(f"{'':<17}" + f"{'plain  magic  ratio':>22}" * len(names))
        for row in rows:
            line = f"{row.name:<17}"
            for name in names:
                p, m, r = row.medians(MEASURES[name])
                line += f"{p:>8.2f}{m:>7.2f}{r:>6.2f}x"
            if names == edit:
                misses = {s: statistics.median(r.edit_misses.get(s, 0) for r in row.magic) for s in STAGES}
                line += "  " + " ".join(f"{s} {misses[s]:g}" for s in STAGES)
            print(line)
    for row in rows:
        ok &= row.lazy or row.medians(MEASURES["first run"])[2] >= NOTEBOOK_TARGET
        ok &= row.lazy or row.n != TARGET_KERNELS or row.medians(MEASURES["kernel cell"])[2] >= KERNEL_CELL_TARGET
        ok &= all(k == 1 for k in row.recompiled())
    print("\nwhere the magic's first run spent its compile time (StageStats.compile_seconds, median of the runs):")
    print(f"  {'notebook':<17}" + "".join(f"{s:>9}" for s in STAGES) + f"{'stages':>9}{'cell':>9}{'first run':>11}")
    for row in rows:
        per = [statistics.median(r.stages[s][1] for r in row.magic) for s in STAGES]
        cell = statistics.median(r.kernel_cell + r.launch_cell for r in row.magic)
        first = statistics.median(r.seconds for r in row.magic)
        print(f"  {row.name:<17}" + "".join(f"{v:>9.3f}" for v in per) + f"{sum(per):>9.3f}{cell:>9.3f}{first:>11.2f}")
    print("  (cell: the kernel and launch cells' time under the magic; stages: the part of it spent compiling)")
    print("\nthe first run cell by cell, plain / magic (medians; outside: the kernel's start and the messages):")
    print(f"  {'notebook':<17}" + "".join(f"{name:>14}" for name in (*CELL_NAMES, "outside")))
    for row in rows:
        line = f"  {row.name:<17}"
        for at in range(len(CELL_NAMES) + 1):
            def part(s, at=at):
                return s.cells[at] if at < len(CELL_NAMES) else s.seconds - sum(s.cells)
            p, m = (statistics.median(part(s) for s in side) for side in (row.plain, row.magic))
            line += f"{p:>8.3f}/{m:.3f}" if at else f"{'-':>8}/{m:.3f}"
        print(line)
    print("\nlaunch cell outputs, plain against magic (first run and after the edit):")
    for row in rows:
        print(f"  {row.name:<17}" + ("same" if not row.differing else f"{len(row.differing)} differ"))
        for d in row.differing[:5]:
            print("    " + d)
        ok &= not row.differing
    four = next((r for r in rows if r.n == TARGET_KERNELS and not r.lazy), None)
    print("\ntargets (issue 36):")
    if four:
        ratio = four.medians(MEASURES["kernel cell"])[2]
        print(f"  kernel cell of {TARGET_KERNELS} kernels >= {KERNEL_CELL_TARGET}x: {ratio:.2f}x "
              f"{'met' if ratio >= KERNEL_CELL_TARGET else 'NOT MET'}")
    for row in rows:
        if not row.lazy:
            ratio = row.medians(MEASURES["first run"])[2]
            print(f"  whole notebook >= {NOTEBOOK_TARGET}x, {row.name}: {ratio:.2f}x "
                  f"{'met' if ratio >= NOTEBOOK_TARGET else 'NOT MET'}")
    edits = all(k == 1 for row in rows for k in row.recompiled())
    print(f"  an edit recompiles one kernel: {'met' if edits else 'NOT MET'}")
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), choices=range(1, len(KERNELS) + 1),
                        metavar="N", help="kernels per notebook (default: 1 4 12)")
    parser.add_argument("--lazy", action="store_true", help="also the notebooks with kernels without a signature")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)

    from tests import fakecuda

    if fakecuda.skip_reason():
        print(f"the stand-in driver cannot be built here: {fakecuda.skip_reason()}")
        return 2
    compileall.compile_dir(str(ROOT / "gpucache_ext"), quiet=1)  # (as an installed package has them)
    rows = [Row(f"{n} kernel{'s' * (n > 1)}{', lazy' * lazy}", n, lazy)
            for lazy in ((False, True) if args.lazy else (False,)) for n in args.sizes]
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            for row in rows:
                order = ("plain", "magic") if run % 2 == 0 else ("magic", "plain")
                took = {mode: session(row.n, row.lazy, mode, Path(tmp) / f"{row.n}-{row.lazy}-{run}-{mode}")
                        for mode in order}
                row.plain.append(took["plain"])
                row.magic.append(took["magic"])
                row.differing += [d for d in same_outputs(took["plain"], took["magic"]) if d not in row.differing]
                print(f"run {run + 1}/{args.runs} {row.name}: plain {took['plain'].seconds:.2f} s, "
                      f"magic {took['magic'].seconds:.2f} s", flush=True)
    ok = report(rows, args.runs)
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    raise SystemExit(main())
