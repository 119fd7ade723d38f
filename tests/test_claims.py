"""Single flight across processes (issue 34): processes that share a disk
folder or a shared Redis tier build each entry once; the others wait for it
and read it; a builder that dies, a server that stops answering, a forged or
stale claim, other jobs' secrets never leave a process stuck or a result wrong.

Real processes (tests/claim_child.py), real compiles, a real redis-server."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from gpucache_ext import CompileConfig, KernelCache
from gpucache_ext.store import settings
from gpucache_ext.store.claims import FolderClaims, new_owner

from . import kernels
from .helpers import ROOT

PERSISTED = ("llvm", "ptx", "cubin")


def start(job, env=None):
    """One process of a job (tests/claim_child.py), started now."""
    return subprocess.Popen([sys.executable, "-m", "tests.claim_child", json.dumps(job)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


def finish(proc, timeout=240):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out + err
    return json.loads(out.strip().splitlines()[-1])


def together(job, count, env=None):
    """`count` processes of `job`, started at one moment; what each printed."""
    job = {**job, "start_at": time.time() + 6}  # (their imports done first)
    procs = [start(job, env) for _ in range(count)]
    return [finish(proc) for proc in procs]


def wait_for_claim(proc, timeout=120):
    """Until the hanging process (`hang`) says it holds its claim."""
    deadline = time.monotonic() + timeout
    line = proc.stdout.readline()
    assert line.strip() == "CLAIMED" and time.monotonic() < deadline, line + proc.stderr.read()


def fresh_cubin(sm=86):
    import hashlib

    return hashlib.sha256(KernelCache().compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=sm)).cubin
                          ).hexdigest()


def builds(results, persisted=PERSISTED):
    """(stage, token) -> how many processes built that entry (llvm is one
    entry for every target)."""
    counted = {}
    for result in results:
        for _, _, stage, outcome, _, _, _, token in result["stages"]:
            if stage in persisted:
                counted[(stage, token)] = counted.get((stage, token), 0) + (outcome == "miss")
    return counted


# ---------------------------------------------------------------------------
# claims in a folder


def test_a_folder_claim_is_held_renewed_and_released_by_its_owner_alone(tmp_path):
    claims, me, other = FolderClaims(tmp_path), new_owner(), new_owner()
    assert claims.claim("ptx", "ab12", me, 10) is True
    assert claims.claim("ptx", "ab12", other, 10) is False  # (held, and its builder alive)
    assert claims.renew("ptx", "ab12", me, 10) and not claims.renew("ptx", "ab12", other, 10)
    claims.release("ptx", "ab12", other)  # (not its: nothing)
    assert claims.held("ptx", "ab12")
    claims.release("ptx", "ab12", me)
    assert not claims.held("ptx", "ab12") and claims.claim("ptx", "ab12", other, 10) is True


def test_a_claim_whose_builder_died_on_this_machine_is_taken_at_once(tmp_path):
    claims = FolderClaims(tmp_path)
    code = ("import sys; from gpucache_ext.store.claims import FolderClaims, new_owner; "
            "print(FolderClaims(sys.argv[1]).claim('cubin', 'cd34', new_owner(), 60))")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert done.stdout.strip() == "True", done.stderr
    assert claims.held("cubin", "cd34")  # (left behind by a process that is gone)
    started = time.monotonic()
    assert claims.claim("cubin", "cd34", new_owner(), 60) is True
    assert time.monotonic() - started < 1


def test_a_claim_that_stops_changing_is_stale_by_the_waiters_own_clock(tmp_path):
    """A claim of another machine (its process cannot be asked) is stale
    once its file has not changed for 1.5 times its life, as this process
    measures it (no clock of another machine is read); renewed, it is not."""
    claims = FolderClaims(tmp_path)
    path = claims.path("llvm", "ef56")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"owner": "elsewhere:1:x", "host": "another-machine", "pid": 1, "renewals": 0}))
    future = time.time() + 10 ** 6  # (its clock far ahead: not read)
    os.utime(path, (future, future))
    me = new_owner()
    assert claims.claim("llvm", "ef56", me, 0.2) is False
    time.sleep(0.1)
    path.write_text(json.dumps({"owner": "elsewhere:1:x", "host": "another-machine", "pid": 1, "renewals": 1}))
    assert claims.claim("llvm", "ef56", me, 0.2) is False  # (renewed: seen changing)
    time.sleep(0.35)
    assert claims.claim("llvm", "ef56", me, 0.2) is True
    assert json.loads(path.read_text())["owner"] == me


def test_the_wait_and_the_claims_life_are_settings_that_name_the_fix():
    assert settings.wait_seconds(env={}) == 120 and settings.wait_seconds(env={"GPUCACHE_WAIT": "0"}) == 0
    assert settings.wait_seconds(env={"GPUCACHE_WAIT": "5m"}) == 300
    assert settings.wait_seconds(env={"GPUCACHE_WAIT": "off"}) == 0
    with pytest.raises(settings.SettingError, match="GPUCACHE_WAIT='soon' is invalid; give seconds"):
        settings.wait_seconds(env={"GPUCACHE_WAIT": "soon"})
    assert settings.claim_seconds(env={"GPUCACHE_CLAIM_SECONDS": "2.5"}) == 2.5
    with pytest.raises(settings.SettingError, match="at least 0.1 s"):
        settings.claim_seconds(env={"GPUCACHE_CLAIM_SECONDS": "0"})
    with pytest.raises(settings.SettingError, match="wait='-1' is invalid"):
        KernelCache(wait="-1")


# ---------------------------------------------------------------------------
# a job: processes started together build each entry once


@pytest.mark.slow
def test_processes_sharing_a_folder_build_each_entry_once(tmp_path):
    results = together({"directory": str(tmp_path / "cache"), "kernels": ["copy", "axpy"], "sms": [80, 86]}, 4)
    counted = builds(results)
    assert len(counted) == 2 + 4 + 4 and set(counted.values()) == {1}, counted  # each built by one process
    assert len({json.dumps(r["cubins"], sort_keys=True) for r in results}) == 1  # the same code everywhere
    waited = [row for r in results for row in r["stages"] if row[5] > 0 and row[3] == "hit"]
    assert waited and all(row[4] == "disk" for row in waited)
    counted = {}
    for result in results:  # (each process's stats count its waits, by stage and tier)
        for key, count in result["waits"].items():
            counted[key] = counted.get(key, 0) + count
    assert counted and set(key.split()[1] for key in counted) == {"disk"}
    assert sum(counted.values()) == len(waited)


@pytest.mark.slow
def test_processes_sharing_a_folder_build_each_numba_cuda_mlir_entry_once(tmp_path):
    pytest.importorskip("numba_cuda_mlir", reason="numba-cuda-mlir is not installed (gpucache_ext[mlir])")
    job = {"directory": str(tmp_path / "cache"), "kernels": ["copy", "axpy"], "sms": [80, 86], "backend": "mlir"}
    results = together(job, 3)
    counted = builds(results, ("mlir", "ptx", "cubin"))
    assert len(counted) == 2 * 2 * 3 and set(counted.values()) == {1}, counted  # (its MLIR names the target)
    assert len({json.dumps(r["cubins"], sort_keys=True) for r in results}) == 1
    waited = [row for r in results for row in r["stages"] if row[5] > 0 and row[3] == "hit"]
    assert waited and all(row[4] == "disk" for row in waited)


@pytest.mark.slow
def test_processes_sharing_a_redis_tier_build_each_entry_once(tmp_path, redis_server):
    job = {"redis_url": redis_server.url, "secret": "team-secret", "kernels": ["copy", "tanh"], "sms": [86]}
    results = together(job, 4)  # (no folder: the shared tier alone)
    counted = builds(results)
    assert len(counted) == 3 * 2 and set(counted.values()) == {1}, counted
    assert len({json.dumps(r["cubins"], sort_keys=True) for r in results}) == 1
    assert results[0]["cubins"]["copy 86"] == fresh_cubin(86)
    waited = [row for r in results for row in r["stages"] if row[5] > 0 and row[3] == "hit"]
    assert waited and all(row[4] == "shared" for row in waited)


def test_a_hit_another_process_built_says_so_with_its_wait(tmp_path):
    hanging = start({"directory": str(tmp_path), "kernels": ["copy"], "hang": "cubin"})
    try:
        wait_for_claim(hanging)
        cache = KernelCache(directory=tmp_path, audit=False, wait=0.5)
        result = cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))
    finally:
        hanging.kill()
        hanging.wait()
    cubin = result.stages["cubin"]
    assert cubin.outcome.value == "miss" and cubin.waited >= 0.5  # the wait ran out: built here
    assert any("waited" in r and "GPUCACHE_WAIT" in r and "built it here" in r for r in cubin.reasons)
    assert result.stages["ptx"].outcome.value == "hit"  # (the hanging process filed its ptx)
    again = KernelCache(directory=tmp_path, audit=False)
    assert again.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86)).stages["cubin"].tier == "disk"


@pytest.mark.slow  # (about 4 s; a hit another process built is quick in the test above)
def test_a_wait_for_another_processs_build_is_a_hit_the_report_and_the_stats_show(tmp_path):
    from gpucache_ext.views.summary import saved_seconds, summary_text

    slow = start({"directory": str(tmp_path), "kernels": ["copy"], "hang": "cubin", "hang_seconds": 1.5})
    wait_for_claim(slow)
    cache = KernelCache(directory=tmp_path, audit=False)
    result = cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))
    finish(slow)
    cubin = result.stages["cubin"]
    assert (cubin.outcome.value, cubin.tier) == ("hit", "disk") and 0.3 < cubin.waited < 60
    assert "hit (disk, built by another process, waited" in result.explain()
    stats = cache.stats()
    assert stats["cubin"].tiers["disk"].waits == 1 and stats["cubin"].tiers["disk"].waited_seconds >= 0.3
    assert stats["ptx"].tiers["disk"].waits is None  # (filed before this process looked: a plain hit)
    table = summary_text(stats, saved_seconds(stats))
    assert "waited for another process" in table.splitlines()[0]
    assert "waited for another process" not in summary_text(KernelCache().stats(), {})


def test_an_entry_waited_for_is_shown_as_built_by_another_process(tmp_path):
    from gpucache_ext.ipython.report import _stage_cell
    from gpucache_ext.pipeline.results import Outcome, StageResult

    done = StageResult("ptx", "ab" * 32, Outcome.HIT, "shared", 0.18, saved_seconds=0.5, waited=0.18)
    assert _stage_cell(done) == "hit:shared (another process built it, waited 180 ms)"
    from gpucache_ext.pipeline.results import _stage_line

    assert "hit (shared, built by another process, waited 180 ms)" in _stage_line(done, "")


# ---------------------------------------------------------------------------
# never stuck, never wrong


@pytest.mark.parametrize("where", ["folder", pytest.param("redis", marks=pytest.mark.slow)])
def test_a_builder_killed_mid_build_frees_its_entry(tmp_path, where, request):
    if where == "redis":
        server = request.getfixturevalue("redis_server")
        job, cache_args = {"redis_url": server.url, "secret": "s"}, {"redis_url": server.url, "secret": "s"}
    else:
        job, cache_args = {"directory": str(tmp_path)}, {"directory": tmp_path}
    env = {"GPUCACHE_CLAIM_SECONDS": "1"}
    hanging = start({**job, "kernels": ["copy"], "hang": "cubin"}, env)
    wait_for_claim(hanging)
    hanging.send_signal(signal.SIGKILL)  # mid-build: its claim on the cubin is left behind
    hanging.wait()
    os.environ["GPUCACHE_CLAIM_SECONDS"] = "1"
    try:
        cache = KernelCache(audit=False, **cache_args)
    finally:
        del os.environ["GPUCACHE_CLAIM_SECONDS"]
    started = time.monotonic()
    result = cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))
    assert time.monotonic() - started < 20  # (the claim expired: not the 120 s wait)
    assert result.stages["cubin"].outcome.value == "miss" and not any("GPUCACHE_WAIT" in r for r in
                                                                       result.stages["cubin"].reasons)
    import hashlib

    assert hashlib.sha256(result.cubin).hexdigest() == fresh_cubin(86)


@pytest.mark.slow
@pytest.mark.parametrize("fault", [signal.SIGSTOP, signal.SIGKILL], ids=["stalled", "killed"])
def test_a_redis_stalled_or_killed_mid_wait_is_a_tier_with_no_claims(tmp_path, redis_server, fault):
    """A process waiting for another's build when the server stalls or dies
    stops waiting (the server's calls time out: a tier with no claims) and
    builds the entry itself, rightly."""
    import threading
    import warnings

    hanging = start({"redis_url": redis_server.url, "secret": "s", "kernels": ["copy"], "hang": "cubin"})
    found = {}
    try:
        wait_for_claim(hanging)
        cache = KernelCache(redis_url=redis_server.url, secret="s", audit=False, wait=60)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            waiter = threading.Thread(target=lambda: found.update(
                result=cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))))
            waiter.start()
            time.sleep(1.5)  # (waiting for the hanging process's cubin by now)
            assert waiter.is_alive()
            os.kill(redis_server.proc.pid, fault)
            try:
                waiter.join(30)
                assert not waiter.is_alive()  # never stuck
            finally:
                if fault == signal.SIGSTOP:
                    os.kill(redis_server.proc.pid, signal.SIGCONT)
    finally:
        hanging.kill()
        hanging.wait()
    import hashlib

    assert any("not answering" in str(w.message) for w in caught)
    cubin = found["result"].stages["cubin"]
    assert cubin.outcome.value == "miss" and cubin.waited == 0  # (not a wait that ran out: the tier went)
    assert hashlib.sha256(found["result"].cubin).hexdigest() == fresh_cubin(86)


def test_other_jobs_secrets_and_waiting_off_never_wait(tmp_path, redis_server):
    hanging = start({"redis_url": redis_server.url, "secret": "job-a", "kernels": ["copy"], "hang": "llvm"})
    try:
        wait_for_claim(hanging)
        other_job = KernelCache(redis_url=redis_server.url, secret="job-b", audit=False, wait=60)
        started = time.monotonic()
        result = other_job.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))
        assert time.monotonic() - started < 15 and result.stages["llvm"].waited == 0
        same_job = KernelCache(redis_url=redis_server.url, secret="job-a", audit=False, wait=0)
        result = same_job.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=80))
        assert result.stages["llvm"].waited == 0 and result.stages["llvm"].outcome.value == "miss"
    finally:
        hanging.kill()
        hanging.wait()


def test_a_forged_claim_delays_a_build_never_changes_it(tmp_path, redis_server):
    """A claim planted by hand on the server (never renewed, never
    expiring) holds the build back only as long as GPUCACHE_WAIT; what is
    built after is a fresh compile."""
    import hashlib

    import redis

    cache = KernelCache(redis_url=redis_server.url, secret="s", audit=False, wait=1)
    shared = cache.tiers[0]
    llvm = cache.tokens(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))["llvm"].hex
    client = redis.Redis.from_url(redis_server.url)
    client.set(shared.claim_key("llvm", llvm), "forged")
    started = time.monotonic()
    result = cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))
    assert 1 <= time.monotonic() - started < 15
    assert result.stages["llvm"].outcome.value == "miss" and result.stages["llvm"].waited >= 1
    assert hashlib.sha256(result.cubin).hexdigest() == fresh_cubin(86)
    assert client.get(shared.claim_key("llvm", llvm)) == b"forged"  # (not ours to drop)
    held = [key for key in client.keys("*:claim:*") if not key.endswith(llvm.encode())]
    assert held == []  # (the claims this compile made are released)
