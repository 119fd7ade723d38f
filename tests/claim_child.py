"""The other processes of tests/test_claims.py and bench/bench_cluster.py: one
process of a job, compiling kernels into a cache whose tiers it shares with
the job's other processes, and printing what happened as one JSON line.

    python -m tests.claim_child '<job as JSON>'

A job: ``{"directory": folder or null (or "own_directory": a folder each process
makes its own subfolder of), "redis_url": url or null, "secret":
secret or null, "start_at": time.time() to start at (all processes at
once), "kernels": ["copy", "axpy", "tanh", "matmul", "total"], "sms": [86, ...], "hang": stage or
null (the build of that stage never returns: a builder killed mid-build;
with "hang_seconds", it builds after that long),
"wait": GPUCACHE_WAIT or null, "backend": the compiler or null (the kernel's
own)}``.  It prints ``{"stages": [[kernel, sm, stage,
outcome, tier, waited, reasons, token], ...], "cubins": {"kernel sm": sha256}, "seconds":
compile time, "built": entries it built, "waits": {"stage tier": waits
counted by its stats}}``; with "hang", ``CLAIMED`` once the
hanging stage has been claimed, then nothing.
"""

import hashlib
import json
import os
import sys
import time
import warnings


def main(argv=None):
    job = json.loads((argv or sys.argv)[1])
    from gpucache_ext import CompileConfig, KernelCache
    from gpucache_ext.errors import TierWarning

    from . import kernels

    warnings.simplefilter("ignore", TierWarning)  # (a stalled server: the test checks the outcome)
    if job.get("hang"):
        _hang_at(job["hang"], job.get("hang_seconds"))
    directory = job.get("directory")
    if job.get("own_directory"):  # (each process its own empty folder: local tiers not shared)
        directory = os.path.join(job["own_directory"], str(os.getpid()))
    cache = KernelCache(directory=directory, redis_url=job.get("redis_url"),
                        secret=job.get("secret"), audit=False, wait=job.get("wait"))
    from gpucache_ext import samples

    funcs = {"copy": (kernels.copy, kernels.COPY_SIG), "axpy": (kernels.axpy, kernels.AXPY_SIG),
             "tanh": (kernels.tanh_kernel, kernels.TANH_SIG),
             "matmul": (samples.load(samples.MATMUL)["matmul"], samples.MATMUL_SIG),
             "total": (samples.load(samples.TOTAL)["total"], samples.TOTAL_SIG)}
    start_at = job.get("start_at") or 0
    while time.time() < start_at:
        time.sleep(0.0005)
    began = time.perf_counter()
    late = max(0.0, time.time() - start_at) if start_at else 0.0  # (started after the moment: counted)
    rows, cubins, built = [], {}, 0
    for name in job["kernels"]:
        func, sig = funcs[name]
        for sm in job.get("sms", [86]):
            result = cache.compile(func, sig, CompileConfig(sm=sm, backend=job.get("backend")))
            for stage, done in result.stages.items():
                rows.append([name, sm, stage, done.outcome.value, done.tier, round(done.waited, 4),
                             list(done.reasons), done.token])
                built += stage != "typing" and done.outcome.value == "miss"
            cubins[f"{name} {sm}"] = hashlib.sha256(result.cubin).hexdigest()
    seconds = time.perf_counter() - began + late
    waits = {f"{stage} {tier}": found.waits for stage, counted in cache.stats().items()
             for tier, found in counted.tiers.items() if found.waits}
    print(json.dumps({"stages": rows, "cubins": cubins, "seconds": seconds, "built": built, "waits": waits}),
          flush=True)


def _hang_at(stage: str, seconds=None) -> None:
    """The build of `stage` claims its entry, says so, then never returns
    (or, given `seconds`, builds after that long)."""
    from gpucache_ext.pipeline import driver as pipeline

    table = pipeline.STAGE_TABLE
    build = table[stage].build

    def hang(job, upstream):
        print("CLAIMED", flush=True)
        if seconds is not None:
            time.sleep(seconds)
            return build(job, upstream)
        while True:
            time.sleep(60)

    table[stage] = table[stage]._replace(build=hang)


if __name__ == "__main__":
    main()
