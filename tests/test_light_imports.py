"""Reading cache files imports no numba: `import gpucache_ext`, the codec and
the ``gpucache`` command's ls, stats, show and verify, each run in a fresh
process on a folder a real compile filled (in another process), print what
they printed before and leave numba, the CUDA libraries and IPython alone.
The tests on the shared folder are `slow`; the quick sample runs one command
on a folder filled in this process."""

import hashlib
import json
import re
import shutil
import struct
from pathlib import Path

import pytest

from gpucache_ext import CompileConfig, KernelCache

from . import kernels
from .helpers import run_python

ROOT = Path(__file__).resolve().parent.parent

FILL = """
import sys
from gpucache_ext import CompileConfig, KernelCache
from tests import kernels
cache = KernelCache(directory=sys.argv[1])
for sm in (80, 86):
    cache.compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=sm))
cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86, opt=1))
"""

# What a process imported and loaded, printed as JSON on its last line.
REPORT = """
def _report(**extra):
    import json, re, sys
    maps = open("/proc/self/maps").read() if sys.platform == "linux" else ""
    names = sorted(sys.modules)
    from gpucache_ext import toolchain
    print(json.dumps({
        **extra,
        "numba": [m for m in names if m == "numba" or m.startswith("numba.")],
        "numba_cuda": [m for m in names if m.startswith("numba_cuda")],
        "ipython": [m for m in names if m.split(".")[0] in ("IPython", "ipywidgets", "ipykernel")],
        "libraries": sorted(set(re.findall(r"lib(nvvm|nvrtc|nvJitLink)", maps))),
        "probes": dict(toolchain.probes),
    }))
"""

# The command run by cli.main in this process; "eager" first imports what
# `import gpucache_ext` used to (the whole pipeline), for the output before.
COMMAND = REPORT + """
import contextlib, io, sys
if sys.argv[1] == "eager":
    import gpucache_ext.pipeline.cache, gpucache_ext.backends.numba_cuda.launch.kernel  # noqa: F401
from gpucache_ext import cli
out = io.StringIO()
with contextlib.redirect_stdout(out):
    status = cli.main(sys.argv[2:])
_report(status=status, out=out.getvalue())
"""

# The `numba_cuda` distribution's top-level package holds only its version
# (what the llvm stage's toolchain names); the compiler is `numba.cuda`.
VERSION_ONLY = [[], ["numba_cuda", "numba_cuda._version"]]


def run(code, *args):
    """What `code` reported (`_report`), run in a new interpreter that imports this checkout."""
    return run_python(code, *args, env={"PYTHONPATH": str(ROOT)}, json_line=True)


def command_report(directory, *args, mode="fresh"):
    """The ``gpucache --dir directory *args`` command, run by `cli.main` in a new
    interpreter: its status, its output and what the process imported."""
    return run(COMMAND, mode, "--dir", directory, *args)


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    directory = tmp_path_factory.mktemp("filled")
    run_python(FILL, directory, timeout=600)
    return directory


def tokens(directory, stage):
    return sorted(p.name[: -len(".entry")] for p in directory.glob(f"v1/{stage}/*/*.entry"))


@pytest.mark.slow
def test_import_gpucache_ext_imports_neither_numba_nor_ipython():
    seen = run(REPORT + """
import gpucache_ext
before = sorted(m for m in __import__("sys").modules if m.split(".")[0] in ("numba", "IPython"))
assert "KernelCache" in dir(gpucache_ext) and "Kernel" in dir(gpucache_ext)
from gpucache_ext import KernelCache, Kernel, CompileConfig, CompileResult, default_cache
assert KernelCache.__module__ == "gpucache_ext.pipeline.cache"
assert Kernel.__module__ == "gpucache_ext.backends.numba_cuda.launch.kernel"
assert all(getattr(gpucache_ext, name) is not None for name in gpucache_ext.__all__)
assert callable(gpucache_ext.configure_default_cache) and callable(gpucache_ext.inspector)
assert callable(gpucache_ext.load_ipython_extension) and gpucache_ext.defaults._default_cache is None
import gpucache_ext.backends.numba_cuda.stages as stages  # (they re-export the artifacts' classes)
import gpucache_ext.pipeline.artifacts as artifacts
assert stages.LLVMArtifact is artifacts.LLVMArtifact
_report(before=before, version=gpucache_ext.__version__)
""")
    assert seen["before"] == []
    assert seen["numba"]  # and then KernelCache works: it imported numba-cuda
    assert seen["ipython"] == [] and seen["version"]


@pytest.mark.slow
def test_unknown_names_are_still_attribute_errors():
    import gpucache_ext

    with pytest.raises(AttributeError, match="no_such_name"):
        gpucache_ext.no_such_name  # noqa: B018
    assert set(gpucache_ext.__all__) <= set(dir(gpucache_ext))


@pytest.mark.parametrize("args", [("stats",), ("--json", "stats"), ("ls",), ("ls", "--stage", "ptx")],
                         ids=" ".join)
@pytest.mark.slow
def test_stats_and_ls_read_headers_only(filled, args):
    fresh, before = command_report(filled, *args), command_report(filled, *args, mode="eager")

    def without_ages(text):  # ls's age column moves on between the two runs
        return re.sub(r" +\d+[smhd]  ", " AGE  ", text)

    assert fresh["status"] == 0 and without_ages(fresh["out"]) == without_ages(before["out"])
    assert (fresh["numba"], fresh["numba_cuda"], fresh["ipython"], fresh["libraries"]) == ([], [], [], [])


@pytest.mark.slow
def test_ls_json_is_the_same(filled):
    def rows(result):
        return [{k: v for k, v in row.items() if k != "age_seconds"} for row in json.loads(result["out"])]

    fresh, before = command_report(filled, "--json", "ls"), command_report(filled, "--json", "ls", mode="eager")
    assert rows(fresh) == rows(before) and len(rows(fresh)) == 8
    assert fresh["numba"] == fresh["numba_cuda"] == fresh["ipython"] == []


@pytest.mark.parametrize("stage", ["llvm", "ptx", "cubin"])
@pytest.mark.slow
def test_show_imports_no_numba_and_reads_the_toolchain_from_the_memo(filled, stage):
    token = tokens(filled, stage)[0]
    fresh, before = command_report(filled, "show", token[:12]), command_report(filled, "show", token[:12], mode="eager")
    assert fresh["status"] == 0 and "valid     yes" in fresh["out"] and fresh["out"] == before["out"]
    assert fresh["ipython"] == [] and fresh["libraries"] == [] and fresh["probes"] == {}
    assert [fresh["numba"], fresh["numba_cuda"]] in (VERSION_ONLY, [[], []])
    # --toolchain: ptx and cubin entries' toolchain too, from the memo (numba-cuda
    # says where libdevice and libcudadevrt are), loading no CUDA library
    strict = command_report(filled, "show", "--toolchain", token[:12])
    assert strict["status"] == 0 and "valid     yes\n" in strict["out"] + "\n"
    assert strict["libraries"] == [] and strict["probes"] == {}


@pytest.mark.slow
def test_verify_imports_no_numba_and_reads_the_toolchain_from_the_memo(filled):
    outputs = []
    for args in (("verify",), ("--json", "verify"), ("verify", "--toolchain"), ("--json", "verify", "--toolchain")):
        fresh, before = command_report(filled, *args), command_report(filled, *args, mode="eager")
        assert fresh["status"] == 0 and fresh["out"] == before["out"]
        assert fresh["ipython"] == [] and fresh["libraries"] == [] and fresh["probes"] == {}
        if "--toolchain" not in args:
            assert [fresh["numba"], fresh["numba_cuda"]] in (VERSION_ONLY, [[], []])
        # (with --toolchain, numba-cuda says where libdevice and libcudadevrt
        # are, importing numba; the memo gives their fingerprints)
        outputs.append(fresh["out"])
    assert "checked 8 entries: 0 bad (the toolchain of cubin and ptx entries not compared" in outputs[0]
    assert json.loads(outputs[1]) == {"checked": 8, "fixed": False, "bad": [],
                                      "toolchain_not_compared": ["cubin", "ptx"],
                                      "previous_secret": 0, "resigned": 0}
    assert outputs[2].strip().endswith("checked 8 entries: 0 bad")
    assert json.loads(outputs[3]) == {"checked": 8, "fixed": False, "bad": [], "toolchain_not_compared": [],
                                      "previous_secret": 0, "resigned": 0}


@pytest.mark.slow
def test_verify_of_llvm_entries_imports_no_numba(filled, tmp_path):
    for token in tokens(filled, "llvm"):
        source = next(filled.glob(f"v1/llvm/*/{token}.entry"))
        target = tmp_path / source.relative_to(filled)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, target)
    fresh = command_report(tmp_path, "verify")
    assert fresh["status"] == 0 and "checked 2 entries: 0 bad" in fresh["out"]
    assert [fresh["numba"], fresh["numba_cuda"]] in (VERSION_ONLY, [[], []])
    assert fresh["ipython"] == [] and fresh["libraries"] == []


def _rewrite_header(path: Path, change):
    """The entry at `path` with its header changed, checksum made good again."""
    from gpucache_ext.store.codec import MAGIC, read_header

    data = path.read_bytes()
    header, start = read_header(data)
    change(header)
    head = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    body = struct.pack(">I", len(head)) + head + data[start:]
    path.write_bytes(MAGIC + hashlib.sha256(body).digest() + body)


@pytest.mark.parametrize("stage,part", [("llvm", "llvmlite"), ("ptx", "libdevice"), ("cubin", "nvjitlink")])
@pytest.mark.slow
def test_verify_through_the_memo_still_finds_another_toolchains_entry(filled, tmp_path, stage, part):
    directory = tmp_path / "copy"
    shutil.copytree(filled, directory)
    token = tokens(directory, stage)[0]
    path = next(directory.glob(f"v1/{stage}/*/{token}.entry"))

    def other_toolchain(header):
        header["toolchain"][part] = "0" * len(header["toolchain"][part])

    _rewrite_header(path, other_toolchain)
    fresh = command_report(directory, "--json", "verify", "--toolchain")
    assert fresh["status"] == 1
    bad = json.loads(fresh["out"])["bad"]
    assert [(b["stage"], Path(b["path"]).name, b["problem"]) for b in bad] == \
        [(stage, path.name, "built by another toolchain")]
    shown = command_report(directory, "show", "--toolchain", token)
    assert shown["status"] == 1 and "valid     NO: built by another toolchain" in shown["out"]
    # without --toolchain, llvm's toolchain (package versions) is still compared; a
    # ptx or cubin entry of another toolchain is intact, and never served here
    plain = command_report(directory, "--json", "verify")
    assert plain["status"] == (1 if stage == "llvm" else 0)


@pytest.mark.slow
def test_codec_reads_and_writes_entries_without_numba(filled):
    seen = run(REPORT + """
import sys
from pathlib import Path
from gpucache_ext.store import codec
directory = Path(sys.argv[1])
count = 0
for path in sorted(directory.glob("v1/*/*/*.entry")):
    stage, token, data = path.parent.parent.name, path.name[: -len(".entry")], path.read_bytes()
    header, _ = codec.read_header(data)
    entry = codec.header_entry(data)
    assert entry.token == token == header["token"] and entry.artifact is None
    if stage == "llvm":  # its toolchain is package versions: decode checks it without numba
        decoded = codec.decode(data, stage, token)
        assert decoded.artifact.entry_name and codec.encode(stage, decoded) == data
        count += 1
_report(count=count)
""", filled)
    assert seen["count"] == 2
    assert [seen["numba"], seen["numba_cuda"]] in (VERSION_ONLY, [[], []]) and seen["ipython"] == []


@pytest.mark.slow
def test_verify_recompile_still_compiles(filled, tmp_path):
    directory = tmp_path / "copy"
    shutil.copytree(filled, directory)
    fresh = command_report(directory, "--json", "verify", "--recompile")
    assert fresh["status"] == 0, fresh["out"]
    counts = json.loads(fresh["out"])["recompiled"]["counts"]
    assert counts["match"] == 6 and counts["mismatch"] == counts["failed"] == 0
    assert fresh["numba"] and fresh["ipython"] == []


@pytest.mark.slow
def test_verify_without_a_memo_probes_the_tools_and_remembers_them(filled, tmp_path):
    from gpucache_ext.toolchain import memo_path

    directory = tmp_path / "copy"
    shutil.copytree(filled, directory)
    memo_path(directory).unlink()
    plain = command_report(directory, "verify")  # key and checksum: no tool asked, no memo written
    assert plain["status"] == 0 and plain["probes"] == {} and not memo_path(directory).exists()
    first = command_report(directory, "verify", "--toolchain")
    assert first["status"] == 0 and "checked 8 entries: 0 bad" in first["out"]
    assert set(first["probes"]) == {"libnvvm", "libdevice", "nvjitlink", "cudadevrt", "nvrtc"}
    assert memo_path(directory).is_file()
    again = command_report(directory, "verify", "--toolchain")
    assert again["out"] == first["out"] and again["probes"] == {} and again["libraries"] == []


def test_ls_in_a_new_process_imports_no_numba(tmp_path):
    """The quick sample: one command, in a new process, on a folder filled here."""
    result = KernelCache(directory=tmp_path).compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))
    seen = command_report(tmp_path, "--json", "ls")
    assert seen["status"] == 0
    listed = {row["token"] for row in json.loads(seen["out"])}
    assert listed == {result.stages[stage].token for stage in ("llvm", "ptx", "cubin")}
    assert (seen["numba"], seen["numba_cuda"], seen["ipython"], seen["libraries"]) == ([], [], [], [])


def test_a_compile_every_stage_serves_from_disk_imports_no_compiler(tmp_path):
    # a new process's first hit: numba's compiler (its lowering registries, what the stages import)
    # is imported by the first stage that runs, never for a compile served from disk; a compile that
    # then misses imports it and gives what a fresh cache gives (the audit, which recompiles in the
    # background on purpose, is off)
    KernelCache(directory=tmp_path, audit=False).compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=86))
    seen = run(REPORT + """
import hashlib, sys
from gpucache_ext import CompileConfig, KernelCache
from tests import kernels
cache = KernelCache(directory=sys.argv[1], audit=False)
hit = cache.compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=86))
served = sorted(m for m in sys.modules if m in ("gpucache_ext.backends.numba_cuda.stages", "numba.cuda.cudaimpl"))
missed = cache.compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=90))
_report(served=served, hit=[hit.stages[s].hit for s in ("llvm", "ptx", "cubin")],
        missed=[missed.stages[s].hit for s in ("ptx", "cubin")],
        digests=[hashlib.sha256(r.cubin).hexdigest() for r in (hit, missed)],
        after=sorted(m for m in sys.modules if m in ("gpucache_ext.backends.numba_cuda.stages", "numba.cuda.cudaimpl")))
""", tmp_path)
    assert seen["hit"] == [True, True, True] and seen["missed"] == [False, False]
    assert seen["served"] == [], seen["served"]
    assert seen["after"] == ["gpucache_ext.backends.numba_cuda.stages", "numba.cuda.cudaimpl"]
    fresh = [KernelCache().compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=sm)).cubin for sm in (86, 90)]
    assert seen["digests"] == [hashlib.sha256(c).hexdigest() for c in fresh]


@pytest.mark.slow  # an interpreter
def test_what_numbas_compiler_registers_as_a_compile_loads_it_is_not_walked_again():
    # the first compile of a process loads numba's compiler (about 1,200 registrations of numba's own
    # lowerings and templates): inside the compile they are numba's, so the next check of the tables
    # (a kernel's first launch after a cell) walks none of them; a user's registration still counts
    seen = run(REPORT + """
from gpucache_ext import CompileConfig, KernelCache
from gpucache_ext.backends.numba_cuda import extensions
from tests import kernels
assert "gpucache_ext.backends.numba_cuda.stages" not in __import__("sys").modules
KernelCache().compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=86))
def unwalked():
    return [label for label, table in extensions._containers() for entry in extensions._entries(table)
            if extensions._key(entry) not in extensions._USER]
after_compile = unwalked()
from numba.cuda.extending import overload
def double(x):
    pass
@overload(double, target="cuda")
def double_impl(x):
    return lambda x: 2 * x
_report(after_compile=after_compile, derived=len(extensions._DERIVED), after_user=len(unwalked()),
        users=len(extensions.user_registrations()))
""")
    assert len(seen["after_compile"]) <= 2, seen["after_compile"]  # (numba's typeof of a new array class...)
    assert seen["derived"] > 1000
    assert seen["after_user"] >= 1 and seen["users"] >= 1
