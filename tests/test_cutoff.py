"""Early cutoff (issue 12), with real compiles: ptx and cubin are keyed on the
digest of the bytes of the artifact before them, so a stage rebuilt to the
same bytes as before leaves the stage after it a hit.

On the copy kernel at sm_86, ``prec_div=False`` and ``opt=2`` rebuild the
PTX to the bytes the default config gives (the kernel divides nothing and
opt 2 and 3 agree on it), so the cubin is reused; ``ftz=True`` and another
sm change the PTX, so the cubin is never reused.  Every reuse is checked
against a compile in a new cache (and once in a new process).
"""

import dataclasses
import hashlib
import json
import struct
import warnings

import pytest

from gpucache_ext import AuditWarning, CompileConfig, KernelCache, queries
from gpucache_ext.store.codec import MAGIC, read_header
from gpucache_ext.store.disk import DiskTier
from gpucache_ext.pipeline.results import Outcome

from . import kernels
from .helpers import gpucache, run_python

BASE = CompileConfig(sm=86)
SAME_PTX = {"prec_div": BASE.replace(prec_div=False), "opt2": BASE.replace(opt=2)}
OTHER_PTX = {"ftz": BASE.replace(ftz=True), "sm80": CompileConfig(sm=80)}
CONFIGS = {"base": BASE, **SAME_PTX, **OTHER_PTX}


def copy(cache, config):
    return cache.compile(kernels.copy, kernels.COPY_SIG, config)


def outcomes(result):
    return {stage: layer.outcome for stage, layer in result.stages.items()}


def tokens(result):
    return {stage: result.stages[stage].token for stage in ("llvm", "ptx", "cubin")}


@pytest.fixture(scope="module")
def fresh():
    """Each config compiled in a brand-new cache."""
    return {name: copy(KernelCache(), config) for name, config in CONFIGS.items()}


# ---------------------------------------------------------------------------
# (a), (b): which changes are cutoffs


@pytest.mark.parametrize("name", sorted(SAME_PTX))
def test_a_ptx_change_that_keeps_the_bytes_reuses_the_cubin(name, fresh):
    cache = KernelCache()
    first = copy(cache, BASE)
    result = copy(cache, SAME_PTX[name])
    assert outcomes(result) == {"typing": Outcome.HIT, "llvm": Outcome.HIT, "ptx": Outcome.MISS,
                                "cubin": Outcome.HIT}, result.explain()
    assert result.ptx == first.ptx  # rebuilt, to the same bytes
    assert result.stages["ptx"].token != first.stages["ptx"].token  # (its inputs changed)
    cubin = result.stages["cubin"]
    assert cubin.cutoff and cubin.tier == "memory" and not result.stages["ptx"].cutoff
    assert cubin.token == first.stages["cubin"].token
    stats = cache.stats()
    assert stats["cubin"].cutoffs == 1 and stats["cubin"].hits == 1
    assert stats["ptx"].cutoffs == stats["llvm"].cutoffs == stats["typing"].cutoffs == 0
    # what a new cache compiles for that config, to the byte and the token
    want = fresh[name]
    assert (result.llvm_ir, result.ptx, result.cubin) == (want.llvm_ir, want.ptx, want.cubin)
    assert result.entry_name == want.entry_name
    assert tokens(result) == tokens(want)
    assert not any(layer.cutoff for layer in want.stages.values())
    # once more: a plain hit, not a cutoff
    again = copy(cache, SAME_PTX[name])
    assert again.hit and not any(layer.cutoff for layer in again.stages.values())
    assert cache.stats()["cubin"].cutoffs == 1


def test_nvvm_ir_rebuilt_to_the_same_bytes_reuses_the_ptx(tmp_path):
    """The llvm entry gone (evicted, or its file refused): lowering runs again,
    gives the same IR, and ptx is a cutoff hit, from disk in a new session."""
    first = copy(KernelCache(directory=tmp_path), BASE)
    cache = KernelCache(directory=tmp_path)
    assert cache.evict("llvm", first.stages["llvm"].token)
    result = copy(cache, BASE)
    assert [result.stages[s].outcome for s in ("llvm", "ptx", "cubin")] == [Outcome.MISS, Outcome.HIT, Outcome.HIT]
    assert result.stages["ptx"].cutoff and result.stages["ptx"].tier == "disk"
    assert not result.stages["cubin"].cutoff  # (its upstream was found, not rebuilt)
    assert [cache.stats()[s].cutoffs for s in ("llvm", "ptx", "cubin")] == [0, 1, 0]
    assert (result.ptx, result.cubin) == (first.ptx, first.cubin) and tokens(result) == tokens(first)


@pytest.mark.parametrize("name", sorted(OTHER_PTX))
def test_a_change_that_alters_the_ptx_is_never_a_cutoff(name, fresh):
    cache = KernelCache()
    first = copy(cache, BASE)
    for config in SAME_PTX.values():  # more cubins to (wrongly) land on
        copy(cache, config)
    result = copy(cache, OTHER_PTX[name])
    assert result.ptx != first.ptx
    assert outcomes(result)["ptx"] is Outcome.MISS and outcomes(result)["cubin"] is Outcome.MISS
    assert not any(layer.cutoff for layer in result.stages.values())
    assert "ptx input changed" in result.stages["cubin"].reasons
    assert cache.stats()["cubin"].cutoffs == len(SAME_PTX)  # only those
    want = fresh[name]
    assert (result.ptx, result.cubin) == (want.ptx, want.cubin) and tokens(result) == tokens(want)


def test_a_change_that_alters_the_nvvm_ir_is_no_cutoff():
    """fastmath is named in the kernel's mangled name: the IR, the PTX and the
    cubin all change."""
    cache = KernelCache()
    first = copy(cache, BASE)
    result = copy(cache, BASE.replace(fastmath=True))
    assert result.llvm_ir != first.llvm_ir
    assert [s for s, o in outcomes(result).items() if o is Outcome.MISS] == ["llvm", "ptx", "cubin"]
    assert not any(layer.cutoff for layer in result.stages.values())
    assert all(cache.stats()[s].cutoffs == 0 for s in ("ptx", "cubin"))


# ---------------------------------------------------------------------------
# (c): one cubin entry, one token


def test_the_reused_cubin_is_one_entry_and_cubin_tokens_match_bytes(fresh):
    cache = KernelCache()
    results = {name: copy(cache, config) for name, config in CONFIGS.items()}
    rows = cache.entries(stage="cubin")
    assert len(rows) == len({r.cubin for r in results.values()}) == 3  # base (3 configs), ftz, sm_80
    shared = {results[name].stages["cubin"].token for name in ("base", *SAME_PTX)}
    assert len(shared) == 1
    (row,) = [row for row in rows if row.token in shared]
    assert row.config == BASE.summary()  # filed by the config that built it first
    # here, equal cubin tokens <=> equal cubin bytes (also against new caches'
    # compiles); equal ptx tokens => equal ptx bytes (not <=>: prec_div and
    # opt are ptx inputs)
    everything = [*results.values(), *fresh.values()]
    for a in everything:
        for b in everything:
            assert (a.stages["cubin"].token == b.stages["cubin"].token) == (a.cubin == b.cubin)
            assert a.stages["ptx"].token != b.stages["ptx"].token or a.ptx == b.ptx


# ---------------------------------------------------------------------------
# (d): across processes, and what explain predicts

IN_NEW_PROCESS = """
import hashlib, json, sys
from gpucache_ext import CompileConfig, KernelCache
from tests import kernels

def show(result):
    return {"outcomes": {s: str(l.outcome) for s, l in result.stages.items()},
            "tiers": {s: l.tier for s, l in result.stages.items()},
            "cutoff": [s for s, l in result.stages.items() if l.cutoff],
            "tokens": {s: l.token for s, l in result.stages.items()},
            "cubin": hashlib.sha256(result.cubin).hexdigest()}

configs = [CompileConfig(sm=86), CompileConfig(sm=86, prec_div=False)]
out = {"new": show(KernelCache().compile(kernels.copy, kernels.COPY_SIG, configs[1]))}
out["explain"], out["disk"] = [], []
for config in configs:  # each in a cache of its own: nothing in memory
    cache = KernelCache(directory=sys.argv[1])
    predicted = cache.explain(kernels.copy, kernels.COPY_SIG, config).outcomes
    out["explain"].append({s: str(o) for s, o in predicted.items()})
    out["disk"].append(show(cache.compile(kernels.copy, kernels.COPY_SIG, config)))
print(json.dumps(out))
"""


@pytest.mark.slow  # a new interpreter
def test_a_new_process_compiles_the_same_and_hits_both_configs_from_disk(tmp_path):
    cache = KernelCache(directory=tmp_path)
    first = copy(cache, BASE)
    cut = copy(cache, SAME_PTX["prec_div"])
    assert cut.stages["cubin"].cutoff
    out = run_python(IN_NEW_PROCESS, tmp_path, json_line=True)
    # a new process, no disk: the bytes and tokens the cutoff served
    assert out["new"]["cubin"] == hashlib.sha256(cut.cubin).hexdigest()
    assert out["new"]["tokens"] == {s: layer.token for s, layer in cut.stages.items()}
    assert out["new"]["cutoff"] == []
    # the same folder: explain predicts hits for both, and both are full hits
    # from disk (the chain runs through the digests the entries store)
    for predicted, got, want in zip(out["explain"], out["disk"], (first, cut)):
        assert predicted == {"typing": "not needed", "llvm": "hit", "ptx": "hit", "cubin": "hit"}
        assert got["outcomes"] == predicted
        assert [got["tiers"][s] for s in ("llvm", "ptx", "cubin")] == ["disk"] * 3
        assert got["cutoff"] == [] and got["cubin"] == hashlib.sha256(want.cubin).hexdigest()
        assert got["tokens"] == {s: layer.token for s, layer in want.stages.items()}


def test_explain_before_a_cutoff_says_it_may_be_reused(tmp_path):
    copy(KernelCache(directory=tmp_path), BASE)
    cache = KernelCache(directory=tmp_path)  # a new session: the disk entries only
    # llvm misses: where only the upstream differs, the stage may be reused ...
    lineinfo = cache.explain(kernels.copy, kernels.COPY_SIG, BASE.replace(lineinfo=True))
    assert lineinfo.outcomes["llvm"] is lineinfo.outcomes["ptx"] is lineinfo.outcomes["cubin"] is Outcome.MISS
    assert lineinfo["ptx"] == ("llvm input changed", "reused if llvm rebuilds to the same bytes")
    assert lineinfo["cubin"] == ("ptx input changed", "reused if ptx rebuilds to the same bytes")
    assert lineinfo.reused_if == {"ptx": "llvm", "cubin": "ptx"}
    # ... and where its own inputs change too, it will not be
    fast = cache.explain(kernels.copy, kernels.COPY_SIG, BASE.replace(fastmath=True))
    assert "fastmath False -> True" in fast["ptx"]
    assert not any(reason.startswith("reused if") for reason in fast["ptx"])
    other_sm = cache.explain(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=80, lineinfo=True))
    assert "sm 86 -> 80" in other_sm["cubin"]
    assert not any(reason.startswith("reused if") for reason in other_sm["cubin"])
    assert "ptx" not in fast.reused_if and "cubin" not in other_sm.reused_if

    # llvm hits (its digest is stored), ptx would be rebuilt: the cubin is a
    # miss unless the PTX comes out the same, which only the rebuild tells
    config = SAME_PTX["prec_div"]
    predicted = cache.explain(kernels.copy, kernels.COPY_SIG, config)
    assert predicted.outcomes == {"typing": Outcome.NOT_NEEDED, "llvm": Outcome.HIT, "ptx": Outcome.MISS,
                                  "cubin": Outcome.MISS}
    assert predicted["ptx"] == ("prec_div True -> False",)
    assert predicted["cubin"] == ("ptx input changed", "reused if ptx rebuilds to the same bytes")
    assert predicted.reused_if == {"cubin": "ptx"}
    result = copy(cache, config)
    assert outcomes(result)["cubin"] is Outcome.HIT and result.stages["cubin"].cutoff
    assert result.stages["cubin"].tier == "disk"


# ---------------------------------------------------------------------------
# (e): the audit


def test_the_audit_of_a_cutoff_hit_passes():
    cache = KernelCache(audit=True, audit_background=False)
    copy(cache, BASE)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AuditWarning)
        result = copy(cache, SAME_PTX["opt2"])
    assert result.stages["cubin"].cutoff
    assert result.audit.state == "passed" and not result.audit.mismatches
    stats = cache.stats()
    assert [stats[s].audits for s in ("llvm", "ptx", "cubin")] == [1, 1, 1]
    assert all(stats[s].audit_mismatches == 0 for s in ("llvm", "ptx", "cubin"))


def stored(cache, stage, result):
    return cache._memory[stage].entries[result.stages[stage].token]


def test_the_audit_flags_a_wrong_stored_digest_that_gives_the_same_bytes():
    """A wrong llvm digest sends ptx to another token; the PTX rebuilt from the
    right IR is the same, but is filed where a fresh compile would not file it."""
    cache = KernelCache(audit=True, audit_background=False)
    first = copy(cache, BASE)
    stored(cache, "llvm", first).digest = "0" * 64
    with pytest.warns(AuditWarning) as caught:
        result = copy(cache, SAME_PTX["prec_div"])
    assert result.stages["llvm"].hit and not result.stages["ptx"].hit
    assert result.ptx == first.ptx and result.cubin == first.cubin
    assert result.audit.state == "mismatch"
    assert [m.stage for m in result.audit.mismatches] == ["ptx"]
    assert "filed under" in result.audit.mismatches[0].difference
    assert result.stages["ptx"].token[:12] in str(caught[0].message)
    assert cache.stats()["ptx"].audit_mismatches == 1
    # the chain was filed again from the fresh compile: sound from here on
    again = copy(cache, SAME_PTX["prec_div"])
    want = copy(KernelCache(), SAME_PTX["prec_div"])
    assert again.hit and again.audit.state == "passed" and tokens(again) == tokens(want)


def test_the_audit_flags_a_stored_digest_that_leads_to_another_kernels_code():
    """copy's llvm entry made to claim axpy's IR digest: its ptx and cubin
    lookups land on axpy's entries, which the audit finds and replaces."""
    cache = KernelCache(audit=True, audit_background=False)
    axpy = cache.compile(kernels.axpy, kernels.AXPY_SIG, BASE)
    first = copy(cache, BASE)
    stored(cache, "llvm", first).digest = stored(cache, "llvm", axpy).digest
    with pytest.warns(AuditWarning):
        result = copy(cache, BASE)
    assert result.stages["ptx"].token == axpy.stages["ptx"].token  # served from axpy's entries ...
    assert result.audit.state == "mismatch"
    assert {m.stage for m in result.audit.mismatches} == {"ptx", "cubin"}
    assert (result.ptx, result.cubin) == (first.ptx, first.cubin)  # ... and replaced by the fresh compile
    assert copy(cache, BASE).cubin == first.cubin


# ---------------------------------------------------------------------------
# (f): entries without a digest


def drop_digest_key(data: bytes, keep_key: bool = False) -> bytes:
    """The entry as the code before the digests wrote it: no digest nor
    upstream in its header (its checksum made again); with `keep_key`, a
    digest of null instead (the cache itself refuses to write either)."""
    header, start = read_header(data)
    if keep_key:
        header["digest"] = None
    else:
        del header["digest"], header["upstream"]
    head = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    body = struct.pack(">I", len(head)) + head + data[start:]
    return MAGIC + hashlib.sha256(body).digest() + body


@pytest.mark.parametrize("how", ["digest None", "no digest key"])
def test_a_disk_entry_without_a_digest_is_a_miss_not_an_error(how, tmp_path):
    first = copy(KernelCache(directory=tmp_path), BASE)
    tier = DiskTier(tmp_path)
    for stage in ("llvm", "ptx", "cubin"):
        token = first.stages[stage].token
        path = tier.path(stage, token)
        path.write_bytes(drop_digest_key(path.read_bytes(), keep_key=how == "digest None"))
        assert read_header(tier.path(stage, token).read_bytes())[0].get("digest") is None
    cache = KernelCache(directory=tmp_path)
    assert cache.explain(kernels.copy, kernels.COPY_SIG, BASE).outcomes["llvm"] is Outcome.MISS
    result = copy(cache, BASE)
    assert outcomes(result) == dict.fromkeys(("typing", "llvm", "ptx", "cubin"), Outcome.MISS)
    assert (result.llvm_ir, result.ptx, result.cubin) == (first.llvm_ir, first.ptx, first.cubin)
    assert tokens(result) == tokens(first)
    assert all(cache.stats()[s].tiers["disk"].corrupt == 1 for s in ("llvm", "ptx", "cubin"))
    # written again, with digests: a new session hits all of it
    assert copy(KernelCache(directory=tmp_path), BASE).hit


def test_the_cache_never_writes_an_entry_without_its_digest(tmp_path):
    first = copy(KernelCache(directory=tmp_path), BASE)
    tier = DiskTier(tmp_path)
    entry = tier.get("cubin", first.stages["cubin"].token)
    with pytest.raises(ValueError, match="needs its content digest"):
        tier.put("cubin", dataclasses.replace(entry, digest=None))


def test_an_llvm_entry_without_a_digest_is_rebuilt_and_the_ptx_after_it_reused(tmp_path):
    first = copy(KernelCache(directory=tmp_path), BASE)
    path = DiskTier(tmp_path).path("llvm", first.stages["llvm"].token)
    path.write_bytes(drop_digest_key(path.read_bytes()))
    result = copy(KernelCache(directory=tmp_path), BASE)
    assert result.stages["llvm"].outcome is Outcome.MISS
    assert result.stages["ptx"].cutoff and result.stages["cubin"].hit
    assert result.cubin == first.cubin


# ---------------------------------------------------------------------------
# (g): verify --recompile


@pytest.mark.slow  # the command, as a subprocess
def test_verify_recompile_matches_entries_including_a_cubin_two_configs_share(tmp_path):
    cache = KernelCache(directory=tmp_path)
    results = [copy(cache, config) for config in (BASE, *SAME_PTX.values(), OTHER_PTX["ftz"])]
    assert [r.stages["cubin"].cutoff for r in results] == [False, True, True, False]
    done = gpucache("--dir", tmp_path, "--json", "verify", "--recompile", timeout=300)
    report = json.loads(done.stdout)["recompiled"]
    # 4 ptx entries (one per config) and 2 cubins (base's, shared by 3 configs; ftz's)
    assert report["counts"] == {"match": 6, "mismatch": 0, "tainted": 0, "skipped": 1, "failed": 0}
    assert report["entries"] == []
    assert copy(KernelCache(directory=tmp_path), SAME_PTX["opt2"]).hit  # nothing was evicted


# ---------------------------------------------------------------------------
# (h): built_from follows the digests


def test_built_from_finds_the_cubins_through_the_digest_chain():
    cache = KernelCache()
    results = {name: copy(cache, config) for name, config in CONFIGS.items()}
    base = results["base"]
    assert len({r.stages["llvm"].token for r in results.values()}) == 1  # lowering reads no target

    def cubins(stage, result):
        found = queries.built_from(cache, stage, result.stages[stage].token, base.kernel)
        assert all(resources["registers"] > 0 for _, resources in found)
        return {info.token for info, _ in found}

    assert cubins("llvm", base) == {r.stages["cubin"].token for r in results.values()}
    # a ptx entry rebuilt to the same bytes leads to the cubin it did not build
    for name in ("base", *SAME_PTX):
        assert cubins("ptx", results[name]) == {base.stages["cubin"].token}
    assert cubins("ptx", results["ftz"]) == {results["ftz"].stages["cubin"].token}
