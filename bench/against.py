#!/usr/bin/env python
"""The bench scripts run from an earlier commit and from this tree, interleaved, figure by figure.

    python bench/against.py REV [--scripts a,b,...] [--rounds N] [--quick] [--json PATH]

A temporary ``git worktree`` of REV is made (and removed at the end, on
Ctrl-C too).  Each bench script then runs ``--rounds`` times from each tree,
alternating: old, new, old, new, ...  Each side runs its own tree's copy of
the script, in that tree, with ``PYTHONPATH=<that tree>`` first, so that
``import gpucache_ext`` (and ``tests``) resolve to that tree and not to the
editable install (checked once per side before anything runs).  The figures
come from the script's ``--json`` file where it writes one, else from the
lines it prints (bench/README.md, "against.py", says which and how).

For every figure both sides report: the old median, the new median over the
rounds, and new/old; a row outside 0.95..1.05 is flagged WORSE or better
by the direction the figure's own definition makes better (``better``
column: higher, lower, or ``-`` for a yardstick such as numba-cuda's own
time, flagged ``drift``: the machine moved, not the code).  Also the wall
time of each run.  Exit status 0, unless a script failed on either side
(1, with the tail of its stderr), or the trees could not be set up (2).
"""

from __future__ import annotations

import argparse
import compileall
import dataclasses
import json
import math
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Sequence, Tuple

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BAND = (0.95, 1.05)
HIGHER, LOWER, INFO = "higher", "lower", "-"
NUMBER = r"(-?\d+(?:\.\d+)?)"


@dataclasses.dataclass(frozen=True)
class Figure:
    name: str
    value: float
    better: str  # HIGHER, LOWER or INFO


def figure(name: str, value, better: str) -> List[Figure]:
    """[Figure] for a number, [] for None (a scenario that failed has no ratio)."""
    if value is None or isinstance(value, bool):
        return []
    return [Figure(name, float(value), better)]


# --- figures from the scripts' JSON files ------------------------------------------------------------------------

def compile_figures(report: dict) -> List[Figure]:
    """bench_compile.py: ratio = baseline / ours (higher), the scenario's own time (lower), numba's baselines (-)."""
    out = []
    for key, base in report.get("baselines", {}).items():
        out += figure(f"baseline {key} (numba-cuda) ms", _scaled(base.get("median_s"), 1e3), INFO)
    for s in report["scenarios"]:
        label = s["scenario"]
        out += figure(f"{label}: ratio", s.get("ratio"), HIGHER)
        out += figure(f"{label}: paired", s.get("paired_ratio_median"), HIGHER)
        out += figure(f"{label}: ms", _scaled(s.get("median_s"), 1e3), LOWER)
    return out


def disk_figures(rows: list) -> List[Figure]:
    """bench_disk.py: a/b, better as its target says (>= higher, <= lower); a and b are both the cache's times."""
    out = []
    for row in rows:
        name, target = row["measure"], str(row.get("target", ""))
        better = HIGHER if target.startswith(">") else LOWER if target.startswith("<") else INFO
        out += figure(f"{name}: a/b", row.get("ratio"), better)
        out += figure(f"{name}: a ms", _scaled(row.get("a_s"), 1e3), LOWER)
        out += figure(f"{name}: b ms", _scaled(row.get("b_s"), 1e3), LOWER)
    return out


def fatbin_figures(rows: list) -> List[Figure]:
    """bench_fatbin.py: ratio and paired = baseline / ours (higher); ours ms (lower); the baseline's ms (-)."""
    out = []
    for row in rows:
        name = row["scenario"]
        out += figure(f"{name}: ratio", row.get("ratio"), HIGHER)
        out += figure(f"{name}: paired", row.get("paired"), HIGHER)
        out += figure(f"{name}: ms", row.get("ms"), LOWER)
        out += figure(f"{name}: baseline ms", row.get("baseline_ms"), INFO)
    return out


def sweep_figures(result: dict) -> List[Figure]:
    """bench_sweep.py: ratio_cold and *_vs_numba = numba / ours (higher); added_vs_cold = added / cold (lower)."""
    better = {"cold": HIGHER, "added_vs_numba": HIGHER, "added_vs_cold": LOWER}
    out = []
    for key, way in better.items():
        out += figure(f"ratio {key}", result.get(f"ratio_{key}"), way)
        out += figure(f"paired {key}", result.get("paired", {}).get(key), way)
    for key, ms in result.get("medians_ms", {}).items():
        out += figure(f"{key} ms", ms, INFO if key.startswith("numba") else LOWER)
    for stage, ms in result.get("cold_stage_ms", {}).items():
        out += figure(f"cold sweep, {stage} ms", ms, LOWER)
    return out


def cluster_figures(report: dict) -> List[Figure]:
    """bench_cluster.py: builds, wrong and every makespan (and its ratios to one process alone, to the warm job)
    are lower-better; waits and entries are counts to read, not to rank."""
    lower = ("builds", "wrong", "makespan_s", "makespan_ratio", "warm_makespan_s", "over_warm")
    out = []
    for sharing, medians in report.get("medians", {}).items():
        for key, value in medians.items():
            out += figure(f"{sharing}: {key}", value, LOWER if key in lower else INFO)
    return out


def mlir_figures(report: dict) -> List[Figure]:
    """bench_mlir.py: ratios to numba-cuda-mlir (higher); the ms figures (lower) and its baseline's (-)."""
    out = []
    for name, value in report.items():
        better = INFO if name == "baseline ms" else LOWER if name.endswith(" ms") else HIGHER
        out += figure(name, value, better)
    return out


def precision_figures(report: dict) -> List[Figure]:
    """reuse_precision.py: pairs shared by token and the precisions (higher); unsound (lower); the pairs (-)."""
    out = []
    stages = {**report.get("stages", {}), "all": report.get("all", {})}
    for stage, row in stages.items():
        for key, value in row.items():
            way = {"shared": HIGHER, "reused": HIGHER, "unsound": LOWER}.get(key, INFO)
            out += figure(f"{stage}: {key}", value, way)
        for part, whole in (("shared", "byte_equal"), ("reused", "reusable")):
            if row.get(whole):
                out += figure(f"{stage}: precision {part}/{whole}", row[part] / row[whole], HIGHER)
    return out


def _scaled(value, factor):
    return None if value is None else value * factor


# --- figures from the lines the scripts print ---------------------------------------------------------------------

def lines(text: str, pattern: str, columns: Sequence[Tuple[str, int, str]]) -> List[Figure]:
    """Figures from every line that `pattern` matches (from its start): per (name, group, better) in `columns`,
    the group's number, named by formatting `name` with the match's groups ({1} is the first); a group that did
    not take part gives no figure."""
    out = []
    for line in text.splitlines():
        m = re.match(pattern, line)
        if m:
            for name, group, better in columns:
                out += figure(name.format(m.group(0), *m.groups()), m.group(group), better)
    return out


def launch_figures(text: str) -> List[Figure]:
    """bench_launch.py: per argument count numba's us (-), ours (lower), ratio = ours / numba (lower)."""
    return lines(text, rf"^\s*(\d+)\s+{NUMBER}us\s+{NUMBER}us\s+{NUMBER}x\s*$",
                 [("{1} args: numba-cuda us", 2, INFO), ("{1} args: gpucache_ext us", 3, LOWER),
                  ("{1} args: ours/numba", 4, LOWER)]) \
        + lines(text, rf"^worst ratio {NUMBER}x", [("worst ours/numba", 1, LOWER)])


def global_arrays_figures(text: str) -> List[Figure]:
    """bench_global_arrays.py: a hit's ms (lower), SHA-256's ms (-), the hit's multiples of both (lower)."""
    return lines(text, rf"^(64 MiB global|4 KiB global)\s+{NUMBER} ms", [("{1} ms", 2, LOWER)]) \
        + lines(text, rf"^(SHA-256 of the 64 MiB)\s+{NUMBER} ms", [("{1} ms", 2, INFO)]) \
        + lines(text, rf".*costs {NUMBER}x a 4 KiB one", [("64 MiB / 4 KiB", 1, LOWER)]) \
        + lines(text, rf".*the hit costs {NUMBER}x of hashing", [("64 MiB hit / SHA-256", 1, LOWER)])


def first_launch_figures(text: str) -> List[Figure]:
    """bench_first_launch.py: first and second launch ms (lower); a warm process's / cold (lower; cold's is 1)."""
    row = rf"\s+{NUMBER} ms\s+{NUMBER} ms\s+{NUMBER}x\s*$"
    return lines(text, rf"^(cold|warm|warm, audit off){row}",
                 [("{1}: first launch ms", 2, LOWER), ("{1}: second launch ms", 3, LOWER)]) \
        + lines(text, rf"^(warm|warm, audit off){row}", [("{1}: / cold", 4, LOWER)])


def concurrency_figures(text: str) -> List[Figure]:
    """bench_concurrency.py: 1 and 2, ratio = serialised / as is (higher), as is ms (lower), serialised ms (-);
    3, ratio = eight threads / one thread (lower), both ms (lower), stage builds (lower)."""
    return lines(text, rf"^(\d\. .+?):\s+serialised\s+{NUMBER} ms\s+as is\s+{NUMBER} ms\s+ratio\s+{NUMBER}x",
                 [("{1}: serialised ms", 2, INFO), ("{1}: as is ms", 3, LOWER), ("{1}: ratio", 4, HIGHER)]) \
        + lines(text, rf"^(\d\. .+?):\s+{NUMBER} ms, against one thread .*?:\s+{NUMBER} ms\s+ratio\s+{NUMBER}x"
                rf"(?:; stage builds {NUMBER} \(one thread: {NUMBER}\))?",
                [("{1}: threads ms", 2, LOWER), ("{1}: one thread ms", 3, LOWER), ("{1}: ratio", 4, LOWER),
                 ("{1}: stage builds", 5, LOWER), ("{1}: stage builds, one thread", 6, LOWER)])


def notebooks_figures(text: str) -> List[Figure]:
    """bench_notebooks.py: per notebook and all, ratio = plain / magic (higher), magic s (lower), plain s (-)."""
    return lines(text, rf"^(\S+)\s+(?:\d+\s+)?{NUMBER}s\s+{NUMBER}s\s+{NUMBER}x",
                 [("{1}: plain s", 2, INFO), ("{1}: magic s", 3, LOWER), ("{1}: plain/magic", 4, HIGHER)])


def notebook_figures(text: str) -> List[Figure]:
    """bench_notebook.py: its two tables of (plain, magic, ratio = plain / magic) per measure: ratio (higher),
    magic s (lower), plain s (-); the magic's misses in the edit (lower); its compile seconds by stage (lower).
    The cell-by-cell table and the targets (the same ratios again) are not read."""
    out: List[Figure] = []
    measures: List[str] = []
    columns: List[str] = []
    section = None
    triple = rf"{NUMBER}\s+{NUMBER}\s+{NUMBER}x"
    for line in text.splitlines():
        if not line.strip():
            section = None if section != "heading" else section
            continue
        if line.startswith(("the first run, cold:", "the edit of one kernel")):
            section, measures = "heading", []
            continue
        if line.startswith("where the magic's first run spent"):
            section, columns = "stages", []
            continue
        if section == "heading" and line.startswith("notebook"):
            measures = [p for p in re.split(r"\s{2,}", line.strip())[1:] if not p.startswith("the magic's")]
            section = "table"
            continue
        if section == "table":
            m = re.match(rf"^(\S.*?)\s+(?={triple})", line)
            if not m:
                continue  # (the plain / magic / ratio subheading)
            name = m.group(1)
            for measure, (plain, magic, ratio) in zip(measures, re.findall(triple, line)):
                out += figure(f"{name}: {measure}: plain s", plain, INFO)
                out += figure(f"{name}: {measure}: magic s", magic, LOWER)
                out += figure(f"{name}: {measure}: plain/magic", ratio, HIGHER)
            for stage, count in re.findall(rf"\b(typing|llvm|ptx|cubin) {NUMBER}", line[m.end():]):
                out += figure(f"{name}: edit misses {stage}", count, LOWER)
        elif section == "stages":
            if line.strip().startswith("notebook"):
                columns = re.split(r"\s{2,}", line.strip())[1:]
                continue
            m = re.match(rf"^\s+(\S.*?)\s+((?:{NUMBER}\s*)+)$", line)
            if m and columns:
                for column, value in zip(columns, m.group(2).split()):
                    out += figure(f"{m.group(1)}: magic compile, {column} s", value, LOWER)
    return out


def helpers_figures(text: str) -> List[Figure]:
    """bench_helpers.py: per step ours s (lower), numba s (-), ratio = numba / ours (higher)."""
    return lines(text, rf"^(\S.*?)\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}x\s*$",
                 [("{1}: ours s", 2, LOWER), ("{1}: numba s", 3, INFO), ("{1}: numba/ours", 4, HIGHER)])


@dataclasses.dataclass(frozen=True)
class Script:
    """How to run one bench script and read its figures: `quick` and `full` are its arguments with and without
    --quick; `read` takes the parsed --json file when `json` is set, else the printed text."""
    quick: Tuple[str, ...]
    full: Tuple[str, ...]
    read: Callable[..., List[Figure]]
    json: bool = False


SCRIPTS: Dict[str, Script] = {
    "bench_compile": Script(("--quick", "--quiet"), ("--quiet",), compile_figures, json=True),
    "bench_launch": Script(("--runs", "11"), (), launch_figures),
    "bench_disk": Script(("--runs", "2"), (), disk_figures, json=True),
    "bench_fatbin": Script(("--runs", "3"), (), fatbin_figures, json=True),
    "bench_sweep": Script(("--quick", "--quiet"), ("--quiet",), sweep_figures, json=True),
    "bench_global_arrays": Script(("--runs", "5"), (), global_arrays_figures),
    "bench_first_launch": Script(("--runs", "2"), (), first_launch_figures),
    "bench_concurrency": Script(("--runs", "2"), (), concurrency_figures),
    "bench_notebooks": Script(("--runs", "1"), (), notebooks_figures),
    "bench_notebook": Script(("--runs", "1"), (), notebook_figures),
    "bench_helpers": Script(("--runs", "2"), (), helpers_figures),
    "bench_cluster": Script(("--runs", "1", "--processes", "2"), (), cluster_figures, json=True),
    "reuse_precision": Script((), (), precision_figures, json=True),
    "bench_mlir": Script(("--runs", "3"), (), mlir_figures, json=True),
}


# --- comparing --------------------------------------------------------------------------------------------------

def medians(rounds: Sequence[Sequence[Figure]]) -> Dict[str, Tuple[float, str]]:
    """name -> (median over the rounds that report it, better); a name repeated in one round gets '#2', '#3'."""
    values: Dict[str, List[float]] = {}
    better: Dict[str, str] = {}
    for figures in rounds:
        seen: Dict[str, int] = {}
        for f in figures:
            seen[f.name] = seen.get(f.name, 0) + 1
            name = f.name if seen[f.name] == 1 else f"{f.name} #{seen[f.name]}"
            values.setdefault(name, []).append(f.value)
            better[name] = f.better
    return {name: (statistics.median(v), better[name]) for name, v in values.items()}


def verdict(old: float, new: float, better: str, band: Tuple[float, float] = BAND) -> Tuple[float, str]:
    """(new / old, flag): '' inside the band; outside it WORSE or better by `better`, or drift for a yardstick."""
    if old == 0:
        ratio = 1.0 if new == 0 else math.copysign(math.inf, new)
    else:
        ratio = new / old
    if band[0] <= ratio <= band[1]:
        return ratio, ""
    if better == INFO:
        return ratio, "drift"
    worse = ratio < band[0] if better == HIGHER else ratio > band[1]
    return ratio, "WORSE" if worse else "better"


@dataclasses.dataclass
class Row:
    name: str
    better: str
    old: float
    new: float
    ratio: float
    flag: str


def compare(old_rounds: Sequence[Sequence[Figure]], new_rounds: Sequence[Sequence[Figure]],
            band: Tuple[float, float] = BAND) -> Tuple[List[Row], List[str], List[str]]:
    """(rows for the figures both sides report, in the new side's order; names only old has; only new has)."""
    old, new = medians(old_rounds), medians(new_rounds)
    rows = []
    for name, (value, better) in new.items():
        if name in old:
            ratio, flag = verdict(old[name][0], value, better, band)
            rows.append(Row(name, better, old[name][0], value, ratio, flag))
    return rows, [n for n in old if n not in new], [n for n in new if n not in old]


def _number(value: float) -> str:
    if math.isinf(value):
        return "inf"
    if value == int(value) and abs(value) < 1e6:
        return f"{int(value)}"
    return f"{value:.4g}" if abs(value) < 1000 else f"{value:.0f}"


def table(rows: Sequence[Row]) -> str:
    header = ("figure", "better", "old median", "new median", "new/old", "")
    cells = [header] + [(r.name, r.better, _number(r.old), _number(r.new),
                         "inf" if math.isinf(r.ratio) else f"{r.ratio:.3f}", r.flag) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    lines = []
    for c in cells:
        lines.append("  ".join(c[i].ljust(widths[i]) if i in (0, 1, 5) else c[i].rjust(widths[i])
                               for i in range(len(header))).rstrip())
    return "\n".join(lines)


# --- running ----------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Run:
    side: str
    returncode: int
    seconds: float
    stdout: str
    stderr: str
    figures: List[Figure]
    problem: str = ""  # why no figures were read, or where gpucache_ext came from when it was the wrong tree


def supported(script: Path, args: Sequence[str]) -> List[str]:
    """`args` less the options the script's source never names (an older copy may lack --quick or --json),
    each with its value."""
    source = script.read_text()
    out: List[str] = []
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg.startswith("--") and f'"{arg}"' not in source:
            skip = i + 1 < len(args) and not args[i + 1].startswith("--")
            continue
        out.append(arg)
    return out


def side_env(tree: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(tree), os.environ.get("PYTHONPATH"))))
    return env


def where_imported(tree: Path) -> Tuple[str, str]:
    """(gpucache_ext.__file__, tests.__file__) as a script run with this side's environment sees them: from a
    folder outside both trees, so that only PYTHONPATH (or the editable install) can find them."""
    probe = "import gpucache_ext, tests; print(gpucache_ext.__file__); print(tests.__file__)"
    with tempfile.TemporaryDirectory() as neutral:
        done = subprocess.run([sys.executable, "-c", probe], cwd=neutral, env=side_env(tree),
                              capture_output=True, text=True, timeout=300)
    if done.returncode:
        raise RuntimeError(f"importing gpucache_ext with PYTHONPATH={tree} failed:\n{done.stderr[-2000:]}")
    found = done.stdout.splitlines()
    return found[0], found[1]


def inside(path: str, tree: Path) -> bool:
    try:
        Path(path).resolve().relative_to(tree.resolve())
        return True
    except ValueError:
        return False


def run_script(name: str, side: str, tree: Path, other: Path, args: Sequence[str], work: Path, index: int,
               timeout: float) -> Run:
    spec = SCRIPTS.get(name)
    path = tree / "bench" / f"{name}.py"
    argv = supported(path, args)
    out_json = None
    if spec is not None and spec.json and '"--json"' in path.read_text():
        out_json = work / f"{name}-{side}-{index}.json"
        argv += ["--json", str(out_json)]
    start = time.perf_counter()
    returncode, stdout, stderr = execute([sys.executable, str(path), *argv], tree, side_env(tree), timeout)
    seconds = time.perf_counter() - start
    run = Run(side, returncode, seconds, stdout, stderr, [])
    wrong = f"{other.resolve()}{os.sep}gpucache_ext"
    if wrong in stdout or wrong in stderr:
        run.problem = f"its output names the other tree's gpucache_ext ({wrong})"
        return run
    if returncode or spec is None:
        run.problem = "" if spec else "no reader for this script: wall time only"
        return run
    try:
        if out_json is not None:
            run.figures = spec.read(json.loads(out_json.read_text()))
        elif spec.json:
            run.problem = "this copy of the script writes no --json file"
        else:
            run.figures = spec.read(stdout)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        run.problem = f"its figures could not be read: {type(exc).__name__}: {exc}"
    if not run.figures and not run.problem:
        run.problem = "no figures found in its output"
    return run


def execute(argv: Sequence[str], cwd: Path, env: dict, timeout: float) -> Tuple[int, str, str]:
    """(exit status, stdout, stderr).  The script runs in a process group of its own, ended whole when it times
    out or this process is interrupted (its servers, kernels and child processes with it)."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
        return proc.returncode, stdout, stderr
    except subprocess.TimeoutExpired:
        stdout, stderr = end_group(proc)
        return 124, stdout, stderr + f"\n(timed out after {timeout:g} s)"
    except BaseException:
        end_group(proc)
        raise


def end_group(proc: subprocess.Popen) -> Tuple[str, str]:
    """Kill the script's process group; what it had printed (nothing, where a process that left the group
    still holds its pipes after 30 s)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        return proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        return "", ""


def tail(text: str, count: int = 25) -> str:
    return "\n".join("    " + line for line in text.rstrip().splitlines()[-count:])


@dataclasses.dataclass
class Outcome:
    name: str
    status: str  # "ok", "new" (not in the old tree), "failed", "unread"
    runs: List[Run] = dataclasses.field(default_factory=list)
    rows: List[Row] = dataclasses.field(default_factory=list)
    only_old: List[str] = dataclasses.field(default_factory=list)
    only_new: List[str] = dataclasses.field(default_factory=list)
    note: str = ""


def compare_script(name: str, old_tree: Path, new_tree: Path, args: Sequence[str], rounds: int, work: Path,
                   timeout: float, say: Callable[[str], None]) -> Outcome:
    if not (old_tree / "bench" / f"{name}.py").is_file():
        return Outcome(name, "new", note="not in the old tree: skipped")
    outcome = Outcome(name, "ok")
    trees = {"old": (old_tree, new_tree), "new": (new_tree, old_tree)}
    for index in range(rounds):
        for side in ("old", "new"):
            tree, other = trees[side]
            run = run_script(name, side, tree, other, args, work, index, timeout)
            outcome.runs.append(run)
            say(f"  {name} round {index + 1}/{rounds} {side}: {run.seconds:.1f} s"
                + (f" (exit {run.returncode})" if run.returncode else "")
                + (f" ({run.problem})" if run.problem else ""))
            if run.returncode:
                outcome.status = "failed"
                outcome.note = f"{side} exited {run.returncode}; the tail of its stderr:\n{tail(run.stderr)}"
                return outcome
    problems = sorted({f"{r.side}: {r.problem}" for r in outcome.runs if r.problem})
    if any("other tree" in p for p in problems):
        outcome.status = "failed"
    elif problems:
        outcome.status = "unread"
    outcome.note = "; ".join(problems)
    outcome.rows, outcome.only_old, outcome.only_new = compare(
        [r.figures for r in outcome.runs if r.side == "old"], [r.figures for r in outcome.runs if r.side == "new"])
    return outcome


def report(outcome: Outcome) -> str:
    walls = {side: [r.seconds for r in outcome.runs if r.side == side] for side in ("old", "new")}
    head = f"== {outcome.name}"
    if walls["old"] or walls["new"]:
        head += "  wall s per run: " + "; ".join(
            f"{side} {', '.join(f'{s:.1f}' for s in found)} (median {statistics.median(found):.1f})"
            for side, found in walls.items() if found)
    lines = [head]
    if outcome.status == "new":
        lines.append(f"  new: {outcome.note}")
        return "\n".join(lines)
    if outcome.rows:
        lines.append(table(outcome.rows))
    for label, names in (("only old reports", outcome.only_old), ("only new reports", outcome.only_new)):
        if names:
            lines.append(f"  {label}: {', '.join(names)}")
    if outcome.note:
        lines.append(f"  {outcome.status.upper()}: {outcome.note}")
    for run in outcome.runs:
        if run.problem and not run.returncode and run.side == "new" and not run.figures:
            lines.append(f"  the new side's output, last lines:\n{tail(run.stdout, 15)}")
            break
    return "\n".join(lines)


# --- the worktree -----------------------------------------------------------------------------------------------

def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def add_worktree(rev: str, where: Path) -> str:
    commit = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    git("worktree", "add", "--detach", str(where), commit)
    return commit


def remove_worktree(where: Path) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(where)], cwd=ROOT, capture_output=True)
    shutil.rmtree(where, ignore_errors=True)
    subprocess.run(["git", "worktree", "prune"], cwd=ROOT, capture_output=True)


def bench_names(tree: Path) -> List[str]:
    return sorted(p.stem for p in (tree / "bench").glob("*.py") if p.stem != Path(__file__).stem)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev", help="the commit to compare with (a worktree of it is made and removed)")
    parser.add_argument("--scripts", help="comma-separated names (bench_launch or bench_launch.py); "
                                          "default: every script in bench/ but this one")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each script per side (default 3)")
    parser.add_argument("--quick", action="store_true", help="each script's short settings (see bench/README.md)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=ARGS",
                        help="the arguments for one script instead, e.g. --set 'bench_launch=--runs 5'")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds one run may take (default 3600)")
    parser.add_argument("--json", type=Path, help="also write every figure, median and flag here")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    overrides = {}
    for item in args.set:
        name, sep, rest = item.partition("=")
        if not sep:
            parser.error(f"--set wants NAME=ARGS, not {item!r}")
        overrides[name.removesuffix(".py")] = shlex.split(rest)
    args.overrides = overrides
    return args


def main(argv=None) -> int:
    args = parse_args(argv)

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def stop(signum, frame):  # SIGTERM: leave through the finally below, as Ctrl-C does
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    names = [n.strip().removesuffix(".py") for n in args.scripts.split(",") if n.strip()] if args.scripts \
        else bench_names(ROOT)
    missing = [n for n in names if not (ROOT / "bench" / f"{n}.py").is_file()]
    if missing:
        say(f"no such script in bench/: {', '.join(missing)}")
        return 2
    work = Path(tempfile.mkdtemp(prefix="gpucache-against-"))
    old_tree = work / "old"
    outcomes: List[Outcome] = []
    try:
        try:
            commit = add_worktree(args.rev, old_tree)
        except subprocess.CalledProcessError as exc:
            say(f"cannot make a worktree of {args.rev}: {exc.stderr.strip()}")
            return 2
        subject = git("log", "-1", "--format=%h %s", commit)
        here = git("log", "-1", "--format=%h", "HEAD") + (" + uncommitted changes"
                                                            if git("status", "--porcelain", "-uno") else "")
        print(f"old: {subject[:100]}\nnew: this tree ({ROOT}, {here})")
        for side, tree in (("old", old_tree), ("new", ROOT)):
            try:
                module, tests = where_imported(tree)
            except (RuntimeError, IndexError, subprocess.TimeoutExpired) as exc:
                say(f"the {side} side cannot import gpucache_ext and tests: {exc}")
                return 2
            print(f"{side}: gpucache_ext from {module}; tests from {tests}")
            if not (inside(module, tree) and inside(tests, tree)):
                say(f"the {side} side does not import its own tree ({tree}): nothing measured")
                return 2
            # bytecode for both trees, as an installed package has it (PYTHONDONTWRITEBYTECODE may be set, and
            # a new worktree has none: its processes would compile the sources at every import)
            for folder in ("gpucache_ext", "tests"):
                compileall.compile_dir(str(tree / folder), quiet=1)
        mode = "quick" if args.quick else "full"
        print(f"{args.rounds} round(s) per script, old then new, {mode} settings; new/old outside "
              f"{BAND[0]}..{BAND[1]} flagged by the figure's better direction ('-': a yardstick, 'drift')\n",
              flush=True)
        for name in names:
            spec = SCRIPTS.get(name)
            script_args = args.overrides.get(name)
            if script_args is None:
                script_args = list(spec.quick if args.quick else spec.full) if spec else []
            say(f"{name} {' '.join(script_args)}")
            outcome = compare_script(name, old_tree, ROOT, script_args, args.rounds, work, args.timeout, say)
            outcomes.append(outcome)
            print(report(outcome) + "\n", flush=True)
    except KeyboardInterrupt:
        say("interrupted: removing the worktree")
        return 130
    finally:
        remove_worktree(old_tree)
        shutil.rmtree(work, ignore_errors=True)
    print(summary(outcomes))
    if args.json:
        write_json(args.json, args, commit, outcomes)
    return 1 if any(o.status == "failed" for o in outcomes) else 0


def summary(outcomes: Sequence[Outcome]) -> str:
    lines = ["== summary"]
    for o in outcomes:
        walls = {s: [r.seconds for r in o.runs if r.side == s] for s in ("old", "new")}
        wall = sum(walls["old"]) + sum(walls["new"])
        worse = [r.name for r in o.rows if r.flag == "WORSE"]
        text = f"{o.name:<20} {o.status:<6} {wall:7.1f} s"
        if o.rows:
            text += f"  {len(o.rows)} figures, {len(worse)} worse"
            if worse:
                text += ": " + "; ".join(worse[:4]) + (f"; +{len(worse) - 4} more" if len(worse) > 4 else "")
        lines.append(text)
    lines.append(f"{'total':<27} {sum(r.seconds for o in outcomes for r in o.runs):7.1f} s")
    return "\n".join(lines)


def write_json(path: Path, args: argparse.Namespace, commit: str, outcomes: Sequence[Outcome]) -> None:
    data = {
        "rev": args.rev, "commit": commit, "rounds": args.rounds, "quick": args.quick, "band": list(BAND),
        "scripts": {o.name: {
            "status": o.status, "note": o.note, "only_old": o.only_old, "only_new": o.only_new,
            "rows": [dataclasses.asdict(r) for r in o.rows],
            "runs": [{"side": r.side, "returncode": r.returncode, "seconds": r.seconds, "problem": r.problem,
                      "figures": [dataclasses.asdict(f) for f in r.figures]} for r in o.runs],
        } for o in outcomes},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(finite(data), indent=2) + "\n")


def finite(value):
    """`value` with every infinite float (new/old where old is 0) as None: JSON has no infinity."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


if __name__ == "__main__":
    sys.exit(main())
