#!/usr/bin/env python
"""A notebook's first run under the magic against the same notebook without it.

A user's first experience of the cache is a notebook's first run, cold: no
entry anywhere.  numba compiles at a kernel's first launch, the magic at its
cell (or at the first launch, for a kernel without a signature), so whole
notebooks are compared, not cells.  Each tutorial notebook of
tests/tutorial_notebooks.py, and numba-cuda's documentation examples as one
notebook (``doc_examples``), runs in a fresh Jupyter kernel on the recording
stand-in driver (tests/fakecuda: kernels launch without running, so what is
timed is Python, numba and the compiler), as written and with
``%%gpukernel --sm 90 --quiet`` on its kernel cells, each with a new, empty
cache folder; the two alternate run by run.  Timed: from the kernel's start
to the last cell's end (tests/notebook_diff.py).  Printed: per notebook the
medians and the median of the runs' ratios (plain time / magic time: above
1.0 the magic's first run is faster), and over all notebooks the ratio of
the summed medians.

Both runs import their packages from bytecode: pip compiles an installed
package's modules at install, and Python writes them at a first import, but
not where PYTHONDONTWRITEBYTECODE is set and the package is an editable
checkout, as here: this checkout's modules are compiled first, so that the
magic's run does not pay a compile of its sources that a user's does not.

    python bench/bench_notebooks.py             # 3 runs of every notebook
    python bench/bench_notebooks.py --runs 5 --check   # exit 1 below 1.0x

Target (issue 31): at least 1.0x, the magic's first run no slower than plain
numba-cuda's.
"""

from __future__ import annotations

import argparse
import compileall
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TARGET = 1.0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--where", default="fakecuda", choices=("fakecuda", "simulator"))
    parser.add_argument("--check", action="store_true", help=f"exit 1 when the overall ratio is below {TARGET}x")
    parser.add_argument("names", nargs="*", help="notebooks (all by default)")
    args = parser.parse_args(argv)

    from tests import fakecuda, notebook_diff
    from tests.tutorial_notebooks import NOTEBOOKS

    if args.where == "fakecuda" and fakecuda.skip_reason():
        print(f"the stand-in driver cannot be built here: {fakecuda.skip_reason()}")
        return 2
    from tests.tutorial_notebooks import doc_examples_notebook

    compileall.compile_dir(str(ROOT / "gpucache_ext"), quiet=1)  # (as an installed package has them)
    every = {**NOTEBOOKS, "doc_examples": doc_examples_notebook()}  # (numba-cuda's own, on the stand-in)
    chosen = {name: every[name] for name in args.names} or every
    plain_total = magic_total = 0.0
    print(f"{'notebook':<20} {'cells':>5} {'as written':>11} {'magic':>8} {'ratio':>6}   (medians of {args.runs} runs)")
    with tempfile.TemporaryDirectory() as tmp:
        for name, cells in chosen.items():
            plain, magic, ratios = [], [], []
            for run in range(args.runs):
                order = ("plain", "magic") if run % 2 == 0 else ("magic", "plain")
                took = {mode: notebook_diff.run(cells, mode, args.where, Path(tmp) / f"{name}-{run}-{mode}").seconds
                        for mode in order}
                plain.append(took["plain"])
                magic.append(took["magic"])
                ratios.append(took["plain"] / took["magic"])
            p, m = statistics.median(plain), statistics.median(magic)
            plain_total += p
            magic_total += m
            print(f"{name:<20} {len(cells):>5} {p:>10.2f}s {m:>7.2f}s {statistics.median(ratios):>5.2f}x")
    overall = plain_total / magic_total
    print(f"{'all':<20} {'':>5} {plain_total:>10.2f}s {magic_total:>7.2f}s {overall:>5.2f}x   "
          f"(target >= {TARGET}x)")
    return 1 if args.check and overall < TARGET else 0


if __name__ == "__main__":
    raise SystemExit(main())
