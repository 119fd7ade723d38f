"""The other process of tests/test_security.py: builds caches one of the three
ways a user does (the constructor, `KernelCache.from_environment`, the magic
in an IPython shell), each in the environment its job gives, runs the job's
steps, and prints what happened as one JSON line (``RESULT {...}``).

    python -c "from tests.security_child import main; main()" '<jobs as JSON>'

A job: ``{"way": "constructor" | "environment" | "magic", "env": {NAME: value
or null to unset}, "kwargs": {...} (the constructor's / from_environment's
arguments), "steps": [{"do": "compile", "kernel": "axpy" | "copy", "sm": 86},
{"do": "entries"}, {"do": "clear"}]}``.  Every job gets a fresh cache (so a
fresh memory tier) and starts from the process's own environment, changed
as its ``env`` says.
"""

import hashlib
import json
import os
import sys
import warnings

PERSISTENT = ("llvm", "ptx", "cubin")

# the magic's kernels: eagerly compiled (a signature string), as a notebook writes them
CELLS = {
    "axpy": '''
from numba import cuda

@cuda.jit("void(float32[:], float32, float32[:], float32[:])")
def axpy(r, a, x, y):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = a * x[i] + y[i]
''',
    "copy": '''
from numba import cuda

@cuda.jit("void(float32[:], float32[:])")
def copy(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = x[i] + 1.0
''',
}


class Way:
    """Builds a cache and compiles into it, as one way of using the package does."""

    def __init__(self, kwargs):
        self.kwargs = kwargs
        self.cache = None

    def compile(self, kernel, sm):
        from gpucache_ext import CompileConfig

        from tests import kernels

        func, sig = {"axpy": (kernels.axpy, kernels.AXPY_SIG), "copy": (kernels.copy, kernels.COPY_SIG)}[kernel]
        return self.cache.compile(func, sig, CompileConfig(sm=sm))

    def close(self):
        pass


class Constructor(Way):
    def __init__(self, kwargs):
        from gpucache_ext import KernelCache

        super().__init__(kwargs)
        self.cache = KernelCache(**kwargs)


class Environment(Way):
    def __init__(self, kwargs):
        from gpucache_ext import KernelCache

        super().__init__(kwargs)
        self.cache = KernelCache.from_environment(**kwargs)


class Magic(Way):
    """``%load_ext gpucache_ext`` in an InteractiveShell; ``%%gpukernel --sm N`` cells.
    The extension is unloaded at `close`, so the next job's session makes a new cache."""

    def __init__(self, kwargs):
        from IPython.core.interactiveshell import InteractiveShell

        self.kwargs = kwargs
        self.shell = InteractiveShell.instance()
        self.shell.run_line_magic("load_ext", "gpucache_ext")

    def compile(self, kernel, sm):
        outcome = self.shell.run_cell(f"%%gpukernel --sm {sm} --quiet\n{CELLS[kernel]}")
        if not outcome.success:
            raise outcome.error_in_exec or outcome.error_before_exec
        return self.shell.user_ns[kernel].last

    @property
    def cache(self):
        """The session's cache (made at its first use, from the environment)."""
        import gpucache_ext

        return gpucache_ext.default_cache()

    def close(self):
        self.shell.run_line_magic("unload_ext", "gpucache_ext")
        self.shell.reset(new_session=False)


WAYS = {"constructor": Constructor, "environment": Environment, "magic": Magic}


def tier_stats(cache):
    """Per persistent stage, per persistent tier: what `stats` says."""
    stats = cache.stats()
    return {stage: {name: {"hits": t.hits, "entries": t.entries, "rejected_by": dict(t.rejected_by or {}),
                           "previous_secret": t.previous_secret}
                    for name, t in stats[stage].tiers.items() if name != "memory"}
            for stage in PERSISTENT}


def run_job(job, base_env):
    os.environ.clear()
    os.environ.update(base_env)
    for name, value in job.get("env", {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    report = {"steps": []}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        way = WAYS[job["way"]](job.get("kwargs", {}))
        try:
            for step in job.get("steps", []):
                report["steps"].append(run_step(way, step))
            report["tier_info"] = [{"name": t.name, "used": t.used, "signed": t.signed, "location": t.location}
                                   for t in way.cache.tier_info()]
        finally:
            way.close()
    report["warnings"] = [{"category": w.category.__name__, "message": str(w.message)} for w in caught]
    return report


def run_step(way, step):
    if step["do"] == "compile":
        result = way.compile(step["kernel"], step["sm"])
        return {"stages": {s: {"hit": layer.hit, "tier": layer.tier, "token": layer.token}
                           for s, layer in result.stages.items()},
                "cubin": hashlib.sha256(result.cubin).hexdigest(), "tiers": tier_stats(way.cache)}
    if step["do"] == "entries":
        return {"entries": sorted([row.stage, row.kernel.rsplit(".", 1)[-1], list(row.tiers)]
                                  for row in way.cache.entries()),
                "tiers": tier_stats(way.cache)}
    if step["do"] == "clear":
        way.cache.clear()
        return {"tiers": tier_stats(way.cache)}
    raise ValueError(f"unknown step {step!r}")


def main():
    jobs = json.loads(sys.argv[1])
    base_env = dict(os.environ)
    reports = [run_job(job, base_env) for job in jobs]
    print("RESULT " + json.dumps(reports), flush=True)


if __name__ == "__main__":
    main()
