"""Audits compare like with like (issue 32, item 3).

An audit recompiles a hit from the snapshot its lookup hashed.  What that
snapshot does not hold is read again at audit time: numba's extension tables
(an ``@overload`` in a user module), the size and time of the source files
debug info names (ptxas writes them into the cubin), the libraries a kernel
reads through their modules.  When one of those changed between the hit and
its audit (a module edited and reloaded, a file saved, a library
reinstalled), the fresh compile is of other inputs: the audit says which
stages it could not audit and why, warns of nothing and evicts nothing.  A
wrong entry is still flagged wherever the inputs are the hit's.

Each scenario runs in real processes sharing a disk cache (a store process,
then a process that hits and is audited), so that the edits and reloads
never touch this test process's numba tables.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pytest

from gpucache_ext import AuditWarning, CompileConfig, KernelCache
from gpucache_ext.store.disk import DiskTier

from .helpers import gpucache, run_python

SM86 = CompileConfig(sm=86)

# A user module beside the "notebook" (the test's folder): each variant in
# two versions, the second edited as a user would.
MODULES = {
    # an @overload: numba keeps it in its process-wide tables, not in the snapshot
    "overload": ("from numba.extending import overload\n\ndef scale(x):\n    pass\n\nK = {k}\n\n"
                 "@overload(scale)\ndef _scale(x):\n    def impl(x):\n        return x * K\n    return impl\n"),
    # a device function with line info: ptxas records its file's size and time
    "lineinfo": ("from numba import cuda\n\nK = {k}\n\n@cuda.jit(device=True, lineinfo=True)\n"
                 "def scale(x):\n    return x * K\n"),
}

SCRIPT = """
import dataclasses, importlib, json, pathlib, sys, warnings
folder, phase, variant, edit = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
MODULES = json.loads((folder / "modules.json").read_text())
sys.path.insert(0, str(folder / "site-packages"))  # (a library's folder: named like one)
sys.path.insert(0, str(folder))

def write_library(version, factor):
    site = folder / "site-packages"
    for old in site.glob("fakelib-*.dist-info"):
        for item in old.iterdir():
            item.unlink()
        old.rmdir()
    code = ("from numba import cuda\\n__version__ = %r\\n\\n@cuda.jit(device=True)\\n"
            "def scale(x):\\n    return x * %s\\n" % (version, factor)).encode()
    (site / "fakelib").mkdir(parents=True, exist_ok=True)
    (site / "fakelib" / "__init__.py").write_bytes(code)
    info = site / f"fakelib-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\\nName: fakelib\\nVersion: {version}\\n")
    import base64, hashlib
    hashed = base64.urlsafe_b64encode(hashlib.sha256(code).digest()).rstrip(b"=").decode()
    (info / "RECORD").write_text(f"fakelib/__init__.py,sha256={hashed},{len(code)}\\n"
                                 f"fakelib-{version}.dist-info/METADATA,,\\nfakelib-{version}.dist-info/RECORD,,\\n")

def write_module(k, lead=""):
    (folder / "helpers_mod.py").write_text(lead + MODULES[variant].format(k=k))

if phase == "store":
    if variant == "library":
        write_library("1.0", "2.0")
    else:
        write_module("2.0")
importlib.invalidate_caches()
if variant == "library":
    import fakelib as helpers_mod
else:
    import helpers_mod
from gpucache_ext import CompileConfig, KernelCache

def kernel(r, x):
    r[0] = helpers_mod.scale(x[0])

def donor(r, x):
    r[0] = helpers_mod.scale(x[0]) + 1.0

SIG, CONFIG = "void(float32[:], float32[:])", CompileConfig(sm=86, lineinfo=variant == "lineinfo")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    cache = KernelCache(directory=folder / "cache", audit="off" if phase == "store" else None)
    result = cache.compile(kernel, SIG, CONFIG)
    out = {"tokens": {s: layer.token for s, layer in result.stages.items()},
           "tiers": {s: layer.tier for s, layer in result.stages.items()}, "ptx": result.ptx}
    if phase == "store":
        out["donor"] = {s: layer.token for s, layer in cache.compile(donor, SIG, CONFIG).stages.items()}
    if edit == "module":  # between the hit and its (background) audit: saved, then reloaded
        write_module("7.0", lead="# edited after the hit\\n")
        importlib.reload(helpers_mod)
    elif edit == "library":  # the library reinstalled in another version, then reloaded
        write_library("2.0", "3.0")
        importlib.invalidate_caches()
        importlib.reload(helpers_mod)
    cache.audit_wait()
audit = result.audit
stats = cache.stats()
# (read with getattr: the same script reports what a cache without these records did)
out.update(audit=None if audit is None else {
    "state": audit.state, "summary": audit.summary() if hasattr(audit, "summary") else audit.state,
    "not_audited": getattr(audit, "not_audited", None), "audited": list(getattr(audit, "audited", ())),
    "mismatches": [m.stage for m in audit.mismatches]},
    audits={s: stats[s].audits for s in ("llvm", "ptx", "cubin")},
    not_possible=[[n.stage, n.reason] for n in getattr(cache, "audits_not_possible", list)()],
    warnings=[f"{w.category.__name__}: {w.message}" for w in caught if issubclass(w.category, Warning)
              and "audit" in str(w.message)])
print(json.dumps(out))
"""


def run(folder, phase, variant, edit="none"):
    return run_python(SCRIPT, folder, phase, variant, edit, json_line=True)


def prepare(folder, variant):
    import json

    (folder / "site-packages").mkdir()
    (folder / "modules.json").write_text(json.dumps(MODULES))
    return run(folder, "store", variant)


def assert_quiet(found):
    assert not found["warnings"], found["warnings"]
    assert not found["audit"]["mismatches"]


def plant(directory, stage, victim, donor):
    """Overwrite `victim`'s entry of `stage` with `donor`'s artifact, keeping
    the victim's key and components (see tests/test_audit.py)."""
    tier = DiskTier(directory)
    good, wrong = tier.get(stage, victim[stage]), tier.get(stage, donor[stage])
    tier.put(stage, dataclasses.replace(good, artifact=wrong.artifact, nbytes=wrong.artifact.nbytes))
    assert tier.get(stage, victim[stage]).artifact == wrong.artifact


# ---------------------------------------------------------------------------
# Quick: an audit whose snapshot matches the live state still compares


def test_a_hit_whose_state_is_unchanged_is_audited_in_full(tmp_path):
    """A kernel reading library modules (math, numpy: bound live, keyed by
    version) is compared stage by stage: nothing is wrongly declared changed."""
    def kernel(r, x):
        r[0] = x[0] * math.pi + np.float32(np.e)

    sig = "void(float32[:], float32[:])"
    KernelCache(directory=tmp_path, audit=False).compile(kernel, sig, SM86)
    cache = KernelCache(directory=tmp_path)  # a new process's cache, default policy
    with warnings.catch_warnings():
        warnings.simplefilter("error", AuditWarning)
        result = cache.compile(kernel, sig, SM86)
        assert result.stages["cubin"].tier == "disk"
        cache.audit_wait()
    assert result.audit.state == "passed" and result.audit.not_audited == {}
    assert result.audit.audited == ("llvm", "ptx", "cubin")
    assert result.audit.summary() == "passed"
    stats = cache.stats()
    assert [stats[s].audits for s in ("llvm", "ptx", "cubin")] == [1, 1, 1]
    assert cache.audits_not_possible() == [] and cache.audit_not_possible_count == 0


# ---------------------------------------------------------------------------
# Edited between the hit and its background audit


@pytest.mark.slow
def test_an_overload_module_edited_and_reloaded_before_the_audit_is_not_audited(tmp_path):
    """The @overload's module is reloaded with another K between the hit and
    its audit: numba's tables now hold the new one, which the snapshot does
    not: nothing can be compiled like with like, so nothing is compared,
    nothing is evicted, and the outcome says why."""
    stored = prepare(tmp_path, "overload")
    found = run(tmp_path, "hit", "overload", "module")
    assert found["tiers"]["cubin"] == "disk"
    assert_quiet(found)
    assert found["audit"]["state"] == "not audited"
    assert found["audit"]["summary"].startswith("not audited: numba extensions changed since the hit")
    assert set(found["audit"]["not_audited"]) == {"llvm", "ptx", "cubin"}
    assert found["audits"] == {"llvm": 0, "ptx": 0, "cubin": 0}
    assert [stage for stage, _ in found["not_possible"]] == ["llvm", "ptx", "cubin"]
    # the entry was kept: the same inputs (the module as it was) hit again
    (tmp_path / "helpers_mod.py").write_text(MODULES["overload"].format(k="2.0"))
    again = run(tmp_path, "hit", "overload")
    assert again["tiers"]["cubin"] == "disk" and again["tokens"] == stored["tokens"]
    assert again["audit"]["state"] == "passed" and again["audit"]["audited"] == ["llvm", "ptx", "cubin"]


@pytest.mark.slow
def test_a_module_file_saved_before_the_audit_leaves_the_cubin_unaudited(tmp_path):
    """With line info, ptxas writes the size and time of each source file into
    the cubin: the file saved after the hit gives a fresh cubin of other
    inputs.  llvm and ptx (from the snapshot) are still compared; the cubin
    is not, and the outcome names the file."""
    stored = prepare(tmp_path, "lineinfo")
    found = run(tmp_path, "hit", "lineinfo", "module")
    assert found["tiers"]["cubin"] == "disk"
    assert_quiet(found)
    assert found["audit"]["state"] == "passed"
    assert found["audit"]["audited"] == ["llvm", "ptx"]
    assert found["audit"]["not_audited"] == {"cubin": "helpers_mod.py changed since the hit"}
    assert found["audits"] == {"llvm": 1, "ptx": 1, "cubin": 0}
    assert found["not_possible"] == [["cubin", "helpers_mod.py changed since the hit"]]
    # kept: a process that reads the file as it was hashed hits it
    (tmp_path / "helpers_mod.py").write_text(MODULES["lineinfo"].format(k="2.0"))
    assert run(tmp_path, "hit", "lineinfo")["tokens"]["llvm"] == stored["tokens"]["llvm"]


@pytest.mark.slow
def test_a_module_edited_between_processes_misses_and_its_audit_is_clean(tmp_path):
    """Edited between the processes (a comment added at its end: the same
    code and lines, another file size): the second process hits llvm and ptx,
    builds the cubin again for the file as it is now, and the audit of its
    hits compares every stage, cleanly."""
    stored = prepare(tmp_path, "lineinfo")
    with open(tmp_path / "helpers_mod.py", "a") as file:
        file.write("# edited between the processes\n")
    found = run(tmp_path, "hit", "lineinfo")
    assert found["tiers"] == {"typing": None, "llvm": "disk", "ptx": "disk", "cubin": None}
    assert found["tokens"]["cubin"] != stored["tokens"]["cubin"]
    assert_quiet(found)
    assert found["audit"]["state"] == "passed" and found["audit"]["not_audited"] == {}
    assert found["audits"] == {"llvm": 1, "ptx": 1, "cubin": 1}


@pytest.mark.slow
def test_a_library_reinstalled_in_another_version_before_the_audit_is_not_audited(tmp_path):
    """A library (a package in a site-packages folder, with its dist-info) is
    reinstalled as 2.0 with other code and reloaded between the hit and its
    audit: the snapshot binds the library's module, whose version is no
    longer the one hashed."""
    prepare(tmp_path, "library")
    found = run(tmp_path, "hit", "library", "library")
    assert found["tiers"]["cubin"] == "disk"
    assert_quiet(found)
    assert found["audit"]["state"] == "not audited"
    assert found["audit"]["summary"] == "not audited: library fakelib changed since the hit (now fakelib 2.0)"
    assert found["audits"] == {"llvm": 0, "ptx": 0, "cubin": 0}


# ---------------------------------------------------------------------------
# A wrong entry is still flagged where the inputs are the hit's


@pytest.mark.slow
@pytest.mark.parametrize("stage, edit", [("cubin", "none"), ("ptx", "module")])
def test_a_planted_wrong_entry_is_still_flagged_and_evicted(tmp_path, stage, edit):
    """A valid entry holding another kernel's artifact is a mismatch; with the
    module saved after the hit, the ptx (from the snapshot) is still
    compared and flagged, while the cubin (built from the file as saved) is
    left unaudited rather than flagged."""
    stored = prepare(tmp_path, "lineinfo")
    plant(tmp_path / "cache", stage, stored["tokens"], stored["donor"])
    found = run(tmp_path, "hit", "lineinfo", edit)
    assert found["audit"]["state"] == "mismatch"
    assert found["audit"]["mismatches"] == [stage]
    assert [w for w in found["warnings"] if w.startswith("AuditWarning")], found["warnings"]
    if edit == "module":
        assert found["audit"]["not_audited"] == {"cubin": "helpers_mod.py changed since the hit"}
    # evicted and replaced: a process with the hashed inputs gets the right artifacts
    if edit == "module":
        (tmp_path / "helpers_mod.py").write_text(MODULES["lineinfo"].format(k="2.0"))
    again = run(tmp_path, "hit", "lineinfo")
    assert again["tiers"]["ptx"] == "disk" and again["ptx"] == stored["ptx"]
    assert again["audit"]["state"] == "passed" and not again["warnings"]


@pytest.mark.slow
def test_verify_recompile_leaves_a_cubin_whose_source_file_changed_unaudited(tmp_path):
    """``gpucache verify --recompile`` links a stored cubin again from its
    ptx entry: with line info, ptxas would record the file as it is now, so
    a file saved since the entry was built makes no mismatch (and no
    eviction); an untouched one is still compared."""
    import json

    prepare(tmp_path, "lineinfo")
    clean = json.loads(gpucache("verify", "--recompile", "--json", "--dir", tmp_path / "cache").stdout)
    assert clean["recompiled"]["counts"]["match"] == 4, clean["recompiled"]
    with open(tmp_path / "helpers_mod.py", "a") as file:
        file.write("# saved after the entries were built\n")
    done = gpucache("verify", "--recompile", "--json", "--dir", tmp_path / "cache")
    counts = json.loads(done.stdout)["recompiled"]["counts"]
    assert counts["mismatch"] == 0 and counts["match"] == 2 and counts["skipped"] == 4, counts
    assert run(tmp_path, "hit", "lineinfo")["tiers"]["ptx"] == "disk"  # nothing evicted
