"""Run a notebook twice, as written and under the magic, and compare it cell by cell.

The differential harness of "a %%gpukernel cell is an ordinary cell": each
run is a fresh Jupyter kernel (nbclient, ipykernel), on numba's CUDA
simulator (``NUMBA_ENABLE_CUDASIM=1``: kernels compute) or on the recording
stand-in driver (``tests/fakecuda``: kernels launch without running, every
driver call is traced).  Under the magic, each cell that defines a CUDA
kernel gets ``%%gpukernel --sm 90 --quiet`` above it (``mode="magic"``), or
the notebook gets ``%gpucache auto`` in a first cell of its own
(``mode="auto"``).  What each cell shows is compared: the error's type (and
message), what it printed, its result (``Out[N]``) and what it displayed,
with the numbers in them equal within a float tolerance.

    from tests import notebook_diff
    plain = notebook_diff.run(cells, "plain", "fakecuda", tmp_path / "plain")
    magic = notebook_diff.run(cells, "magic", "fakecuda", tmp_path / "magic")
    assert notebook_diff.differences(plain, magic) == []

``python -m tests.notebook_diff [simulator|fakecuda] [--again] [NAME or FILE.ipynb...]``
runs the tutorial notebooks (tests/tutorial_notebooks.py; all without names;
``doc-examples``: numba-cuda's documentation examples as one notebook), or
notebook files, both ways and prints what differed; ``--again`` runs each
a second time in the same kernel and says what that compiled.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import sys
import time
from pathlib import Path
from typing import List, Optional

ROOT = Path(__file__).resolve().parent.parent
MAGIC_LINE = "%%gpukernel --sm 90 --quiet"
KERNEL_CELL = re.compile(r"\bcuda\s*\.\s*jit\b|^\s*@\s*jit\b|\bvectorize\b|\bguvectorize\b", re.M)


@dataclasses.dataclass
class Cell:
    source: str  # the cell as written
    error: Optional[str]  # "TypeError: message", or None
    stdout: str
    result: Optional[str]  # text/plain of Out[N]
    shown: List[str]  # text/plain of what the cell displayed


@dataclasses.dataclass
class Run:
    cells: List[Cell]
    calls: list  # the stand-in driver's trace (fakecuda), else []
    seconds: float  # from the kernel's start to the last cell's end
    again: List[Cell] = dataclasses.field(default_factory=list)  # a second pass in the same kernel
    misses: dict = dataclasses.field(default_factory=dict)  # the cache's misses by stage in that pass


def kernel_cell(source: str) -> bool:
    return bool(KERNEL_CELL.search(source)) and not source.lstrip().startswith("%%")


def under_magic(cells: List[str], mode: str) -> List[str]:
    if mode == "plain":
        return list(cells)
    if mode == "auto":
        return ["%load_ext gpucache_ext\n%gpucache auto on", *cells]
    if mode == "magic":
        return ["%load_ext gpucache_ext", *(f"{MAGIC_LINE}\n{c}" if kernel_cell(c) else c for c in cells)]
    raise ValueError(f"mode must be plain, magic or auto, not {mode!r}")


def environment(where: str, folder: Path) -> dict:
    """The kernel's environment: this checkout first on the path, a cache of its own."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT), env.get("PYTHONPATH"))))
    env["GPUCACHE_DIR"] = str(folder / "cache")
    env.pop("GPUCACHE_REDIS_URL", None)
    env["PYTHONWARNINGS"] = "ignore"  # (numba's performance warnings: the same in both runs, noise here)
    if where == "simulator":
        env["NUMBA_ENABLE_CUDASIM"] = "1"
        return env
    if where == "fakecuda":
        from . import fakecuda

        return fakecuda.environment(fakecuda.build(), ("9.0",), str(folder / "trace.jsonl"), env)
    raise ValueError(f"where must be simulator or fakecuda, not {where!r}")


def run(cells: List[str], mode: str, where: str, folder: Path, again: bool = False, timeout: int = 600) -> Run:
    """Run `cells` in a fresh kernel (`mode`: plain, magic or auto); with
    `again`, run them all once more in the same kernel."""
    import nbformat
    from nbclient import NotebookClient

    folder.mkdir(parents=True, exist_ok=True)
    sources = under_magic(cells, mode)
    added = len(sources) - len(cells)
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    client = NotebookClient(notebook, timeout=timeout, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(folder)}})
    start = time.perf_counter()
    second: List[Cell] = []
    with client.setup_kernel(env=environment(where, folder), cwd=str(folder)):
        for index, cell in enumerate(notebook.cells):
            client.execute_cell(cell, index)
        seconds = time.perf_counter() - start
        first = [_outcome(cells[i - added], cell) for i, cell in enumerate(notebook.cells) if i >= added]
        misses = {}
        if again:
            before = _misses(client, notebook, mode)
            for index, cell in enumerate(notebook.cells):
                if index >= added:
                    client.execute_cell(cell, index)
            second = [_outcome(cells[i - added], cell) for i, cell in enumerate(notebook.cells) if i >= added]
            after = _misses(client, notebook, mode)
            misses = {stage: after[stage] - before.get(stage, 0) for stage in after}
    trace = folder / "trace.jsonl"
    calls = [_json(line) for line in trace.read_text().splitlines() if line.strip()] if trace.exists() else []
    return Run(first, calls, seconds, second, misses)


PROBE = """\
import json as _json, gpucache_ext as _gc
print(_json.dumps({_s: _v.misses for _s, _v in _gc.default_cache().stats().stages.items()}))"""


def _misses(client, notebook, mode) -> dict:
    """The session cache's misses by stage so far (nothing without the magic)."""
    if mode == "plain":
        return {}
    import nbformat

    probe = nbformat.v4.new_code_cell(PROBE)
    notebook.cells.append(probe)  # (nbclient writes a cell's outputs back into the notebook)
    try:
        client.execute_cell(probe, len(notebook.cells) - 1)
    finally:
        notebook.cells.pop()
    text = "".join(o.get("text", "") for o in probe.outputs if o.get("output_type") == "stream")
    return _json(text.strip().splitlines()[-1])


def _json(line: str):
    import json

    return json.loads(line)


def _outcome(source: str, cell) -> Cell:
    error, stdout, result, shown = None, [], None, []
    for output in cell.get("outputs", []):
        kind = output.get("output_type")
        if kind == "error":
            error = f"{output.get('ename')}: {output.get('evalue')}"
        elif kind == "stream" and output.get("name") == "stdout":
            # (less the magic's own lines: "gpukernel: compiled k at this launch ...")
            stdout += [line for line in output.get("text", "").splitlines(keepends=True)
                       if not line.startswith("gpukernel: ")]
        elif kind == "execute_result":
            result = output.get("data", {}).get("text/plain")
        elif kind == "display_data":
            data = output.get("data", {})
            if "gpucache" in data.get("text/html", ""):
                continue  # (the magic's own notes and report: what the magic adds, not the cell)
            shown.append(data.get("text/plain", ""))
    return Cell(source, error, "".join(stdout), result, shown)


# the simulator runs a block's threads at once: which thread meets an error first varies
SIMULATED_THREAD = re.compile(r"tid=\[[\d, ]*\] ctaid=\[[\d, ]*\]")
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+\b")  # an object's repr: where it lies differs run by run
NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def same_text(a: Optional[str], b: Optional[str], rel: float = 1e-5, abs_: float = 1e-6) -> bool:
    """Equal, but for the numbers in them, which must agree within the tolerance
    (fast math and the order of float reductions)."""
    if a is None or b is None:
        return a is b
    a, b = (ADDRESS.sub(" at 0x?", SIMULATED_THREAD.sub("tid=? ctaid=?", text)) for text in (a, b))
    if NUMBER.sub("#", a) != NUMBER.sub("#", b):
        return False
    return all(math.isclose(float(x), float(y), rel_tol=rel, abs_tol=abs_)
               for x, y in zip(NUMBER.findall(a), NUMBER.findall(b)))


def differences(plain: Run, magic: Run) -> List[str]:
    """What differs, cell by cell, as lines naming the cell and the field."""
    found = []
    if len(plain.cells) != len(magic.cells):
        return [f"{len(plain.cells)} cells as written, {len(magic.cells)} under the magic"]
    for at, (a, b) in enumerate(zip(plain.cells, magic.cells), start=1):
        first_line = a.source.strip().splitlines()[0] if a.source.strip() else ""
        for name in ("error", "stdout", "result"):
            x, y = getattr(a, name), getattr(b, name)
            if not same_text(x, y):
                found.append(f"cell {at} ({first_line}): {name}: {x!r} as written, {y!r} under the magic")
        if len(a.shown) != len(b.shown) or not all(map(same_text, a.shown, b.shown)):
            found.append(f"cell {at} ({first_line}): displayed {a.shown!r} as written, {b.shown!r} under the magic")
    return found


def notebook_cells(path: Path) -> List[str]:
    """The code cells of a notebook file, in order (shell escapes and
    IPython's other line magics are kept: the kernel runs them as written)."""
    import nbformat

    notebook = nbformat.read(str(path), as_version=4)
    return [cell.source for cell in notebook.cells if cell.cell_type == "code" and cell.source.strip()]


def main(argv) -> int:
    """``python -m tests.notebook_diff [simulator|fakecuda] [--again] [NAME or FILE.ipynb ...]``:
    each notebook run as written and under the magic, compared cell by cell;
    with ``--again``, each is run a second time in the same kernel, compared
    too, and what the second pass compiled is counted."""
    import tempfile

    from .tutorial_notebooks import NOTEBOOKS

    again = "--again" in argv
    argv = [arg for arg in argv if arg != "--again"]
    where = argv[0] if argv else "fakecuda"
    names = argv[1:]
    from .tutorial_notebooks import doc_examples_notebook

    chosen = {name: notebook_cells(Path(name)) if name.endswith(".ipynb") else
              doc_examples_notebook() if name == "doc-examples" else NOTEBOOKS[name] for name in names} or NOTEBOOKS
    differing = 0
    with tempfile.TemporaryDirectory() as tmp:
        for index, (name, cells) in enumerate(chosen.items()):
            folder = Path(tmp) / str(index)
            if name.endswith(".ipynb"):  # (its data files beside it, as the notebook reads them)
                import shutil

                shutil.copytree(Path(name).parent, folder / "plain", dirs_exist_ok=True)
                shutil.copytree(Path(name).parent, folder / "magic", dirs_exist_ok=True)
            plain = run(cells, "plain", where, folder / "plain", again=again)
            magic = run(cells, "magic", where, folder / "magic", again=again)
            found = differences(plain, magic)
            if again:
                found += [f"second run: {line}" for line in differences(
                    dataclasses.replace(plain, cells=plain.again), dataclasses.replace(magic, cells=magic.again))]
            differing += bool(found)
            second = f"; second run compiled {sum(magic.misses.values())} stage(s) {magic.misses}" if again else ""
            print(f"{name}: {len(cells)} cells, {'same' if not found else f'{len(found)} differ'}"
                  f" ({plain.seconds:.1f} s as written, {magic.seconds:.1f} s under the magic{second})")
            for line in found:
                print("  " + line)
    print(f"{differing} of {len(chosen)} notebooks differ")
    return 1 if differing else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
