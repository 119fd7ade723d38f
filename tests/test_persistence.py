"""The disk tier, with real files and real processes: persistence across
processes, corruption, kills mid-write, concurrent writers, read-only and
full disks."""

import importlib.util
import errno
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from gpucache_ext import CompileConfig, KernelCache
from gpucache_ext.store.codec import FORMAT_VERSION, decode
from gpucache_ext.store.disk import DiskTier

from . import kernels
from .helpers import CUDA_MAJOR, run_python

ROOT = Path(__file__).resolve().parent.parent


def sha(data) -> str:
    return hashlib.sha256(data if isinstance(data, bytes) else data.encode()).hexdigest()


def fingerprint(result):
    return {"llvm": sha(result.llvm_ir), "ptx": sha(result.ptx), "cubin": sha(result.cubin)}


def entry_files(directory):
    return sorted(Path(directory).glob("v1/*/*/*.entry"))


COMPILE_IN_NEW_PROCESS = """
import json, sys, hashlib
from gpucache_ext import CompileConfig, KernelCache
from tests import kernels
cache = KernelCache(directory=sys.argv[1])
result = cache.compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=int(sys.argv[2])))
print(json.dumps({
    "layers": {s: [l.hit, l.tier, str(l.outcome)] for s, l in result.stages.items()},
    "cubin": hashlib.sha256(result.cubin).hexdigest(),
}))
"""


@pytest.mark.slow
def test_a_new_process_finds_the_entries_of_an_earlier_one(tmp_path):
    first = json.loads(run_python(COMPILE_IN_NEW_PROCESS, tmp_path, 86))
    assert first["layers"]["cubin"] == [False, None, "miss"]
    second = json.loads(run_python(COMPILE_IN_NEW_PROCESS, tmp_path, 86))
    assert second["layers"] == {"typing": [True, None, "not needed"], "llvm": [True, "disk", "hit"],
                                "ptx": [True, "disk", "hit"], "cubin": [True, "disk", "hit"]}
    assert second["cubin"] == first["cubin"]
    # another target in a third process reuses the stored NVVM IR
    third = json.loads(run_python(COMPILE_IN_NEW_PROCESS, tmp_path, 80))
    assert third["layers"]["llvm"] == [True, "disk", "hit"] and third["layers"]["ptx"][0] is False


@pytest.mark.smoke
def test_a_new_process_hits_what_this_one_wrote(tmp_path):
    """The quick sample of the test above: entries written here, all read from disk by one new process."""
    here = KernelCache(directory=tmp_path).compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=86))
    there = json.loads(run_python(COMPILE_IN_NEW_PROCESS, tmp_path, 86))
    assert there["layers"] == {"typing": [True, None, "not needed"], "llvm": [True, "disk", "hit"],
                               "ptx": [True, "disk", "hit"], "cubin": [True, "disk", "hit"]}
    assert there["cubin"] == sha(here.cubin)


def test_hits_fill_memory_and_entries_list_their_tiers(tmp_path):
    KernelCache(directory=tmp_path).compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=80))
    cache = KernelCache(directory=tmp_path)
    cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=80))
    again = cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=80))
    assert again.stages["cubin"].tier == "memory"
    stats = cache.stats()["cubin"].tiers
    assert stats["disk"].hits == 1 and stats["memory"].hits == 1 and stats["disk"].entries == 1
    row = cache.entries(stage="cubin")[0]
    assert set(row.tiers) == {"memory", "disk"} and row.kernel == "tests.kernels.copy"
    assert cache.evict("cubin", row.token)
    assert entry_files(tmp_path) and not list(Path(tmp_path).glob(f"v1/cubin/*/{row.token}.entry"))


def _many_kernels(count):
    """`count` distinct kernels (different constants), as a notebook would make them."""
    made = []
    for i in range(count):
        namespace = {"__name__": "__main__"}
        exec(textwrap.dedent(f"""
            from numba import cuda
            def k{i}(r, x):
                j = cuda.grid(1)
                if j < r.size:
                    r[j] = x[j] * {i + 1}.0
        """), namespace)
        made.append(namespace[f"k{i}"])
    return made


@pytest.mark.slow
def test_corrupted_entries_are_misses_recompiled_and_rewritten(tmp_path):
    funcs = _many_kernels(100)
    config = CompileConfig(sm=86)
    writer = KernelCache(directory=tmp_path)
    expected = [fingerprint(writer.compile(f, kernels.COPY_SIG, config)) for f in funcs]
    files = entry_files(tmp_path)
    assert len(files) == 300
    rng = random.Random(7)
    damage = {}
    for index, path in enumerate(files):
        data = bytearray(path.read_bytes())
        kind = ("truncate", "flip", "garbage")[index % 3]
        if kind == "truncate":
            data = data[: rng.randrange(0, len(data))]
        elif kind == "flip":
            bit = rng.randrange(len(data) * 8)
            data[bit // 8] ^= 1 << (bit % 8)
        else:
            data = bytearray(rng.randbytes(rng.randrange(1, 4096)))
        path.write_bytes(bytes(data))
        damage[path] = kind

    reader = KernelCache(directory=tmp_path)
    results = [fingerprint(reader.compile(f, kernels.COPY_SIG, config)) for f in funcs]
    assert results == expected
    corrupt = sum(reader.stats()[s].tiers["disk"].corrupt for s in ("llvm", "ptx", "cubin"))
    assert corrupt == 300  # every damaged file was detected ...
    assert DiskTier(tmp_path).verify() == []  # ... and rewritten whole
    again = KernelCache(directory=tmp_path)
    assert all(again.compile(f, kernels.COPY_SIG, config).hit for f in funcs[:5])


WRITE_FOREVER = """
import sys, time
from gpucache_ext import CompileConfig, KernelCache
from gpucache_ext.store.codec import content_digest
from gpucache_ext.store.disk import DiskTier
from gpucache_ext.backends.numba_cuda.stages import CubinArtifact
from gpucache_ext.store.tiers import Entry
from gpucache_ext.keys.tokens import component, make_token
tier = DiskTier(sys.argv[1], max_bytes=None)
blob = bytes(range(256)) * (64 * 1024)   # 16 MiB: long enough to be killed mid-write
artifact = CubinArtifact(blob, "log", None, "k")
digest = content_digest("cubin", artifact)  # (an entry without one does not decode)
i = 0
print("ready", flush=True)
while True:
    token = make_token("cubin", {"n": component(i)})
    entry = Entry(token.hex, "k", artifact, token.components, len(blob), 0.1, digest=digest)
    tier.put("cubin", entry)
    i += 1
"""


@pytest.mark.slow
def test_killing_a_writer_never_leaves_a_torn_entry(tmp_path):
    rng = random.Random(3)
    for _ in range(15):
        proc = subprocess.Popen([sys.executable, "-c", WRITE_FOREVER, str(tmp_path)], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.3))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    files = entry_files(tmp_path)
    assert files, "the writer never finished an entry"
    for path in files:  # every visible entry is whole
        decode(path.read_bytes(), "cubin", path.name[:-len(".entry")])
    tier = DiskTier(tmp_path)
    assert tier.verify(fix=True) == []
    assert not list(Path(tmp_path).glob("v1/*/*/.tmp-*"))  # leftovers of killed writers removed


CONCURRENT_WORKER = """
import json, sys, hashlib
from gpucache_ext import CompileConfig, KernelCache
from tests import kernels
order = json.loads(sys.argv[2])
cache = KernelCache(directory=sys.argv[1])
out = {}
for name, sm, opt in order:
    result = cache.compile(getattr(kernels, name), getattr(kernels, name.upper() + "_SIG"),
                           CompileConfig(sm=sm, opt=opt))
    out[f"{name}-{sm}-{opt}"] = {s: hashlib.sha256(x if isinstance(x, bytes) else x.encode()).hexdigest()
                                 for s, x in (("llvm", result.llvm_ir), ("ptx", result.ptx), ("cubin", result.cubin))}
print(json.dumps(out))
"""


@pytest.mark.slow
def test_four_processes_share_one_directory(tmp_path):
    jobs = [(name, sm, opt) for name in ("axpy", "copy") for sm in (75, 80, 86) for opt in (0, 3)]
    expected = {f"{n}-{sm}-{opt}": fingerprint(KernelCache().compile(
        getattr(kernels, n), getattr(kernels, n.upper() + "_SIG"), CompileConfig(sm=sm, opt=opt)))
        for n, sm, opt in jobs}
    procs = []
    for worker in range(4):
        order = jobs[worker * 3:] + jobs[:worker * 3]
        procs.append(subprocess.Popen([sys.executable, "-c", CONCURRENT_WORKER, str(tmp_path),
                                       json.dumps(order)], cwd=ROOT, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        assert json.loads(out) == expected
    assert DiskTier(tmp_path).verify() == []


@pytest.fixture
def small_mount(tmp_path):
    """A 64 KiB tmpfs where the machine allows mounting one, else None."""
    mount_point = tmp_path / "mnt"
    mount_point.mkdir()
    if shutil.which("mount") is None:
        yield None
        return
    # (mode 700: a tmpfs is otherwise writable by everyone, which the disk tier warns about)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=700", "tmpfs", str(mount_point)],
                          capture_output=True)
    if done.returncode != 0:
        yield None
        return
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


def _inject_write_error(monkeypatch, code):
    from gpucache_ext.store import fsutil  # (the disk tier's writes go through fsutil.write_atomically)

    def failing(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(fsutil.tempfile, "mkstemp", failing)


def _compiles_keep_working(directory):
    cache = KernelCache(directory=directory)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = [cache.compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=sm, opt=opt))
                   for sm in (75, 80, 86) for opt in (0, 3)]
        again = cache.compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=86))
    fresh = KernelCache().compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=86))
    assert again.hit and again.cubin == fresh.cubin == results[-1].cubin
    messages = [str(w.message) for w in caught if "cannot write to the disk cache" in str(w.message)]
    assert len(messages) == 1, messages  # one warning, then memory only
    return messages[0]


def test_a_full_disk_warns_once_and_goes_on_in_memory(small_mount, monkeypatch, tmp_path):
    if small_mount is None:  # no tmpfs here: inject the error a full disk gives
        _inject_write_error(monkeypatch, errno.ENOSPC)
        directory = tmp_path / "full"
    else:
        directory = small_mount
    message = _compiles_keep_working(directory)
    assert "No space left on device" in message or "ENOSPC" in message


def test_a_read_only_directory_warns_once_and_goes_on_in_memory(small_mount, monkeypatch, tmp_path):
    if small_mount is None:
        _inject_write_error(monkeypatch, errno.EROFS)
        directory = tmp_path / "read-only"
    else:
        subprocess.run(["mount", "-o", "remount,ro", str(small_mount)], check=True)
        directory = small_mount
    message = _compiles_keep_working(directory)
    assert "Read-only file system" in message


def test_size_cap_evicts_least_recently_used(tmp_path):
    funcs = _many_kernels(12)
    cache = KernelCache(directory=tmp_path, max_disk_bytes=60_000)
    for f in funcs:
        cache.compile(f, kernels.COPY_SIG, CompileConfig(sm=86))
    total = sum(p.stat().st_size for p in entry_files(tmp_path))
    assert total <= 60_000
    assert len(entry_files(tmp_path)) < 36
    # the newest kernel survived the evictions
    newest = KernelCache(directory=tmp_path).compile(funcs[-1], kernels.COPY_SIG, CompileConfig(sm=86))
    assert newest.stages["cubin"].tier == "disk"


def test_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUCACHE_DIR", str(tmp_path / "env-dir"))
    monkeypatch.setenv("GPUCACHE_MAX_BYTES", "123456")
    cache = KernelCache.from_environment()
    assert [t.name for t in cache.tiers] == ["disk"]
    assert cache.tiers[0].directory == tmp_path / "env-dir" and cache.tiers[0].max_bytes == 123456
    assert KernelCache.from_environment(directory=tmp_path / "given").tiers[0].directory == tmp_path / "given"
    monkeypatch.setenv("GPUCACHE_DIR", "off")
    assert KernelCache.from_environment().tiers == []
    monkeypatch.setenv("GPUCACHE_MAX_BYTES", "lots")
    with pytest.raises(ValueError, match="GPUCACHE_MAX_BYTES"):
        KernelCache.from_environment()


def test_per_target_variants_survive_on_disk(tmp_path):
    sig = kernels.TANH_SIG
    KernelCache(directory=tmp_path).compile(kernels.tanh_kernel, sig, CompileConfig(sm=75, fastmath=True))
    later = KernelCache(directory=tmp_path)  # empty memory: everything comes from disk
    same_answers = later.compile(kernels.tanh_kernel, sig, CompileConfig(sm=86, fastmath=True))
    assert same_answers.stages["llvm"].tier == "disk" and "tanh.approx" in same_answers.llvm_ir
    if CUDA_MAJOR >= 13:
        return  # (what follows needs a target before sm_75: CUDA 13 builds none)
    older = later.compile(kernels.tanh_kernel, sig, CompileConfig(sm=70, fastmath=True))
    assert not older.stages["llvm"].hit and "tanh.approx" not in older.llvm_ir
    fresh = KernelCache().compile(kernels.tanh_kernel, sig, CompileConfig(sm=70, fastmath=True))
    assert older.llvm_ir == fresh.llvm_ir


def test_rewriting_an_entry_counts_its_bytes_once(tmp_path):
    cache = KernelCache(directory=tmp_path)
    sizes = []
    for _ in range(3):  # a forced compile rewrites every entry in place
        cache.compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=86), force=True)
        on_disk = {stage: sum(p.stat().st_size for p in Path(tmp_path).glob(f"v1/{stage}/*/*.entry"))
                   for stage in ("llvm", "ptx", "cubin")}
        counted = {stage: cache.stats()[stage].tiers["disk"].bytes for stage in on_disk}
        assert counted == on_disk
        sizes.append(sum(on_disk.values()))
    # not growing with each rewrite (sizes differ only by header text: timings, "why built")
    assert max(sizes) < 1.05 * min(sizes)


def test_a_directory_in_place_of_an_entry_costs_that_entry_only(tmp_path, caplog):
    """An entry file replaced by a directory of the same name (by a user, a
    sync tool, a bad restore): the entry is a miss, rebuilt, and its write is
    skipped (a directory cannot be replaced by a file atomically, and is not
    ours to delete); every other entry is still written, in this process too."""
    config = CompileConfig(sm=86)
    first = KernelCache(directory=tmp_path).compile(kernels.copy, kernels.COPY_SIG, config)
    token = first.stages["cubin"].token
    blocked = DiskTier(tmp_path).path("cubin", token)
    blocked.unlink()
    blocked.mkdir()
    (blocked / "notes.txt").write_text("not the cache's")

    cache = KernelCache(directory=tmp_path)
    tier = cache.tiers[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = cache.compile(kernels.copy, kernels.COPY_SIG, config)
        other = cache.compile(kernels.axpy, kernels.AXPY_SIG, config)
    assert not [w for w in caught if "cannot write to the disk cache" in str(w.message)]
    assert again.stages["ptx"].tier == "disk" and not again.stages["cubin"].hit  # one miss, rebuilt
    assert again.cubin == first.cubin
    assert tier.writable and tier.unwritable["cubin"] == 1 and tier.stats("cubin")["unwritable"] == 1
    assert cache.stats()["cubin"].tiers["disk"].unwritable == 1
    assert "could not write the disk cache entry" in caplog.text and token in caplog.text
    assert blocked.is_dir() and (blocked / "notes.txt").exists()  # left alone
    for stage in ("llvm", "ptx", "cubin"):  # the next kernel's entries reach the disk
        assert tier.path(stage, other.stages[stage].token).is_file()

    later = KernelCache(directory=tmp_path)  # a new process: the other kernel from disk, the blocked one a miss
    assert later.compile(kernels.axpy, kernels.AXPY_SIG, config).stages["cubin"].tier == "disk"
    assert not later.compile(kernels.copy, kernels.COPY_SIG, config).stages["cubin"].hit
    # only files are entries: the directory is not counted, listed, verified, evicted or cleared
    assert tier.get("cubin", token) is None
    assert tier.stats("cubin")["entries"] == len(list(Path(tmp_path).glob("v1/cubin/*/*.entry"))) - 1
    assert token not in {e.token for e in tier.entries("cubin")}
    assert tier.verify() == [] and tier.delete("cubin", token) is False
    tier.prune(0)
    tier.clear("cubin")
    assert blocked.is_dir() and entry_files(tmp_path) == [blocked]


def test_only_folder_wide_write_errors_stop_the_disk_tier(tmp_path, monkeypatch):
    """A file system error (full, read-only, over quota) or a folder that cannot
    be written stops writing; an error about one entry's path does not."""
    import gpucache_ext.store.disk as disk

    tier = DiskTier(tmp_path)
    (tmp_path / "v1" / "cubin").mkdir(parents=True)
    assert tier._one_entry("cubin", IsADirectoryError(errno.EISDIR, "Is a directory"))
    assert tier._one_entry("cubin", PermissionError(errno.EPERM, "Operation not permitted"))
    assert tier._one_entry("cubin", NotADirectoryError(errno.ENOTDIR, "Not a directory"))  # a shard that is a file
    for code in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
        assert not tier._one_entry("cubin", OSError(code, os.strerror(code)))
    assert not tier._one_entry("ptx", PermissionError(errno.EACCES, "Permission denied"))  # no ptx folder
    monkeypatch.setattr(disk.os, "access", lambda path, mode: False)  # the stage's folder not writable
    assert not tier._one_entry("cubin", PermissionError(errno.EACCES, "Permission denied"))


def test_a_miss_after_a_clear_says_so_in_a_new_process_too(tmp_path):
    """The disk tier logs what it drops: after `clear ptx` and a restart,
    the ptx miss says the entry was cleared, not that the kernel is new;
    an evicted entry says evicted; a line that does not read is passed over."""
    config = CompileConfig(sm=80)
    cache = KernelCache(directory=tmp_path)
    first = cache.compile(kernels.axpy, kernels.AXPY_SIG, config)
    cache.clear("ptx")
    cache.evict("cubin", first.stages["cubin"].token)
    with open(tmp_path / f"v{FORMAT_VERSION}" / "dropped.jsonl", "a") as log:
        log.write("not json\n" + json.dumps({"stage": "ptx", "token": "ab" * 32, "why": "<script>"}) + "\n")
    code = f"""
        import json
        from gpucache_ext import CompileConfig, KernelCache
        from tests import kernels
        result = KernelCache(directory={str(tmp_path)!r}).compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=80))
        print(json.dumps({{stage: list(layer.reasons) for stage, layer in result.stages.items()}}))
    """
    reasons = run_python(code, json_line=True)
    assert reasons["typing"] == [] and reasons["llvm"] == []  # (llvm hit on disk: typing not needed)
    assert len(reasons["ptx"]) == 1 and re.fullmatch(r"entry was cleared from the disk tier \S+ ago",
                                                     reasons["ptx"][0]), reasons
    assert len(reasons["cubin"]) == 1 and reasons["cubin"][0].startswith("entry was evicted from the disk tier")


def test_what_an_entry_persists_is_declared_once_and_round_trips(tmp_path):
    """Every field of an `Entry` is in its stored header (`HEADER_FIELDS`) or
    travels in its own encoding; each persisted artifact's `state` rebuilds
    to an equal artifact; an entry read back from disk equals what was filed."""
    import dataclasses

    from gpucache_ext.keys.stagespec import PERSISTENT_STAGES
    from gpucache_ext.store.codec import artifact_class, encode
    from gpucache_ext.store.tiers import HEADER_FIELDS, Entry

    own_encodings = {"artifact", "components", "nbytes", "variants", "tools"}  # (tools: the header's toolchain)
    assert {f.name for f in dataclasses.fields(Entry)} == {name for name, _ in HEADER_FIELDS} | own_encodings
    cache = KernelCache()
    cache.compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=86))
    cache.compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=86, lto=True))
    cache.compile_fatbin(kernels.axpy, kernels.AXPY_SIG, CompileConfig(), sms=(80, 86))
    seen = set()
    persisted = {stage: artifact_class(stage) for stage in PERSISTENT_STAGES}
    if importlib.util.find_spec("numba_cuda_mlir") is not None:  # (numba-cuda-mlir's own stage, mlir)
        from . import mlir_kernels

        cache.compile(mlir_kernels.axpy, mlir_kernels.AXPY_SIG, CompileConfig(sm=86))
    else:
        persisted.pop("mlir")
    for stage, cls in persisted.items():
        for entry in cache._memory[stage].entries.values():
            if entry.artifact is None:  # (a marker: the variant of its target holds the artifact)
                continue
            meta, parts = entry.artifact.state()
            assert cls.rebuild(meta, parts) == entry.artifact
            back = decode(encode(stage, entry), stage, entry.token)
            assert back == dataclasses.replace(entry, components=back.components, reasons=tuple(entry.reasons))
            assert {n: c.digest for n, c in back.components.items()} == \
                {n: c.digest for n, c in entry.components.items()}
            seen.add(stage)
    assert seen == set(persisted)


def test_a_miss_after_a_restart_is_explained_against_the_latest_of_equally_near_entries(tmp_path, monkeypatch):
    """The disk lists entries in whatever order its directories give; ties
    between equally near entries go to the latest built, whatever that order."""
    for cap in (None, 64, 32):
        KernelCache(directory=tmp_path).compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=86, max_registers=cap))
    listed = DiskTier.entries
    monkeypatch.setattr(DiskTier, "entries", lambda self, stage: list(reversed(list(listed(self, stage)))))
    result = KernelCache(directory=tmp_path).compile(kernels.axpy, kernels.AXPY_SIG,
                                                     CompileConfig(sm=86, max_registers=40))
    assert [str(r) for r in result.stages["cubin"].reasons] == ["max_registers 32 -> 40"]
