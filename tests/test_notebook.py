"""The README's first command (examples/quickstart.py: notebooks/quickstart.ipynb
in a real Jupyter kernel, through nbclient and ipykernel) and examples/demo.py
say what happened, on the first run and on every run after it.

Each is run twice against one environment whose GPUCACHE_DIR is a folder that
stands in for the user's cache, so a second run would find whatever the first
left there; the text of every step is checked against the hit and miss numbers
the cache reports.  Those runs are `slow` (a Jupyter kernel; new processes);
the quick sample runs the demo's steps once, in this process."""

import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest


ROOT = Path(__file__).resolve().parent.parent
STAGES = ("typing", "llvm", "ptx", "cubin")
sys.path.insert(0, str(ROOT / "examples"))

import quickstart  # noqa: E402  (examples/quickstart.py)


@pytest.fixture
def user_env(tmp_path, monkeypatch):
    """The environment of both runs: a persistent user cache folder (the tests
    otherwise turn the disk tier off), and this checkout's gpucache_ext in the
    new processes and Jupyter kernels."""
    user_cache = tmp_path / "user-cache"
    monkeypatch.setenv("GPUCACHE_DIR", str(user_cache))
    monkeypatch.delenv("GPUCACHE_REDIS_URL", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))))
    return user_cache


# -- the notebook ----------------------------------------------------------------

# What the notebook's text says before each %%gpukernel cell, and the stages the
# cell's report must then show as MISS.
CLAIMS = {
    "every stage misses": set(STAGES),
    "every stage hits": set(),
    "only PTX and the cubin are rebuilt": {"ptx", "cubin"},
}


def columns(header: str, line: str) -> dict:
    """A row of a fixed-width table (`header` names the columns) as {column: text}."""
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    names = header.split()
    return {name: line[start:end].strip() for name, start, end in zip(names, starts, starts[1:] + [None])}


def report(text: str) -> dict:
    """The cell report of a one-kernel %%gpukernel cell: {stage: "hit" / "MISS"} and its "why"."""
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 2 and lines[0].split()[:2] == ["kernel", "signature"], text
    row = columns(lines[0], lines[1])
    assert {row[s] for s in STAGES} <= {"hit", "MISS"}, row
    return row


def stats_table(text: str) -> dict:
    """`%gpucache stats` (and the inspector's summary) as {stage: {tier or None: (hits, misses)}}."""
    table, stage = {}, None
    for line in text.splitlines():
        words = line.split()
        if words and words[0] in STAGES:
            stage = words[0]
            table[stage] = {None: (int(words[1]), int(words[2]))}
        elif stage and line.startswith("  ") and words and words[0] in ("memory", "disk", "shared"):
            table[stage][words[0]] = int(words[1])
        elif words[:1] == ["all"]:
            break
    assert set(table) == set(STAGES), text
    return table


def chart(text: str) -> dict:
    """The inspector's 'hits/misses per cell' table: {cell number: {stage: (hits, misses)}}."""
    lines = text.split("hits/misses per cell", 1)[1].splitlines()[1:6]
    cells = [int(label.strip("[]")) for label in lines[0].split()[1:]]
    per_cell = {n: {} for n in cells}
    for line in lines[1:]:
        stage, *counts = line.split()
        for n, count in zip(cells, counts):
            per_cell[n][stage] = tuple(int(c) for c in count.split("/"))
    return per_cell


def outputs_text(cell) -> str:
    return "\n".join(quickstart.text_of(o) for o in cell.get("outputs", []))


def check_notebook(notebook, printed: str) -> list:
    """Check that the notebook's text and its numbers agree; return the per-cell hit/miss pattern."""
    cells = notebook.cells
    code_cells = [c for c in cells if c.cell_type == "code"]
    errors = [o for c in code_cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    for cell in code_cells:  # what the README's command prints is what the notebook shows
        for output in cell.get("outputs", []):
            assert quickstart.text_of(output).rstrip() in printed

    # every %%gpukernel cell follows text that says what it will do, and its report does that
    reports = {}
    for before, cell in zip(cells, cells[1:]):
        if cell.cell_type != "code" or not cell.source.startswith("%%gpukernel"):
            continue
        assert before.cell_type == "markdown", cell.source
        claims = [phrase for phrase in CLAIMS if phrase.lower() in before.source.lower()]
        assert len(claims) == 1, (before.source, claims)
        row = report(outputs_text(cell))
        assert {s for s in STAGES if row[s] == "MISS"} == CLAIMS[claims[0]], (before.source, row)
        reports[cell.execution_count] = row
    first, rerun, retarget = reports.values()
    assert "first compile of axpy" in first["why"]
    assert "sm 80 -> 86" in retarget["why"]

    # the counters and the chart per cell add up to what the cell reports showed
    stats = next(outputs_text(c) for c in code_cells if c.source.strip() == "%gpucache stats")
    inspector = next(outputs_text(c) for c in code_cells if c.source.strip() == "%gpucache")
    counters, per_cell = stats_table(stats), chart(inspector)
    assert stats_table(inspector) == counters
    for number, row in reports.items():
        assert per_cell[number] == {s: (1, 0) if row[s] == "hit" else (0, 1) for s in STAGES}
    for stage in STAGES:
        assert counters[stage][None] == tuple(map(sum, zip(*(c[stage] for c in per_cell.values()))))
        # nothing came from an earlier run: no hit is a disk (or shared) hit
        assert counters[stage].get("disk", 0) == 0 and "shared" not in counters[stage], stats

    # the HTML form is what a notebook shows
    html = [o["data"]["text/html"] for c in code_cells for o in c.get("outputs", [])
            if "text/html" in o.get("data", {})]
    assert any("gpucache-miss" in page for page in html)
    texts = [outputs_text(c) for c in code_cells]
    assert any(".target sm_86" in t for t in texts)
    assert any("'registers'" in t for t in texts)
    assert any("array([1., 3., 5., 7., 9.]" in t for t in texts)
    return [[reports[n][s] for s in STAGES] for n in sorted(reports)]


@pytest.mark.slow
def test_quickstart_tells_the_truth_on_the_first_and_the_second_run(user_env, tmp_path):
    patterns = []
    for run in (1, 2):
        saved = tmp_path / f"run{run}.ipynb"
        printed = subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py"), "--save", str(saved)],
                                 cwd=ROOT, capture_output=True, text=True, timeout=600, check=True).stdout
        patterns.append(check_notebook(nbformat.read(saved, as_version=4), printed))
    assert patterns[0] == patterns[1]
    # the tour keeps its own cache: the user's is left alone
    assert not any(p.is_file() for p in user_env.rglob("*"))


@pytest.mark.slow
def test_the_notebook_checks_can_fail(user_env):
    """Without its own cache folder, a second run of the notebook finds the
    first run's stages in the user's folder, and the checks say so."""
    notebook = nbformat.read(quickstart.NOTEBOOK, as_version=4)
    setup = [i for i, c in enumerate(notebook.cells) if "configure_default_cache" in c.source]
    assert len(setup) == 1
    del notebook.cells[setup[0]]
    path = user_env.parent / "without-own-cache.ipynb"
    nbformat.write(notebook, path)
    quickstart.run(path)  # fills the user's cache
    second = quickstart.run(path)
    with pytest.raises(AssertionError):
        check_notebook(second, "\n".join(quickstart.text_of(o) for c in second.cells for o in c.get("outputs", [])))
    assert any(p.is_file() for p in user_env.rglob("*"))


# -- the demo --------------------------------------------------------------------

# examples/demo.py's steps, in order, and the stages each must compile.
DEMO_STEPS = [
    ("first compile, new cache", set(STAGES)),
    ("the same again", set()),
    ("another GPU: sm 80", {"ptx", "cubin"}),
    ("libNVVM opt 0", {"ptx", "cubin"}),
    ("max registers 32", {"cubin"}),
    ("fastmath", {"llvm", "ptx", "cubin"}),
    ("a global the kernel reads changed: TPB = 8", set(STAGES)),
    ("...and back: TPB = 16", set()),
]
STEP = re.compile(r"^== (?P<title>.+): [\d.]+ ms, (?P<summary>.+)$")
ROW = re.compile(r"^  (?P<stage>typing|llvm|ptx|cubin) +(?:(?P<miss>miss)|hit \((?P<tier>\w+)\)) ")
COUNTER = re.compile(r"^  (?P<stage>\w+) +hits +(?P<hits>\d+) +misses +(?P<misses>\d+) ")


def summary_of(rows: dict) -> str:
    """What the step's line must say, given the rows of its explanation."""
    missed = [s for s in STAGES if rows[s] is None]
    served = [f"{s} ({rows[s]})" for s in STAGES if rows[s] is not None]
    if not missed:
        return "nothing compiled: every stage from the cache"
    if not served:
        return "compiled every stage"
    return f"compiled {', '.join(missed)}; reused {', '.join(served)}"


def check_demo(printed: str) -> list:
    steps, counters = [], {}
    for line in printed.splitlines():
        if match := STEP.match(line):
            steps.append((match["title"], match["summary"], {}))
        elif (match := ROW.match(line)) and steps:
            steps[-1][2][match["stage"]] = match["tier"]  # None: a miss
        elif match := COUNTER.match(line):
            counters[match["stage"]] = (int(match["hits"]), int(match["misses"]))
    assert [title for title, _, _ in steps] == [title for title, _ in DEMO_STEPS], printed
    for (title, summary, rows), (_, compiled) in zip(steps, DEMO_STEPS):
        assert set(rows) == set(STAGES), (title, rows)
        assert summary == summary_of(rows), (title, summary, rows)
        assert {s for s in STAGES if rows[s] is None} == compiled, (title, rows)
        assert {rows[s] for s in STAGES} <= {None, "memory"}, (title, rows)  # a new cache in memory
    assert counters == {s: (sum(rows[s] is not None for _, _, rows in steps),
                            sum(rows[s] is None for _, _, rows in steps)) for s in STAGES}
    return [rows for _, _, rows in steps]


@pytest.mark.slow
def test_demo_tells_the_truth_on_the_first_and_the_second_run(user_env):
    runs = [subprocess.run([sys.executable, str(ROOT / "examples" / "demo.py")], cwd=ROOT,
                           capture_output=True, text=True, timeout=600, check=True).stdout
            for _ in range(2)]
    assert check_demo(runs[0]) == check_demo(runs[1])
    with pytest.raises(AssertionError):  # the checks can fail: a summary that is not the rows'
        check_demo(runs[0].replace("compiled cubin; reused", "compiled ptx, cubin; reused", 1))


def test_demo_in_this_process_tells_the_truth():
    """The quick sample: examples/demo.py's steps, in this process, checked as above."""
    import contextlib
    import io

    import demo  # examples/demo.py

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        demo.main()
    assert len(check_demo(printed.getvalue())) == len(DEMO_STEPS)


# -- a tuning session: a global a device function reads changes, a restart ---------

SESSION = [
    "%load_ext gpucache_ext\nimport numpy as np\nALPHA = 1.5",
    "%%gpukernel --sm 80\nfrom numba import cuda\n\n@cuda.jit(device=True)\ndef activate(x):\n    return x * ALPHA",
    "%%gpukernel --sm 80,90\n@cuda.jit(\"void(float32[:], float32[:])\")\ndef scale_k(r, x):\n"
    "    i = cuda.grid(1)\n    if i < r.size:\n        r[i] = activate(x[i])",
    "x = np.arange(4, dtype=np.float32); out = np.zeros(4, np.float32)\nscale_k[1, 4](out, x)\nprint(out.tolist())",
    "ALPHA = 3.0\nscale_k[1, 4](out, x)\nprint(out.tolist())",
    "%gpucache clear ptx --tiers disk --yes",  # (the disk too: the restart below reads it)
]
# after the restart (a new kernel, the same disk): the cells that define, then a launch
RESTARTED = [SESSION[0] + "\nimport gpucache_ext", SESSION[1], SESSION[2],
             "ALPHA = 3.0\nx = np.arange(4, dtype=np.float32); out = np.zeros(4, np.float32)\n"
             "scale_k[1, 4](out, x)\nprint(out.tolist())",
             "from gpucache_ext.widgets.inspector import snapshot\n"
             "print(sorted(set(snapshot(gpucache_ext.default_cache()).labels.values())))"]


def _run_cells(sources, cwd):
    from nbclient import NotebookClient

    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    return [outputs_text(cell) for cell in notebook.cells]


@pytest.mark.slow  # two Jupyter kernels
def test_a_tuning_session_says_what_changed_across_launches_and_a_restart(user_env, tmp_path):
    """A global a device function reads changes in another cell: the launch
    recompiles, says so in its cell with the global, its values and the
    device function; after a ptx clear and a restart, the miss says the
    entry was cleared, the kernel hits the disk otherwise, and the
    inspector lists one kernel under one name."""
    first = _run_cells(SESSION, tmp_path)
    assert "activate: device function, compiled into each kernel that calls it" in first[1]
    assert "[0.0, 1.5, 3.0, 4.5]" in first[3] and "at this launch" not in first[3]
    lines = [line for line in first[4].splitlines() if "at this launch" in line]
    assert len(lines) == 1 and lines[0].startswith("gpukernel: compiled scale_k (float32[:], float32[:]) ")
    assert lines[0].endswith("typing: global ALPHA 1.5 -> 3.0 (read by activate)"), lines
    assert "[0.0, 3.0, 6.0, 9.0]" in first[4]

    again = _run_cells(RESTARTED, tmp_path)
    rows = [line for line in again[2].splitlines() if line.startswith("scale_k")]
    for sm in ("sm_80", "sm_90"):  # ALPHA is 1.5 here again: its entries, from the disk, but the PTX cleared
        row = next(row for row in rows if f" {sm} " in row)
        assert "MISS" in row and "ptx rebuilt (entry was cleared from the disk tier" in row, again[2]
    launched = [line for line in again[3].splitlines() if "at this launch" in line]
    assert len(launched) == 1 and "entry was cleared from the disk tier" in launched[0], again[3]
    assert "[0.0, 3.0, 6.0, 9.0]" in again[3]
    assert again[4].strip().splitlines()[-1] == "['scale_k']"


# -- the tuning notebook: a sweep and its variants table --------------------------

TUNING = ROOT / "notebooks" / "tuning.ipynb"


@pytest.mark.slow  # a Jupyter kernel
def test_the_tuning_notebook_sweeps_18_variants_and_shows_their_table(user_env):
    """notebooks/tuning.ipynb: a GELU over 3 targets x 3 register caps x fast math off
    and on compile typing once, llvm per fast math value, ptx per target and
    value, a cubin each; the table has a row per variant and architecture
    with its occupancy, one best per architecture; use() compiles nothing."""
    notebook = quickstart.run(TUNING)
    texts = [outputs_text(cell) for cell in notebook.cells if cell.cell_type == "code"]
    errors = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    sweep = next(text for text in texts if "variants; occupancy at" in text)
    assert "gelu_bias: 6 variants; occupancy at 128, 256, 512 threads a block" in sweep
    table = sweep.split("the best per architecture:", 1)[1].split("how the figures moved", 1)[0]
    rows = [line for line in table.splitlines()[2:] if line.strip()]
    assert len(rows) == 18 and sum(line.strip().startswith("*") for line in rows) == 3, table
    assert {line.replace("*", " ").split()[0] for line in rows} == {"sm_80", "sm_86", "sm_90"}
    # (occupancy at each block size right after the config)
    assert all(re.search(r"\d+% (warps|regs|smem|blocks)\s+\d+% \w+\s+\d+% \w+\s", line) for line in rows), table
    stats = stats_table(texts[-1])
    assert {stage: stats[stage][None][1] for stage in STAGES} == {"typing": 1, "llvm": 2, "ptx": 6, "cubin": 18}
    assert "compiled by use(): 0" in "\n".join(texts)
    assert "bound: sm_80,86,90 +ptx 80 fastmath=True max_registers=32" in "\n".join(texts)
    assert "matches NumPy: True" in "\n".join(texts)
