"""The toolchain fingerprint remembered on disk (`toolchain` memo): a new
process reads it instead of loading libNVVM, NVRTC and nvJitLink; a library
file that changes, a corrupt memo, or a memo that is wrong all lead back to
asking the tools, and tokens never depend on whether the memo was used."""

import json
import os
import sys
import time
from pathlib import Path

import pytest

from gpucache_ext import CompileConfig, KernelCache, toolchain
from gpucache_ext.store.disk import DiskTier
from gpucache_ext.toolchain import ToolchainChanged, memo_path, toolchain_component

from . import kernels
from .helpers import run_python

STAGES = ("typing", "llvm", "ptx", "cubin")


# A new process: the toolchain components and a kernel's tokens (nothing
# compiled), the probes run, and the CUDA libraries mapped into the process.
TOKENS_IN_NEW_PROCESS = """
import json, re, sys
from numba import cuda
from gpucache_ext import CompileConfig, KernelCache, toolchain
def loaded():
    maps = open("/proc/self/maps").read() if sys.platform == "linux" else ""
    return sorted(set(re.findall(r"lib(nvvm|nvrtc|nvJitLink)", maps)))
def axpy(r, a, x, y):  # (numba's @cuda.jit would load nvJitLink itself, to decide on LTO)
    i = cuda.grid(1)
    if i < r.size:
        r[i] = a * x[i] + y[i]
before = loaded()
directory = sys.argv[1] if sys.argv[1] != "none" else None
config = CompileConfig(sm=86)
cache = KernelCache(directory=directory)
tokens = cache.tokens(axpy, "void(float32[:], float32, float32[:], float32[:])", config)
print(json.dumps({
    "before": before,
    "loaded": loaded(),
    "tokens": {stage: token.hex for stage, token in tokens.items()},
    "toolchain": {stage: toolchain.stage_toolchain(stage) for stage in tokens},
    "probes": dict(toolchain.probes),
    "memo_reads": dict(toolchain.memo_reads),
}))
"""


@pytest.mark.slow
def test_a_new_process_reads_the_memo_and_loads_no_cuda_library(tmp_path):
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()  # a folder in use: CompileConfig remembers NVRTC's targets there (it creates none)
    env = {"GPUCACHE_DIR": str(cache_dir)}
    first = run_python(TOKENS_IN_NEW_PROCESS, cache_dir, env=env, json_line=True)
    assert set(first["probes"]) == {"libnvvm", "libdevice", "nvjitlink", "cudadevrt", "nvrtc", "nvrtc archs"}
    assert first["memo_reads"] == {}
    assert memo_path(cache_dir).is_file()

    second = run_python(TOKENS_IN_NEW_PROCESS, cache_dir, env=env, json_line=True)
    assert second["probes"] == {}
    assert set(second["memo_reads"]) == set(first["probes"])
    if sys.platform == "linux":
        assert first["before"] == second["before"] == []
        assert first["loaded"] == ["nvJitLink", "nvrtc", "nvvm"]
        assert second["loaded"] == []
    assert second["tokens"] == first["tokens"]
    assert second["toolchain"] == first["toolchain"]

    # differential: no memo at all (no disk tier, GPUCACHE_DIR off) gives the same tokens
    probed = run_python(TOKENS_IN_NEW_PROCESS, "none", env={"GPUCACHE_DIR": "off"}, json_line=True)
    assert probed["memo_reads"] == {} and probed["probes"]
    assert probed["tokens"] == first["tokens"]
    assert probed["toolchain"] == first["toolchain"]


COMPILE_IN_NEW_PROCESS = """
import json, sys
from gpucache_ext import CompileConfig, KernelCache, toolchain
from tests import kernels
cache = KernelCache(directory=sys.argv[1])
result = cache.compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=86))
print(json.dumps({"hits": [result.stages[s].hit for s in ("llvm", "ptx", "cubin")],
                  "tokens": [result.stages[s].token for s in ("llvm", "ptx", "cubin")],
                  "probes": dict(toolchain.probes), "memo_reads": dict(toolchain.memo_reads)}))
"""


@pytest.mark.slow
def test_a_new_process_compiling_from_disk_probes_nothing(tmp_path):
    first = run_python(COMPILE_IN_NEW_PROCESS, tmp_path, json_line=True)
    assert first["hits"] == [False, False, False]
    second = run_python(COMPILE_IN_NEW_PROCESS, tmp_path, json_line=True)
    assert second["hits"] == [True, True, True]
    assert second["tokens"] == first["tokens"]
    assert not set(second["probes"]) & {"libnvvm", "libdevice", "nvjitlink", "cudadevrt", "nvrtc"}


# ---------------------------------------------------------------------------
# In this process, with a fake library standing in for libNVVM


@pytest.fixture
def fresh_toolchain():
    """Forget this process's toolchain values before and after the test."""
    toolchain.forget()
    yield
    toolchain.forget()


class FakeLibrary:
    """A library file; its 'version' is its content, as a probe would report it."""

    def __init__(self, path: Path, content: bytes = b"version 1"):
        self.path = path
        self.probes = 0
        self.loaded = None  # what a probe reads: the file's content, or a value set by the test
        path.parent.mkdir(parents=True, exist_ok=True)
        self.replace(content)

    def replace(self, content: bytes, keep_mtime_of=None):
        """Write `content` as a new file over the old one, as a package installer does."""
        temp = self.path.with_suffix(".new")
        temp.write_bytes(content)
        if keep_mtime_of is not None:
            os.utime(temp, ns=(keep_mtime_of.st_atime_ns, keep_mtime_of.st_mtime_ns))
        os.replace(temp, self.path)

    def probe(self):
        self.probes += 1
        return self.loaded if self.loaded is not None else self.path.read_bytes().decode()

    def part(self):
        return toolchain._Part(self.probe, lambda: str(self.path), lambda: str(self.path))


@pytest.fixture
def fake_nvvm(fresh_toolchain, tmp_path, monkeypatch):
    library = FakeLibrary(tmp_path / "lib" / "libnvvm.so")
    monkeypatch.setitem(toolchain._PARTS, "libnvvm", library.part())
    return library


def new_process():
    """What a new process would see: no values learned yet."""
    toolchain.forget()


def test_the_memo_answers_instead_of_the_probe(fake_nvvm, tmp_path):
    cache_dir = tmp_path / "cache"
    assert toolchain._part("libnvvm", cache_dir) == "version 1"
    assert fake_nvvm.probes == 1 and memo_path(cache_dir).is_file()
    new_process()
    assert toolchain._part("libnvvm", cache_dir) == "version 1"
    assert fake_nvvm.probes == 1


def test_without_a_disk_tier_the_tools_are_asked_and_nothing_is_written(fake_nvvm, tmp_path):
    for _ in range(2):
        new_process()
        assert toolchain._part("libnvvm", None) == "version 1"
    assert fake_nvvm.probes == 2
    assert not list(tmp_path.rglob(toolchain.MEMO_NAME))


@pytest.mark.parametrize("change", ["touch", "same size and mtime", "rewritten in place", "moved", "removed"])
def test_a_changed_library_file_is_probed_again(fake_nvvm, tmp_path, change):
    cache_dir = tmp_path / "cache"
    before = toolchain_component("ptx", cache_dir)
    assert fake_nvvm.probes == 1
    old = fake_nvvm.path.stat()
    if change == "touch":  # same bytes, new mtime
        os.utime(fake_nvvm.path, ns=(old.st_atime_ns, old.st_mtime_ns + 1_000_000))
        expected = "version 1"
    elif change == "same size and mtime":  # a new file that keeps size and mtime (cp -p, rsync -a)
        fake_nvvm.replace(b"version 2", keep_mtime_of=old)
        assert fake_nvvm.path.stat().st_size == old.st_size
        assert fake_nvvm.path.stat().st_mtime_ns == old.st_mtime_ns
        expected = "version 2"
    elif change == "rewritten in place":  # same inode, size and mtime: only ctime tells
        time.sleep(0.05)  # past the filesystem clock's tick
        with open(fake_nvvm.path, "r+b") as handle:
            handle.write(b"version 4")
        os.utime(fake_nvvm.path, ns=(old.st_atime_ns, old.st_mtime_ns))
        assert fake_nvvm.path.stat().st_ino == old.st_ino
        expected = "version 4"
    elif change == "moved":  # found somewhere else
        moved = tmp_path / "elsewhere" / "libnvvm.so"
        moved.parent.mkdir()
        os.replace(fake_nvvm.path, moved)
        fake_nvvm.path = moved
        fake_nvvm.replace(b"version 3")
        expected = "version 3"
    else:
        fake_nvvm.path.unlink()
        fake_nvvm.loaded = "absent"
        expected = "absent"
    new_process()
    after = toolchain_component("ptx", cache_dir)
    assert fake_nvvm.probes == 2
    assert toolchain.stage_toolchain("ptx")["libnvvm"] == expected
    assert (after == before) == (expected == "version 1")
    # and the new identity is remembered in its turn
    new_process()
    assert toolchain_component("ptx", cache_dir) == after
    assert fake_nvvm.probes == 2


def test_a_changed_identity_of_a_real_library_is_probed_again(fresh_toolchain, tmp_path, monkeypatch):
    cache_dir = tmp_path / "cache"
    before = {stage: toolchain_component(stage, cache_dir) for stage in STAGES}
    new_process()
    probes = dict(toolchain.probes)
    assert {stage: toolchain_component(stage, cache_dir) for stage in STAGES} == before
    assert dict(toolchain.probes) == probes

    real_identity = toolchain.file_identity
    monkeypatch.setattr(toolchain, "file_identity",
                        lambda path: real_identity(path) + (["changed"] if "libdevice" in path else []))
    new_process()
    assert {stage: toolchain_component(stage, cache_dir) for stage in STAGES} == before
    probed = {name for name, count in toolchain.probes.items() if count > probes.get(name, 0)}
    assert probed == {"libdevice"}


def test_the_environment_is_part_of_the_key(fake_nvvm, tmp_path, monkeypatch):
    cache_dir = tmp_path / "cache"
    toolchain._part("libnvvm", cache_dir)
    for name, value in [("CUDA_HOME", "/opt/cuda-elsewhere"), ("LD_LIBRARY_PATH", "/opt/lib"),
                        ("NUMBA_CUDA_DRIVER", "/opt/libcuda.so")]:
        monkeypatch.setenv(name, value)
        new_process()
        probes = fake_nvvm.probes
        toolchain._part("libnvvm", cache_dir)
        assert fake_nvvm.probes == probes + 1, name


@pytest.mark.parametrize("content", [
    b"", b"garbage\x00\xff", b"[1, 2]", b'{"format": 1}', b'{"format": 999, "parts": {}}',
    b'{"format": 1, "parts": {"libnvvm": {"KEY": 5}}}', b'{"format": 1, "parts": {"libnvvm": []}}',
    b'{"format": 1, "parts": {"libnvvm": {"KEY": "version 1"', b'{"format": 1, "parts": [1]}',
])
def test_a_corrupt_memo_is_ignored_and_rewritten(fake_nvvm, tmp_path, content):
    cache_dir = tmp_path / "cache"
    toolchain._part("libnvvm", cache_dir)
    key = toolchain._key("libnvvm", str(fake_nvvm.path))
    memo_path(cache_dir).write_bytes(content.replace(b"KEY", key.encode()))
    new_process()
    assert toolchain._part("libnvvm", cache_dir) == "version 1"
    assert fake_nvvm.probes == 2
    assert json.loads(memo_path(cache_dir).read_text())["parts"]["libnvvm"][key] == "version 1"


def test_with_a_secret_the_memo_is_signed_and_a_planted_one_is_not_read(fake_nvvm, tmp_path, monkeypatch):
    from gpucache_ext.store.disk import DiskTier
    from gpucache_ext.store.signing import Keyring

    monkeypatch.setattr(toolchain, "_memo_keyrings", {})
    cache_dir = tmp_path / "cache"
    DiskTier(cache_dir, keyring=Keyring(["team"]))  # a signed disk tier signs its folder's memo
    assert toolchain._part("libnvvm", cache_dir) == "version 1"
    assert memo_path(cache_dir).read_bytes().startswith(b"GPUCSIG2")
    new_process()
    assert toolchain._part("libnvvm", cache_dir) == "version 1" and fake_nvvm.probes == 1  # read, signed
    # someone else who can write to the folder plants a memo with another fingerprint
    key = toolchain._key("libnvvm", str(fake_nvvm.path))
    memo_path(cache_dir).write_text(json.dumps({"format": 1, "parts": {"libnvvm": {key: "planted"}}}))
    new_process()
    assert toolchain._part("libnvvm", cache_dir) == "version 1" and fake_nvvm.probes == 2
    assert memo_path(cache_dir).read_bytes().startswith(b"GPUCSIG2")  # and it is signed again


def test_an_unreadable_memo_folder_only_costs_a_probe(fake_nvvm, tmp_path):
    blocker = tmp_path / "a file"
    blocker.write_text("not a folder")
    for _ in range(2):
        new_process()
        assert toolchain._part("libnvvm", blocker / "cache") == "version 1"
    assert fake_nvvm.probes == 2


def test_a_wrong_memo_is_caught_before_the_stage_runs(fake_nvvm, tmp_path):
    """The library changed after the memo was read (say, a wheel reinstalled
    under a running kernel, keeping size and mtime): the stage's tools say
    otherwise, and nothing may be compiled under the old fingerprint."""
    cache_dir = tmp_path / "cache"
    toolchain._part("libnvvm", cache_dir)
    new_process()
    assert toolchain._part("libnvvm", cache_dir) == "version 1"  # from the memo
    toolchain.confirm("cubin")  # not a part of the cubin's fingerprint: not asked
    assert fake_nvvm.probes == 1
    fake_nvvm.loaded = "version 2"
    with pytest.raises(ToolchainChanged, match="libnvvm"):
        toolchain.confirm("ptx")
    assert toolchain.stage_toolchain("ptx")["libnvvm"] == "version 2"
    toolchain.confirm("ptx")  # asked once per process
    assert fake_nvvm.probes == 2
    new_process()
    assert toolchain._part("libnvvm", cache_dir) == "version 2"  # the memo was corrected
    assert fake_nvvm.probes == 2


def test_confirmed_values_are_not_asked_again(fake_nvvm, tmp_path):
    cache_dir = tmp_path / "cache"
    toolchain._part("libnvvm", cache_dir)
    new_process()
    toolchain._part("libnvvm", cache_dir)
    for _ in range(3):
        toolchain.confirm("ptx")
    assert fake_nvvm.probes == 2


@pytest.mark.slow
def test_compile_recomputes_its_tokens_when_the_toolchain_changed_under_it(fake_nvvm, tmp_path):
    cache_dir = tmp_path / "cache"
    config = CompileConfig(sm=86)
    toolchain._part("libnvvm", cache_dir)
    new_process()
    cache = KernelCache(directory=cache_dir)
    stale = cache.tokens(kernels.axpy, kernels.AXPY_SIG, config)  # fingerprint from the memo
    fake_nvvm.loaded = "version 2"
    result = cache.compile(kernels.axpy, kernels.AXPY_SIG, config)
    assert not result.stages["ptx"].hit
    assert result.stages["ptx"].token != stale["ptx"].hex
    assert result.stages["llvm"].token == stale["llvm"].hex
    fresh = cache.tokens(kernels.axpy, kernels.AXPY_SIG, config)
    # (ptx is filed under the digest of the IR, not the llvm token `tokens`
    # chains: compare the fingerprint its token hashes)
    filed = result.stages["ptx"].components["toolchain"]
    assert filed == fresh["ptx"].components["toolchain"] != stale["ptx"].components["toolchain"]
    # nothing was filed under the fingerprint the code was not built with
    for stage in ("ptx", "cubin"):
        assert cache.explain(kernels.axpy, kernels.AXPY_SIG, config)[stage] == ()
    assert [entry.components["toolchain"] for entry in DiskTier(cache_dir).entries("ptx")] == [filed]


def test_libraries_are_located_only_where_cuda_bindings_loads_them_through_pathfinder(monkeypatch):
    import importlib

    from cuda import pathfinder

    for libname in ("nvvm", "nvrtc", "nvJitLink"):
        located = toolchain._locate_dynamic(libname)
        assert located is not None and os.path.isfile(located)
        module = importlib.import_module(f"cuda.bindings._internal.{libname.lower()}")
        assert module.load_nvidia_dynamic_lib is pathfinder.load_nvidia_dynamic_lib
        # a cuda-bindings that finds its libraries some other way: no telling which file, so probe
        monkeypatch.setattr(module, "load_nvidia_dynamic_lib", lambda name: None)
        assert toolchain._locate_dynamic(libname) is None


def test_a_config_alone_creates_no_cache_folder(tmp_path):
    import os
    import subprocess
    import sys

    folder = tmp_path / "user-cache"
    env = {**os.environ, "GPUCACHE_DIR": str(folder)}
    subprocess.run([sys.executable, "-c", "from gpucache_ext import CompileConfig; CompileConfig(sm=80)"],
                   env=env, check=True, timeout=300)
    assert not folder.exists()
