"""bench/against.py: reading each bench script's figures, medians over rounds, new/old and its flags, and the
old, new, old, new order, on captured outputs and tiny stand-in scripts (no bench runs here)."""

import importlib.util
import json
import math
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _against():
    spec = importlib.util.spec_from_file_location("bench_against", ROOT / "bench" / "against.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


against = _against()
UP, DOWN, INFO = against.HIGHER, against.LOWER, against.INFO


def named(figures):
    return {f.name: (f.value, f.better) for f in figures}


# --- printed output, as the scripts print it (captured from runs on the 2-core machine, or their format strings) ---

LAUNCH = """\
per-launch time, medians of 3 batches of 50 launches, on the recording stand-in driver
arguments   numba-cuda  gpucache_ext  ratio (median of pairs)
        0      14.41us       19.56us   1.39x
        1      29.28us       30.78us   1.05x
        4      57.12us       66.62us   1.11x
worst ratio 1.39x (target <= 1.1x)
"""

GLOBAL_ARRAYS = """\
gpucache_ext: a hit's tokens with a global array, median of 2 runs
64 MiB global                    3.96 ms   target <= 20 ms   PASS
4 KiB global                     0.44 ms   (64 MiB costs 8.9x a 4 KiB one)
SHA-256 of the 64 MiB           39.10 ms   (the hit costs 0.10x of hashing the array alone with SHA-256)
"""

FIRST_LAUNCH = """\
first launch of a lazy kernel in a new process (1 rounds, medians)
process             first launch    second   / cold
cold                      625 ms   50.2 ms    1.00x
warm                       75 ms   87.3 ms    0.12x
warm, audit off            65 ms   72.5 ms    0.10x
target: warm < cold, audit on and off: met
"""

CONCURRENCY = """\
shared tier: a real redis-server behind a proxy adding 5 ms a request; 2 cores; medians of 5 runs

1. 8 threads, 8 kernels from the shared tier:  serialised   155.0 ms   as is    30.1 ms   ratio  5.15x
2. multi-target build (sm 75, 80, 86, 90) from the shared tier: serialised    62.0 ms   as is    50.0 ms   ratio  1.24x
3. 8 threads x 3 overlapping configs, cold:   206.0 ms, against one thread compiling the 3 once:   417.0 ms   \
ratio  0.49x; stage builds 9 (one thread: 9)
"""

NOTEBOOKS = """\
notebook             cells  as written    magic  ratio   (medians of 1 runs)
ufuncs                   6       2.91s    3.00s  0.97x
random_and_streams       9       3.10s    3.61s  0.86x
all                             15.20s   18.30s  0.83x   (target >= 1.0x)
"""

NOTEBOOK = """\
run 1/1 1 kernel: plain 1.71 s, magic 1.91 s
run 1/1 12 kernels: plain 2.42 s, magic 2.54 s

medians of 1 runs, seconds; ratio = median of the runs' plain / magic (above 1.0: the magic faster)

the first run, cold:
notebook                      first run           kernel cell   kernel+launch cells
                        plain  magic  ratio   plain  magic  ratio   plain  magic  ratio
1 kernel             1.71   1.91  0.90x    0.28   0.30  0.93x    0.29   0.32  0.88x
12 kernels           2.42   2.54  0.95x    0.96   0.98  1.01x    0.97   1.01  0.99x

the edit of one kernel, then its cell and the launch cell:
notebook              edit: kernel cell   edit: kernel+launch  the magic's misses
                        plain  magic  ratio   plain  magic  ratio
1 kernel             0.05   0.06  0.88x    0.06   0.06  0.89x  typing 1 llvm 1 ptx 1 cubin 1
12 kernels           0.82   0.07 11.11x    0.83   0.09  9.34x  typing 1 llvm 1 ptx 1 cubin 1

where the magic's first run spent its compile time (StageStats.compile_seconds, median of the runs):
  notebook            typing     llvm      ptx    cubin   stages     cell  first run
  1 kernel             0.201    0.016    0.009    0.013    0.239    0.323       1.91
  12 kernels           0.491    0.171    0.313    0.163    1.138    1.010       2.54
  (cell: the kernel and launch cells' time under the magic; stages: the part of it spent compiling)

the first run cell by cell, plain / magic (medians; outside: the kernel's start and the messages):
  notebook              %load_ext       imports    device fns       kernels        launch       outside
  1 kernel                -/1.031   0.931/0.002   0.009/0.041   0.285/0.299   0.006/0.023   0.484/0.532

targets (issue 36):
  whole notebook >= 1.1x, 1 kernel: 0.90x NOT MET
"""

HELPERS = """\
gpucache_ext from /work/main/gpucache_ext
run 1/2: ours 3.54 s, numba 3.22 s

medians of 2 runs, seconds; ratio = median of the runs' numba / ours (above 1.0: ours faster)
step                      ours   numba   ratio
cold                     1.130   1.080   0.96x
launch bounds            0.380   0.370   0.99x
edited, new config       0.500   0.420   0.82x
"""


def test_bench_launch_lines():
    got = named(against.launch_figures(LAUNCH))
    assert got["0 args: ours/numba"] == (1.39, DOWN)  # ours / numba: lower is better
    assert got["4 args: gpucache_ext us"] == (66.62, DOWN)
    assert got["1 args: numba-cuda us"] == (29.28, INFO)  # the yardstick
    assert got["worst ours/numba"] == (1.39, DOWN)
    assert len(got) == 3 * 3 + 1


def test_bench_global_arrays_lines():
    got = named(against.global_arrays_figures(GLOBAL_ARRAYS))
    assert got == {"64 MiB global ms": (3.96, DOWN), "4 KiB global ms": (0.44, DOWN), "64 MiB / 4 KiB": (8.9, DOWN),
                   "SHA-256 of the 64 MiB ms": (39.1, INFO), "64 MiB hit / SHA-256": (0.1, DOWN)}


def test_bench_first_launch_lines():
    got = named(against.first_launch_figures(FIRST_LAUNCH))
    assert got["cold: first launch ms"] == (625.0, DOWN)
    assert got["warm, audit off: / cold"] == (0.1, DOWN)
    assert "cold: / cold" not in got  # always 1.00
    assert len(got) == 8


def test_bench_concurrency_lines():
    got = named(against.concurrency_figures(CONCURRENCY))
    one = "1. 8 threads, 8 kernels from the shared tier"
    assert got[f"{one}: ratio"] == (5.15, UP)  # serialised / as is
    assert got[f"{one}: serialised ms"] == (155.0, INFO)
    assert got["2. multi-target build (sm 75, 80, 86, 90) from the shared tier: as is ms"] == (50.0, DOWN)
    three = "3. 8 threads x 3 overlapping configs, cold"
    assert got[f"{three}: ratio"] == (0.49, DOWN)  # eight threads / one thread
    assert got[f"{three}: stage builds"] == (9.0, DOWN)
    assert len(got) == 3 + 3 + 5


def test_bench_notebooks_lines():
    got = named(against.notebooks_figures(NOTEBOOKS))
    assert got["random_and_streams: plain/magic"] == (0.86, UP)
    assert got["all: magic s"] == (18.3, DOWN) and got["all: plain s"] == (15.2, INFO)
    assert len(got) == 9


def test_bench_notebook_tables():
    got = named(against.notebook_figures(NOTEBOOK))
    assert got["1 kernel: first run: plain/magic"] == (0.9, UP)
    assert got["12 kernels: kernel+launch cells: magic s"] == (1.01, DOWN)
    assert got["12 kernels: edit: kernel cell: plain/magic"] == (11.11, UP)
    assert got["12 kernels: edit: kernel+launch: plain s"] == (0.83, INFO)
    assert got["1 kernel: edit misses cubin"] == (1.0, DOWN)
    assert got["12 kernels: magic compile, first run s"] == (2.54, DOWN)
    assert got["1 kernel: magic compile, typing s"] == (0.201, DOWN)
    # two notebooks: 9 figures of the first run, 6 + 4 misses of the edit, 7 stage columns; no cell-by-cell
    assert len(got) == 2 * (9 + 10 + 7)
    assert not any("load_ext" in name or "outside" in name for name in got)


def test_bench_helpers_lines():
    got = named(against.helpers_figures(HELPERS))
    assert got["edited, new config: numba/ours"] == (0.82, UP)
    assert got["launch bounds: ours s"] == (0.38, DOWN)
    assert got["cold: numba s"] == (1.08, INFO)
    assert len(got) == 9  # (the progress lines above the table are not rows)


# --- the --json files, as the scripts write them ---


def test_bench_compile_json():
    report = {"baselines": {"matmul": {"median_s": 0.19}},
              "scenarios": [{"scenario": "cold", "median_s": 0.2, "ratio": 0.95, "paired_ratio_median": 0.97},
                            {"scenario": "opt 3->2", "median_s": 0.01, "ratio": None, "paired_ratio_median": None}]}
    got = named(against.compile_figures(report))
    assert got["cold: ratio"] == (0.95, UP) and got["cold: paired"] == (0.97, UP)
    assert got["cold: ms"] == (pytest.approx(200.0), DOWN)
    assert got["baseline matmul (numba-cuda) ms"] == (pytest.approx(190.0), INFO)
    assert "opt 3->2: ratio" not in got and "opt 3->2: ms" in got  # a scenario in ERROR has no ratio


def test_bench_disk_json_takes_the_direction_from_the_target():
    rows = [{"measure": "new process, kernel on disk vs cold", "a_s": 3.0, "b_s": 0.05, "ratio": 60.0,
             "target": ">= 50x", "pass": True},
            {"measure": "DiskTier.get, 10,000 vs 100 entries", "a_s": 1e-4, "b_s": 1e-4, "ratio": 1.02,
             "target": "<= 1.5x", "pass": True}]
    got = named(against.disk_figures(json.loads(json.dumps(rows))))
    assert got["new process, kernel on disk vs cold: a/b"] == (60.0, UP)
    assert got["DiskTier.get, 10,000 vs 100 entries: a/b"] == (1.02, DOWN)
    assert got["new process, kernel on disk vs cold: b ms"] == (pytest.approx(50.0), DOWN)


def test_bench_fatbin_sweep_cluster_and_precision_json():
    fatbin = named(against.fatbin_figures([{"scenario": "cold 3-target build", "baseline": "numba x3",
                                            "baseline_ms": 600.0, "ms": 250.0, "ratio": 2.4, "paired": 2.3,
                                            "target": 2.0, "met": True}]))
    assert fatbin == {"cold 3-target build: ratio": (2.4, UP), "cold 3-target build: paired": (2.3, UP),
                      "cold 3-target build: ms": (250.0, DOWN), "cold 3-target build: baseline ms": (600.0, INFO)}
    sweep = named(against.sweep_figures({
        "medians_ms": {"numba_18": 9000.0, "cold": 2500.0, "numba_6": 3000.0, "added": 200.0},
        "ratio_cold": 3.6, "ratio_added_vs_cold": 0.08, "ratio_added_vs_numba": 15.0,
        "paired": {"cold": 3.5, "added_vs_cold": 0.081, "added_vs_numba": 14.0},
        "cold_stage_ms": {"typing": 100.0}, "met": True}))
    assert sweep["ratio cold"] == (3.6, UP) and sweep["paired added_vs_cold"] == (0.081, DOWN)
    assert sweep["numba_18 ms"] == (9000.0, INFO) and sweep["added ms"] == (200.0, DOWN)
    assert sweep["cold sweep, typing ms"] == (100.0, DOWN)
    cluster = named(against.cluster_figures({"medians": {"folder, claims on": {
        "builds": 20, "entries": 20, "wrong": 0, "makespan_s": 9.0, "makespan_ratio": 1.4, "waits": 12,
        "warm_makespan_s": 3.0, "over_warm": 3.0}}}))
    assert cluster["folder, claims on: makespan_ratio"] == (1.4, DOWN)
    assert cluster["folder, claims on: waits"] == (12.0, INFO)
    row = {"byte_equal": 78, "shared": 30, "reusable": 30, "reused": 30, "unsound": 0}
    precision = named(against.precision_figures({"stages": {"ptx": row}, "all": row}))
    assert precision["ptx: precision shared/byte_equal"] == (pytest.approx(30 / 78), UP)
    assert precision["all: unsound"] == (0.0, DOWN) and precision["ptx: byte_equal"] == (78.0, INFO)


# --- medians, new/old and flags ---


def test_verdict_flags_by_the_better_direction():
    assert against.verdict(2.0, 2.09, UP) == (pytest.approx(1.045), "")
    assert against.verdict(2.0, 1.8, UP)[1] == "WORSE"  # x faster than numba: fell
    assert against.verdict(2.0, 2.2, UP)[1] == "better"
    assert against.verdict(10.0, 11.0, DOWN)[1] == "WORSE"  # a time: rose
    assert against.verdict(10.0, 9.0, DOWN)[1] == "better"
    assert against.verdict(10.0, 12.0, INFO)[1] == "drift"  # numba's own time: the machine moved
    assert against.verdict(100.0, 95.0, DOWN) == (pytest.approx(0.95), "")  # the band's ends are inside it
    assert against.verdict(0.0, 0.0, DOWN) == (1.0, "")
    ratio, flag = against.verdict(0.0, 1.0, DOWN)  # 0 wrong results, then 1
    assert math.isinf(ratio) and flag == "WORSE"


def test_medians_over_rounds_and_figures_one_side_lacks():
    F = against.Figure
    old = [[F("a", 1.0, UP), F("gone", 5.0, DOWN)], [F("a", 3.0, UP), F("gone", 5.0, DOWN)], [F("a", 2.0, UP)]]
    new = [[F("a", 1.5, UP), F("fresh", 1.0, DOWN)], [F("a", 1.7, UP)], [F("a", 1.6, UP)]]
    rows, only_old, only_new = against.compare(old, new)
    assert [(r.name, r.old, r.new, r.flag) for r in rows] == [("a", 2.0, 1.6, "WORSE")]
    assert rows[0].ratio == pytest.approx(0.8)
    assert only_old == ["gone"] and only_new == ["fresh"]
    # a name printed twice in one run is kept apart
    twice = against.medians([[F("x", 1.0, DOWN), F("x", 9.0, DOWN)]])
    assert twice == {"x": (1.0, DOWN), "x #2": (9.0, DOWN)}
    text = against.table(rows)
    assert text.splitlines()[1].split() == ["a", "higher", "2", "1.6", "0.800", "WORSE"]


def test_every_bench_script_has_a_reader_and_its_quick_options_exist():
    names = against.bench_names(ROOT)
    assert "against" not in names and len(names) >= 13
    assert set(names) <= set(against.SCRIPTS), set(names) - set(against.SCRIPTS)
    for name, spec in against.SCRIPTS.items():
        path = ROOT / "bench" / f"{name}.py"
        assert list(spec.quick) == against.supported(path, spec.quick), name  # none dropped
        assert list(spec.full) == against.supported(path, spec.full), name
        assert spec.json == ('"--json"' in path.read_text()), name  # the JSON where there is one


def test_options_an_older_script_lacks_are_dropped_with_their_values(tmp_path):
    script = tmp_path / "old.py"
    script.write_text('parser.add_argument("--runs", type=int)\n')
    assert against.supported(script, ["--quick", "--runs", "3", "--processes", "2", "--check"]) == ["--runs", "3"]


# --- running: tiny stand-in scripts in two stand-in trees ---

STAND_IN = """\
import os, sys
with open(os.environ["AGAINST_LOG"], "a") as log:
    log.write(os.path.basename(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + "\\n")
if os.path.exists(os.path.join(os.path.dirname(__file__), "FAIL")):
    print("boom: the last line", file=sys.stderr)
    sys.exit(3)
print("speed {speed}x")
"""


def _tree(root, name, speed, fail=False):
    bench = root / name / "bench"
    bench.mkdir(parents=True)
    (bench / "stand_in.py").write_text(STAND_IN.format(speed=speed))
    if fail:
        (bench / "FAIL").write_text("")
    return root / name


def _reader(text):
    import re

    return [against.Figure("speed", float(m), against.HIGHER) for m in re.findall(r"speed ([\d.]+)x", text)]


def test_the_sides_alternate_old_first_and_are_compared(tmp_path, monkeypatch):
    old, new = _tree(tmp_path, "old", 2.0), _tree(tmp_path, "new", 1.5)
    monkeypatch.setenv("AGAINST_LOG", str(tmp_path / "log"))
    monkeypatch.setitem(against.SCRIPTS, "stand_in", against.Script((), (), _reader))
    outcome = against.compare_script("stand_in", old, new, [], 2, tmp_path, 60, lambda text: None)
    assert (tmp_path / "log").read_text().split() == ["old", "new", "old", "new"]
    assert outcome.status == "ok"
    assert [(r.name, r.old, r.new, r.flag) for r in outcome.rows] == [("speed", 2.0, 1.5, "WORSE")]
    text = against.report(outcome)
    assert "wall s per run: old" in text and "WORSE" in text


def test_a_failing_script_stops_with_its_stderr_and_a_new_one_is_skipped(tmp_path, monkeypatch):
    old, new = _tree(tmp_path, "old", 2.0), _tree(tmp_path, "new", 2.0, fail=True)
    monkeypatch.setenv("AGAINST_LOG", str(tmp_path / "log"))
    outcome = against.compare_script("stand_in", old, new, [], 3, tmp_path, 60, lambda text: None)
    assert outcome.status == "failed" and "exited 3" in outcome.note and "boom: the last line" in outcome.note
    assert len(outcome.runs) == 2  # old ran, new failed: no more rounds
    (new / "bench" / "only_here.py").write_text(textwrap.dedent("print('x')"))
    skipped = against.compare_script("only_here", old, new, [], 2, tmp_path, 60, lambda text: None)
    assert skipped.status == "new" and not skipped.runs
    assert "not in the old tree" in against.report(skipped)
