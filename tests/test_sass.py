"""SASS on any machine: the nvdisasm wheel found first, a cubin's architecture
from its ELF header, a plain note where nvdisasm cannot read it, and two
entries side by side (PTX or SASS) in the core, the inspector, ``%gpucache
diff`` and ``gpucache diff``.  Real compiles, the real nvdisasm."""

import functools
import html
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from IPython.core.error import UsageError

import gpucache_ext
from gpucache_ext import CompileConfig, KernelCache
from gpucache_ext.toolchain import sass
from gpucache_ext.queries import comparable_entries, compare_entries
from gpucache_ext.pipeline.results import SassUnavailable as ReExported
from gpucache_ext.pipeline.results import disassemble as old_disassemble
from gpucache_ext.toolchain.sass import Nvdisasm, SassUnavailable

from . import helpers, kernels

ROOT = Path(__file__).resolve().parent.parent
ARCHS = helpers.buildable((50, 60, 70, 75, 80, 86, 90, 100, 120))  # (CUDA 13: from sm_75)


@pytest.fixture(scope="module")
def built():
    """One cache: axpy for each of ARCHS, tanh with and without fastmath (sm_86)."""
    cache = KernelCache()
    results = {sm: cache.compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=sm)) for sm in ARCHS}
    precise = cache.compile(kernels.tanh_kernel, kernels.TANH_SIG, CompileConfig(sm=86))
    fast = cache.compile(kernels.tanh_kernel, kernels.TANH_SIG, CompileConfig(sm=86, fastmath=True))
    return cache, results, precise, fast


@pytest.fixture
def fresh_search():
    sass.nvdisasm_tools.cache_clear()
    yield
    sass.nvdisasm_tools.cache_clear()


def _in_wheel(path: str) -> bool:
    return Path(path).parts[-4] == "nvidia" and Path(path).parent.name == "bin"


def test_the_wheels_nvdisasm_is_found_without_path(fresh_search, monkeypatch):
    monkeypatch.setenv("PATH", "")
    found = sass.find_nvdisasm()
    assert found is not None and _in_wheel(found.path) and found.origin == "the nvidia-cuda-nvdisasm wheel"
    assert found.version >= (13, 0) and found.oldest_sm == 75
    assert sass.find_nvdisasm() is found  # memoised


def test_the_wheels_nvdisasm_comes_before_the_one_on_path(fresh_search, monkeypatch, tmp_path):
    wheel = sass.find_nvdisasm()
    sass.nvdisasm_tools.cache_clear()
    shutil.copy2(wheel.path, tmp_path / "nvdisasm")  # a second real binary, on PATH
    monkeypatch.setenv("PATH", str(tmp_path))
    tools = sass.nvdisasm_tools()
    assert tools[0].path == wheel.path
    assert tools[-1] == Nvdisasm(str(tmp_path / "nvdisasm"), wheel.version, "on PATH")


def test_an_older_nvdisasm_reads_what_the_newest_cannot():
    new = Nvdisasm("/wheel/nvdisasm", (13, 0), "the nvidia-cuda-nvdisasm wheel")
    old = Nvdisasm("/usr/local/cuda-12.9/bin/nvdisasm", (12, 9), "on PATH")
    assert sass.nvdisasm_for(86, [new, old]) is new
    assert sass.nvdisasm_for(70, [new, old]) is old and sass.nvdisasm_for(50, [new, old]) is old
    with pytest.raises(SassUnavailable) as refused:
        sass.nvdisasm_for(70, [new])
    assert str(refused.value) == (
        "nvdisasm 13.0 (the nvidia-cuda-nvdisasm wheel) cannot disassemble sm_70 code: it reads sm_75 and "
        "later. Compile for sm_75 or later to see SASS, or put a CUDA 12 toolkit's nvdisasm on PATH.")
    with pytest.raises(SassUnavailable, match="nvdisasm was not found .*pip install nvidia-cuda-nvdisasm"):
        sass.nvdisasm_for(86, [])


def test_cubin_arch_reads_the_elf_header(built):
    _, results, _, _ = built
    assert {sm: sass.cubin_arch(result.cubin) for sm, result in results.items()} == {sm: sm for sm in ARCHS}
    for bad in (b"", b"PTX", results[86].cubin[:40], b"\x7fELF" + bytes(60)):
        with pytest.raises(ValueError, match="not a cubin"):
            sass.cubin_arch(bad)


def test_sass_of_a_cubin(built):
    _, results, _, _ = built
    result = results[86]
    found = sass.disassembly(result.cubin)
    assert found.arch == 86 and found.label == f"SASS sm_86 ({found.tool.name})"
    assert found.tool.name.startswith("nvdisasm 13.")
    assert result.entry_name in found.text and "EXIT" in found.text and "S2R" in found.text
    # the old names still work
    assert old_disassemble(result.cubin) == found.text and ReExported is SassUnavailable
    for sm in (75, 90, 100, 120):
        assert sass.disassembly(results[sm].cubin).label.startswith(f"SASS sm_{sm} ")


@helpers.needs_pre_turing  # (nvdisasm 13 reads sm_75 and later: CUDA 13 builds nothing older)
def test_older_archs_say_what_would_work(built):
    _, results, _, _ = built
    for sm in (50, 60, 70):
        with pytest.raises(SassUnavailable) as refused:
            sass.disassemble(results[sm].cubin)
        message = str(refused.value)
        assert f"cannot disassemble sm_{sm} code" in message and "sm_75 and later" in message
        assert "Compile for sm_75 or later" in message and "CUDA 12 toolkit's nvdisasm on PATH" in message
        assert "\n" not in message
    with pytest.raises(SassUnavailable, match="not a cubin"):
        sass.disassemble(b"not a cubin at all, but long enough to be read as an ELF header")


def test_sass_lines_drop_addresses_and_encodings(built, tmp_path):
    _, results, _, _ = built
    cubin = tmp_path / "axpy.cubin"
    cubin.write_bytes(results[86].cubin)
    tool = sass.find_nvdisasm().path
    plain = subprocess.run([tool, "-c", str(cubin)], capture_output=True, text=True, check=True).stdout
    encoded = subprocess.run([tool, "-c", "-hex", str(cubin)], capture_output=True, text=True, check=True).stdout
    assert "/* 0x" in encoded and "/*0000*/" in plain
    lines = sass.sass_lines(plain)
    assert lines == sass.sass_lines(encoded)
    assert "EXIT ;" in lines and not any("/*" in line or "  " in line for line in lines)
    assert not any("B14v" in line for line in lines)  # the symbol uid tag is dropped


def test_side_by_side_of_two_configs(built):
    _, _, precise, fast = built
    a, b = sass.disassemble(precise.cubin), sass.disassemble(fast.cubin)
    diff = sass.side_by_side(a, b, "precise", "fastmath")
    assert not diff.identical and diff.changed + diff.removed + diff.added > 0
    kinds = {row.kind for row in diff.rows}
    assert kinds <= {"same", "changed", "left only", "right only"} and kinds - {"same"}
    for row in diff.rows:
        assert (row.left_no is None) == (row.kind == "right only")
        assert (row.right_no is None) == (row.kind == "left only")
    assert diff.removed == sum(row.kind == "left only" for row in diff.rows)
    assert diff.summary().startswith(f"{diff.changed} lines changed, {diff.removed} removed, {diff.added} added")
    text = sass.side_by_side_text(diff, width=120)
    assert text.splitlines()[:2] == ["--- precise", "+++ fastmath"] and text.endswith(diff.summary())
    assert all(len(line) <= 120 for line in text.splitlines()[2:-1])

    same = sass.side_by_side(a, a, "a", "b")
    assert same.identical and same.rows == () and same.summary() == f"identical ({same.left_lines} lines)"
    # PTX: the two builds' symbol names differ only in numba's ABI tags, which are left out
    ptx = sass.side_by_side(precise.ptx, fast.ptx, "precise", "fastmath", kind="ptx")
    assert "tanh.approx.f32 %f1, %f2;" in {row.right for row in ptx.rows}
    assert not any(".entry" in row.left for row in ptx.rows if row.kind != "same")
    assert sass.side_by_side(precise.ptx, precise.ptx, "a", "b", kind="ptx").identical


def test_compare_entries(built):
    cache, results, precise, fast = built
    cubins = precise.stages["cubin"].token, fast.stages["cubin"].token
    found = compare_entries(cache, "cubin", cubins[0], cubins[1][:8])
    assert found.left.token == cubins[0] and found.right.token == cubins[1]
    assert (found.left.arch, found.left.config, found.right.config) == (86, "sm_86", "sm_86 fastmath=True")
    assert found.left.listing.startswith("SASS sm_86 (nvdisasm 13.")
    assert found.left.label.startswith(f"tanh_kernel [sm_86] {cubins[0][:12]} (SASS sm_86")
    assert found.rows and not found.diff.identical
    assert json.loads(json.dumps(found.as_dict()))["summary"] == found.summary()
    ptx = compare_entries(cache, "ptx", precise.stages["ptx"].token, fast.stages["ptx"].token)
    assert ptx.left.listing == "PTX sm_86" and ptx.rows
    assert compare_entries(cache, "cubin", cubins[0], cubins[0]).diff.identical
    assert [row.token for row in comparable_entries(cache, "cubin", cubins[0])] == [cubins[1]]

    problems = {
        ("llvm", precise.stages["llvm"].token, fast.stages["llvm"].token): "'llvm' entries cannot be compared",
        ("cubin", cubins[0], precise.stages["ptx"].token): "is a ptx entry, not a cubin one",
        ("cubin", cubins[0], "0123456789abcdef"): "no entry with a token starting 0123456789abcdef in the cache",
        ("cubin", cubins[0], "xyz"): "'xyz' is not a token",
        ("cubin", cubins[0], "abc"): "'abc' is not a token",
    }
    if 70 in results:  # (CUDA 12: a target nvdisasm 13 cannot read)
        problems[("cubin", cubins[0], results[70].stages["cubin"].token)] = "cannot disassemble sm_70 code"
    for args, message in problems.items():
        with pytest.raises(ValueError, match=message.replace("(", r"\(")):
            compare_entries(cache, *args)


# The surfaces: the inspector, %gpucache diff, gpucache diff

TANH = '''
import math
from numba import cuda

@cuda.jit("void(float32[:], float32[:])")
def tanh_kernel(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = math.tanh(x[i])
'''


cell = functools.partial(helpers.cell, kernel="tanh_kernel")  # returns the kernel's last CompileResult


def test_the_inspector_compares_an_entry_with_another(ip):
    precise = cell(ip, "--sm 86 --quiet", TANH)
    fast = cell(ip, "--sm 86 --fastmath --quiet", TANH)
    inspector = gpucache_ext.inspector()
    inspector.select("cubin", precise.stages["cubin"].token)
    other = fast.stages["cubin"].token
    assert inspector.compare_with.layout.display is None
    assert [token for _, token in inspector.compare_with.options] == ["", other]
    assert dict(inspector.compare_with.options)[
        f"tanh_kernel (float32[:], float32[:]) [sm_86 fastmath=True] {other[:12]}"] == other
    assert inspector.compare_view.value == ""
    inspector.compare(other)
    view = inspector.compare_view.value
    assert "gpucache-side-by-side" in view and 'class="gpucache-line-changed"' in view
    assert "SASS sm_86 (nvdisasm 13." in view and "lines changed" in view and "<script" not in view
    assert html.escape("tanh_kernel [sm_86 fastmath=True]") in view

    inspector.select("ptx", precise.stages["ptx"].token)  # another entry: the cubin chosen does not apply
    assert inspector.compare_with.value == "" and inspector.compare_view.value == ""
    inspector.compare(fast.stages["ptx"].token)
    assert "PTX sm_86" in inspector.compare_view.value and "tanh.approx.f32" in inspector.compare_view.value
    inspector.select("llvm", precise.stages["llvm"].token)
    assert inspector.compare_with.layout.display == "none" and inspector.compare_view.value == ""

    if helpers.CUDA_MAJOR >= 13:
        return  # (what follows needs a target before sm_75: CUDA 13 builds none)
    old = cell(ip, "--sm 70 --quiet", TANH)  # nvdisasm 13 cannot read it: a note, not a failure
    inspector.select("cubin", old.stages["cubin"].token)
    assert "cannot disassemble sm_70 code" in inspector.entry_view.value
    inspector.compare(precise.stages["cubin"].token)
    assert "gpucache-compare-note" in inspector.compare_view.value
    assert "cannot disassemble sm_70 code" in inspector.compare_view.value


def test_gpucache_diff_magic(ip, capsys):
    precise = cell(ip, "--sm 86 --quiet", TANH)
    fast = cell(ip, "--sm 86 --fastmath --quiet", TANH)
    ip.run_line_magic("gpucache", f"diff {precise.stages['cubin'].token[:8]} {fast.stages['cubin'].token}")
    out = capsys.readouterr().out
    assert out.startswith("--- tanh_kernel [sm_86]") and "+++ tanh_kernel [sm_86 fastmath=True]" in out
    assert "lines changed" in out and "SASS sm_86" in out
    ip.run_line_magic("gpucache", f"diff {precise.stages['ptx'].token[:8]} {fast.stages['ptx'].token[:8]}")
    assert "PTX sm_86" in capsys.readouterr().out
    assert "diff A B" in ip.find_line_magic("gpucache").__doc__
    bad = {
        "diff": "give two ptx or two cubin entries' tokens",
        f"diff {precise.stages['cubin'].token}": "give two ptx or two cubin entries' tokens",
        f"diff {precise.stages['cubin'].token} zz": "'zz' is not a token",
        f"diff {precise.stages['cubin'].token} abcdef": "no entry with a token starting abcdef in the cache",
        f"diff {precise.stages['cubin'].token} {fast.stages['ptx'].token}": "is a ptx entry, not a cubin one",
        f"diff {precise.stages['llvm'].token} {fast.stages['llvm'].token}": "'llvm' entries cannot be compared",
    }
    for line, message in bad.items():
        with pytest.raises(UsageError, match=message):
            ip.run_line_magic("gpucache", line)


gpucache = functools.partial(helpers.gpucache, env={"PYTHONPATH": str(ROOT)})


@pytest.mark.slow  # the command runs as subprocesses
def test_gpucache_diff_command(tmp_path):
    cache = KernelCache(directory=tmp_path)
    precise, fast, old = (cache.compile(kernels.tanh_kernel, kernels.TANH_SIG, config) for config in (
        CompileConfig(sm=86), CompileConfig(sm=86, fastmath=True), CompileConfig(sm=70)))
    a, b = precise.stages["cubin"].token, fast.stages["cubin"].token
    text = gpucache("--dir", tmp_path, "diff", a[:8], b[:10]).stdout
    assert "--- tanh_kernel [sm_86]" in text and "SASS sm_86 (nvdisasm 13." in text and "lines changed" in text
    report = json.loads(gpucache("--dir", tmp_path, "--json", "diff", a, b, "--stage", "cubin").stdout)
    assert report["left"]["token"] == a and report["right"]["config"] == "sm_86 fastmath=True"
    assert report["diff"]["changed"] > 0 and report["summary"].startswith(f"{report['diff']['changed']} lines")
    ptx = gpucache("--dir", tmp_path, "diff", precise.stages["ptx"].token[:8], fast.stages["ptx"].token[:8])
    assert "PTX sm_86" in ptx.stdout and "tanh.approx.f32" in ptx.stdout
    errors = {
        (a, "zz"): "not a token",
        (a, "abcdef0123"): "no entry with a token starting abcdef0123",
        (a, precise.stages["ptx"].token): "is a cubin entry and",
        (precise.stages["llvm"].token, fast.stages["llvm"].token): "'llvm' entries cannot be compared",
        (a, old.stages["cubin"].token): "cannot disassemble sm_70 code: it reads sm_75 and later",
    }
    for (first, second), message in errors.items():
        assert message in gpucache("--dir", tmp_path, "diff", first, second, expect=2).stderr
    assert "no entry" in gpucache("--dir", tmp_path, "diff", a, b, "--stage", "ptx", expect=2).stderr
