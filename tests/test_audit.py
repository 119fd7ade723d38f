"""The self-audit: a hit compiled again from nothing and compared.

The wrong entries here are planted the way a broken token would leave them:
a valid entry (its checksum and its key check out) whose artifact belongs to
another compile.  Only recompiling can tell.
"""

import dataclasses
import functools
import json
import re
import warnings

import numpy as np
import pytest

from gpucache_ext import AuditWarning, CompileConfig, KernelCache
from gpucache_ext.pipeline.audit import AuditPolicy, parse_audit
from gpucache_ext.store.disk import DiskTier

from . import helpers, kernels

SM80 = CompileConfig(sm=80)


def plant(tier, stage, victim, donor):
    """Overwrite `victim`'s entry of `stage` with `donor`'s artifact, keeping
    the victim's key and components, so that the entry still checks out."""
    token = victim.stages[stage].token
    good = tier.get(stage, token)
    wrong = tier.get(stage, donor.stages[stage].token)
    tier.put(stage, dataclasses.replace(good, artifact=wrong.artifact, nbytes=wrong.artifact.nbytes))
    assert tier.get(stage, token).artifact == wrong.artifact  # valid, and wrong


@pytest.fixture
def planted(tmp_path):
    """A disk cache where axpy's cubin entry holds copy's cubin."""
    cache = KernelCache(directory=tmp_path)
    axpy = cache.compile(kernels.axpy, kernels.AXPY_SIG, SM80)
    copy = cache.compile(kernels.copy, kernels.COPY_SIG, SM80)
    plant(DiskTier(tmp_path), "cubin", axpy, copy)
    return tmp_path, axpy, copy


def test_audit_of_a_sound_hit_passes():
    cache = KernelCache(audit=True, audit_background=False)
    first = cache.compile(kernels.axpy, kernels.AXPY_SIG, SM80)
    assert first.audit is None  # nothing was served from the cache
    again = cache.compile(kernels.axpy, kernels.AXPY_SIG, SM80)
    assert again.hit and again.audit.state == "passed" and not again.audit.mismatches
    stats = cache.stats()
    assert [stats[s].audits for s in ("llvm", "ptx", "cubin")] == [1, 1, 1]
    assert all(stats[s].audit_mismatches == 0 for s in stats)


def test_audit_catches_a_planted_entry_evicts_it_and_uses_the_fresh_artifact(planted):
    directory, axpy, copy = planted
    cache = KernelCache(directory=directory, audit=True, audit_background=False)
    with pytest.warns(AuditWarning) as caught:
        result = cache.compile(kernels.axpy, kernels.AXPY_SIG, SM80)
    assert result.stages["cubin"].tier == "disk"
    assert result.audit.state == "mismatch"
    assert [m.stage for m in result.audit.mismatches] == ["cubin"]
    message = str(caught[0].message)
    for expected in ("axpy", "cubin", result.stages["cubin"].token[:12], "ptx", "first difference",
                     "binary"):
        assert expected in message
    assert result.cubin == axpy.cubin != copy.cubin  # the fresh artifact is used
    assert cache.stats()["cubin"].audit_mismatches == 1
    assert cache.audit_mismatches()[-1].kernel.endswith("axpy")
    # the disk entry was replaced: a new cache (no audit) gets the right cubin
    assert KernelCache(directory=directory).compile(kernels.axpy, kernels.AXPY_SIG, SM80).cubin == axpy.cubin


def test_text_mismatches_show_the_first_differing_lines(tmp_path):
    cache = KernelCache(directory=tmp_path)
    axpy = cache.compile(kernels.axpy, kernels.AXPY_SIG, SM80)
    copy = cache.compile(kernels.copy, kernels.COPY_SIG, SM80)
    plant(DiskTier(tmp_path), "ptx", axpy, copy)
    auditing = KernelCache(directory=tmp_path, max_entries={"cubin": 1}, audit=True, audit_background=False)
    auditing.compile(kernels.copy, kernels.COPY_SIG, SM80.replace(max_registers=40))  # ptx hit only
    with pytest.warns(AuditWarning) as caught:
        result = auditing.compile(kernels.axpy, kernels.AXPY_SIG, SM80.replace(max_registers=40))
    assert any(re.search(r"(?s)cached ptx.*--- cached.*\+\+\+ fresh", str(w.message)) for w in caught)
    assert {m.stage for m in result.audit.mismatches} >= {"ptx"}
    assert result.ptx == axpy.ptx


def test_background_audit_reports_when_done_and_the_kernel_then_runs_fresh_code(planted):
    from gpucache_ext import Kernel

    directory, axpy, _ = planted
    cache = KernelCache(directory=directory, audit=1.0)
    kernel = Kernel(kernels.axpy, [kernels.AXPY_SIG], SM80, cache, simulate=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (result,) = kernel.compile_declared()
        assert result.audit is not None
        cache.audit_wait()
        assert result.audit.wait(0) and result.audit.state == "mismatch"
    assert any(issubclass(w.category, AuditWarning) for w in caught)
    r, x, y = (np.zeros(4, np.float32), np.arange(4, dtype=np.float32), np.ones(4, np.float32))
    assert kernel.result_for(r, np.float32(2.0), x, y).cubin == axpy.cubin
    kernel[1, 4](r, np.float32(2.0), x, y)
    assert np.allclose(r, 2.0 * (x * kernels.SCALE) + y)


def test_sampling_and_settings():
    default = AuditPolicy(0.0, first_persisted=True)
    assert parse_audit(None) == parse_audit("") == parse_audit("first") == default
    assert parse_audit("off") == parse_audit(False) == parse_audit(0) == AuditPolicy(0.0, first_persisted=False)
    assert parse_audit("all") == parse_audit(True) == AuditPolicy(1.0)
    assert parse_audit("0.25") == AuditPolicy(0.25) and not parse_audit("off").enabled
    for bad in ("sometimes", 1.5, -0.1):
        with pytest.raises(ValueError, match="audit"):
            parse_audit(bad)
    never = KernelCache(audit=0.0)
    never.compile(kernels.copy, kernels.COPY_SIG, SM80)
    assert never.compile(kernels.copy, kernels.COPY_SIG, SM80).audit is None
    asked = never.compile(kernels.copy, kernels.COPY_SIG, SM80, audit=True)  # per call, at once
    assert asked.audit.state == "passed"


def test_audit_from_the_environment(monkeypatch):
    monkeypatch.setenv("GPUCACHE_DIR", "off")
    monkeypatch.setenv("GPUCACHE_AUDIT", "all")
    cache = KernelCache.from_environment()
    cache.compile(kernels.copy, kernels.COPY_SIG, SM80)
    result = cache.compile(kernels.copy, kernels.COPY_SIG, SM80)
    cache.audit_wait()
    assert result.audit.state == "passed"
    monkeypatch.setenv("GPUCACHE_AUDIT", "often")
    with pytest.raises(ValueError, match="GPUCACHE_AUDIT='often' is invalid"):
        KernelCache.from_environment()


gpucache = functools.partial(helpers.gpucache, timeout=300)  # verify --recompile compiles


@pytest.mark.slow
def test_verify_recompile_finds_and_evicts_planted_entries(planted):
    directory, axpy, copy = planted
    plant(DiskTier(directory), "ptx", copy, axpy)
    report = json.loads(gpucache("--dir", directory, "--json", "verify", "--recompile", expect=1).stdout)
    counts = report["recompiled"]["counts"]
    assert counts == {"match": 1,  # axpy's ptx
                      "mismatch": 2,  # the planted ones
                      "tainted": 1,  # copy's cubin, filed under the wrong ptx's token
                      "skipped": 2,  # the llvm entries need the kernels' source
                      "failed": 0}
    found = {(e["stage"], e["kernel"].rsplit(".", 1)[-1], e["status"]) for e in report["recompiled"]["entries"]}
    assert found == {("cubin", "axpy", "mismatch"), ("ptx", "copy", "mismatch"), ("cubin", "copy", "tainted")}
    text = gpucache("--dir", directory, "verify", "--recompile").stdout  # evicted: clean now
    assert "0 differed" in text
    gpucache("--dir", directory, "verify", "--recompile", "--sample", "0.5")
    assert "fraction" in gpucache("--dir", directory, "verify", "--recompile", "--sample", "2", expect=2).stderr


MAGIC_CELL = '''
from numba import cuda

@cuda.jit("void(float32[:], float32[:])")
def shift(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = x[i] + 1.0
'''


def test_magic_audit_flag_reports_each_kernels_audit(ip, capsys):
    import gpucache_ext
    from gpucache_ext.store.tiers import Entry

    ip.run_cell(f"%%gpukernel --sm 80 --quiet\n{MAGIC_CELL}").raise_error()
    ip.run_cell(f"%%gpukernel --sm 80 --audit\n{MAGIC_CELL}").raise_error()
    assert "audit" in capsys.readouterr().out
    assert ip.user_ns["shift"].last.audit.state == "passed"
    # plant copy's cubin under shift's token in the magic's cache, as a broken key would
    cache = gpucache_ext.default_cache()
    token = ip.user_ns["shift"].last.stages["cubin"].token
    good = cache.entry("cubin", token)
    wrong = KernelCache().compile(kernels.copy, kernels.COPY_SIG, SM80)
    cache._memory["cubin"].put(dataclasses.replace(good, artifact=wrong._cubin))
    with pytest.warns(AuditWarning):
        ip.run_cell(f"%%gpukernel --sm 80 --audit\n{MAGIC_CELL}").raise_error()
    out = capsys.readouterr().out
    assert "MISMATCH cubin" in out
    fresh = KernelCache().compile(ip.user_ns["shift"].py_func, "void(float32[:], float32[:])", SM80)
    assert ip.user_ns["shift"].cubin == fresh.cubin
    assert isinstance(cache.entry("cubin", token), Entry) and cache.entry("cubin", token).artifact.cubin == fresh.cubin


def test_audit_catches_a_re_signed_entry_in_the_shared_tier(redis_server):  # noqa: F811 (fixture)
    from gpucache_ext.store.shared import RedisTier

    writer = KernelCache(redis_url=redis_server.url, secret="team-secret")
    axpy = writer.compile(kernels.axpy, kernels.AXPY_SIG, SM80)
    copy = writer.compile(kernels.copy, kernels.COPY_SIG, SM80)
    # someone holding the secret (or a broken key) files copy's cubin under axpy's token
    plant(RedisTier(redis_server.url, secret="team-secret"), "cubin", axpy, copy)
    reader = KernelCache(redis_url=redis_server.url, secret="team-secret", audit=True,
                         audit_background=False)
    with pytest.warns(AuditWarning, match="cubin"):
        result = reader.compile(kernels.axpy, kernels.AXPY_SIG, SM80)
    assert result.stages["cubin"].tier == "shared" and result.audit.mismatched
    assert result.cubin == axpy.cubin
    later = KernelCache(redis_url=redis_server.url, secret="team-secret")
    assert later.compile(kernels.axpy, kernels.AXPY_SIG, SM80).cubin == axpy.cubin  # replaced in Redis


def test_background_audit_findings_reach_the_next_cell_report(ip, capsys, monkeypatch):
    import gpucache_ext

    monkeypatch.setenv("GPUCACHE_AUDIT", "all")
    ip.run_cell(f"%%gpukernel --sm 80 --quiet\n{MAGIC_CELL}").raise_error()
    cache = gpucache_ext.default_cache()
    token = ip.user_ns["shift"].last.stages["cubin"].token
    wrong = KernelCache().compile(kernels.copy, kernels.COPY_SIG, SM80)
    cache._memory["cubin"].put(dataclasses.replace(cache.entry("cubin", token), artifact=wrong._cubin))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AuditWarning)
        ip.run_cell(f"%%gpukernel --sm 80 --quiet\n{MAGIC_CELL}").raise_error()  # quiet: no report
        cache.audit_wait()
    capsys.readouterr()
    ip.run_cell("%%gpukernel --sm 80 --quiet\nx = 1\n").raise_error()
    out = capsys.readouterr().out
    assert "audit: the cached cubin of shift" in out and "fresh code is in use" in out
    ip.run_cell("%%gpukernel --sm 80 --quiet\nx = 2\n").raise_error()
    assert "audit:" not in capsys.readouterr().out  # reported once


# ---------------------------------------------------------------------------
# On by default: the first hit of each kernel served by a persistent tier


def test_by_default_the_first_disk_hit_of_each_kernel_is_audited_in_the_background(tmp_path):
    KernelCache(directory=tmp_path, audit=False).compile(kernels.axpy, kernels.AXPY_SIG, SM80)
    cache = KernelCache(directory=tmp_path)  # a new process's cache, default policy
    first = cache.compile(kernels.axpy, kernels.AXPY_SIG, SM80)
    assert first.stages["cubin"].tier == "disk" and first.audit is not None
    assert first.audit.state == "pending"  # (it waits for the cache to be idle)
    # a report shown meanwhile, saved with the notebook, is never updated: it says when the audit runs
    from gpucache_ext.ipython.report import CellReport

    shown = CellReport([first])
    assert shown.rows()[0]["audit"] == "queued" and "pending" not in repr(shown)
    assert re.search(r'class="gpucache-queued" title="audited in the background after this cell[^"]*'
                     r'a mismatch is told in a later cell.s report', shown._repr_html_())
    cache.audit_wait()
    assert first.audit.state == "passed"
    assert CellReport([first]).rows()[0]["audit"] == "ok"
    again = cache.compile(kernels.axpy, kernels.AXPY_SIG, SM80)  # a memory hit
    assert again.hit and again.audit is None
    other = cache.compile(kernels.axpy, kernels.AXPY_SIG, SM80.replace(max_registers=40))  # a miss and hits
    assert other.audit is None
    assert cache.stats()["cubin"].audits == 1
    assert KernelCache(directory=tmp_path, audit="off").compile(kernels.axpy, kernels.AXPY_SIG, SM80).audit is None


def test_by_default_a_planted_disk_entry_is_caught_evicted_and_replaced(planted):
    directory, axpy, copy = planted
    cache = KernelCache(directory=directory)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = cache.compile(kernels.axpy, kernels.AXPY_SIG, SM80)
        assert result.cubin == copy.cubin  # served as found ...
        cache.audit_wait()
    assert result.audit.state == "mismatch" and result.cubin == axpy.cubin  # ... and fixed before the next launch
    assert any(issubclass(w.category, AuditWarning) for w in caught)
    assert KernelCache(directory=directory, audit=False).compile(
        kernels.axpy, kernels.AXPY_SIG, SM80).cubin == axpy.cubin


def test_an_audit_compiles_the_snapshot_its_hit_was_hashed_from(tmp_path):
    """An edit made between the hit and its background audit is no mismatch:
    the audit compiles what the hit's token hashed, not the kernel as it is."""
    from .helpers import notebook_namespace, run_cell

    ns = notebook_namespace()
    run_cell(ns, "def kernel(r):\n    r[0] = K\n")
    ns["K"] = 2.0
    KernelCache(directory=tmp_path, audit=False).compile(ns["kernel"], "void(float64[:])", SM80)
    cache = KernelCache(directory=tmp_path)
    result = cache.compile(ns["kernel"], "void(float64[:])", SM80)
    ns["K"] = 3.0  # the next cell, before the audit ran
    cache.audit_wait()
    assert result.audit.state == "passed" and cache.audit_mismatch_count == 0


def test_audits_wait_for_the_cache_to_be_idle():
    from gpucache_ext.pipeline.audit import Auditor

    auditor = Auditor(AuditPolicy(), background=True)
    ran = []
    auditor.busy(True)  # a compile running
    auditor.submit(lambda: ran.append(True))
    import time

    time.sleep(auditor.IDLE_SECONDS * 2)
    assert not ran, "an audit started while a compile ran"
    auditor.busy(False)
    auditor.wait()
    assert ran


def test_in_a_notebook_audits_wait_for_the_end_of_the_cell(ip, tmp_path):
    """The magic's session holds its cache's background audits from each
    cell's start to its end: the cell the user waits for never shares the
    machine with them."""
    import gpucache_ext

    session = gpucache_ext.current_session()
    session.configure_cache(directory=str(tmp_path))
    ip.run_cell("x = 1").raise_error()
    cache = session.cache
    assert not cache._auditor._held
    ip.run_cell("import gpucache_ext\nheld = gpucache_ext.current_session().cache._auditor._held").raise_error()
    assert ip.user_ns["held"] is True and not cache._auditor._held
