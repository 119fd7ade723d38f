"""Multi-target builds: every target through the four stages, one fatbin.

Fatbins are read back with NVIDIA's cuobjdump (the nvidia-cuda-cuobjdump
wheel of the test extra): the members it lists and the cubins it extracts
are compared with single-target builds in a fresh cache."""

import json
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucache_ext import CompileConfig, ConfigError, KernelCache
from gpucache_ext.keys.config import Targets

from . import kernels
from .helpers import CUDA_MAJOR, gpucache, needs_pre_turing, run_python

SIG = kernels.AXPY_SIG


ATOMIC_SIG = "void(float64[:], float64[:])"
ATOMIC_SOURCE = """
from numba import cuda

def atomic_f64(r, x):
    i = cuda.grid(1)
    if i < x.size:
        cuda.atomic.add(r, 0, x[i])
"""


def _atomic_kernel(tmp_path):
    """A kernel in a module of its own (float64 atomic add: lowered as a
    compare-and-swap loop below sm_60, one instruction from sm_60)."""
    path = tmp_path / "atomic_f64_kernels.py"
    path.write_text(ATOMIC_SOURCE)
    sys.path.insert(0, str(tmp_path))
    try:
        import atomic_f64_kernels
    finally:
        sys.path.remove(str(tmp_path))
    return atomic_f64_kernels.atomic_f64


def cuobjdump():
    from cuda.pathfinder import find_nvidia_binary_utility

    path = find_nvidia_binary_utility("cuobjdump")
    if not path:
        pytest.skip("cuobjdump is not installed (pip install nvidia-cuda-cuobjdump: the test extra has it)")
    return path


def listed(fatbin: bytes, tmp_path):
    """(cubin archs, ptx archs) as cuobjdump lists them, and the extracted cubins by arch."""
    path = tmp_path / "kernel.fatbin"
    path.write_bytes(fatbin)
    shown = subprocess.run([cuobjdump(), "-lelf", "-lptx", str(path)], capture_output=True, text=True,
                           check=True).stdout
    elves = sorted(int(line.rsplit(".sm_", 1)[1].split(".")[0]) for line in shown.splitlines()
                   if line.startswith("ELF file"))
    ptxs = sorted(int(line.rsplit(".sm_", 1)[1].split(".")[0]) for line in shown.splitlines()
                  if line.startswith("PTX file"))
    out = tmp_path / "extracted"
    out.mkdir()
    subprocess.run([cuobjdump(), "-xelf", "all", str(path)], cwd=out, capture_output=True, check=True)
    cubins = {int(p.name.rsplit(".sm_", 1)[1].split(".")[0]): p.read_bytes() for p in out.glob("*.cubin")}
    return elves, ptxs, cubins


def stages_missed(result):
    """Per target, the stages that compiled; and whether the fatbin did."""
    return ({sm: [s for s, layer in r.stages.items() if not layer.hit] for sm, r in result.per_target.items()},
            not result.fatbin_stage.hit)


def test_a_fatbin_holds_exactly_its_cubins_and_ptx_each_equal_to_a_single_target_build(tmp_path):
    result = KernelCache().compile_fatbin(kernels.axpy, SIG, CompileConfig(), sms="80,86,90", ptx=80)
    elves, ptxs, cubins = listed(result.fatbin, tmp_path)
    assert elves == [80, 86, 90] and ptxs == [80]
    assert [m.name for m in result.members] == ["sm_80", "sm_86", "sm_90", "compute_80"]
    fresh = KernelCache()
    for sm in (80, 86, 90):
        single = fresh.compile(kernels.axpy, SIG, CompileConfig(sm=sm))
        assert cubins[sm] == single.cubin == result.cubins[sm]
    assert result.cubin == result.cubins[80] and result.config.sm == 80
    # the same inputs give the same bytes (fresh cache)
    assert KernelCache().compile_fatbin(kernels.axpy, SIG, sms=(90, 86, 80)).fatbin == result.fatbin


def test_typing_and_llvm_run_once_and_each_target_adds_a_ptx_and_a_cubin():
    cache = KernelCache()
    result = cache.compile_fatbin(kernels.axpy, SIG, sms=(80, 86, 90))
    missed, fatbin_missed = stages_missed(result)
    assert missed == {80: ["typing", "llvm", "ptx", "cubin"], 86: ["ptx", "cubin"], 90: ["ptx", "cubin"]}
    assert fatbin_missed
    # IR shared across targets, as its token says: one llvm token for all
    assert len({r.stages["llvm"].token for r in result.per_target.values()}) == 1
    assert len({r.stages["cubin"].token for r in result.per_target.values()}) == 3
    stats = cache.stats()
    assert (stats["llvm"].misses, stats["ptx"].misses, stats["cubin"].misses, stats["fatbin"].misses) == (1, 3, 3, 1)


def test_adding_a_target_builds_its_ptx_and_cubin_and_the_fatbin_and_reordering_is_a_hit():
    cache = KernelCache()
    three = cache.compile_fatbin(kernels.axpy, SIG, sms=(80, 86, 90), ptx=80)
    before = cache.stats()
    four = cache.compile_fatbin(kernels.axpy, SIG, sms=(90, 75, 86, 80), ptx=75)
    missed, fatbin_missed = stages_missed(four)
    assert missed == {75: ["ptx", "cubin"], 80: [], 86: [], 90: []} and fatbin_missed
    after = cache.stats()
    assert {s: after[s].misses - before[s].misses for s in after} == \
        {"typing": 0, "llvm": 0, "ptx": 1, "cubin": 1, "fatbin": 1}
    assert four.fatbin_stage.reasons == ("sm_75 added", "PTX compute_80 -> compute_75")
    assert four.cubins[80] == three.cubins[80]
    again = cache.compile_fatbin(kernels.axpy, SIG, sms="86,80,90", ptx=80)
    assert again.hit and again.fatbin == three.fatbin and again.fatbin_stage.tier == "memory"


def test_a_ptx_target_below_the_cubins_stops_at_ptx():
    cache = KernelCache()
    result = cache.compile_fatbin(kernels.axpy, SIG, sms=(86, 90), ptx=75)
    assert list(result.per_target[75].stages) == ["typing", "llvm", "ptx"]
    assert sorted(result.cubins) == [86, 90] and cache.stats()["cubin"].misses == 2
    assert "compute_75" in [m.name for m in result.members] and ".target sm_75" in result.per_target[75].ptx


def test_without_ptx_the_fatbin_holds_the_cubins_alone(tmp_path):
    result = KernelCache().compile_fatbin(kernels.axpy, SIG, sms="80,90", ptx="none")
    elves, ptxs, _ = listed(result.fatbin, tmp_path)
    assert elves == [80, 90] and ptxs == [] and result.targets.ptx is None


@needs_pre_turing  # (tanh.approx from sm_75)
def test_lowering_that_reads_the_target_gets_its_own_ir_per_target(tmp_path):
    cache = KernelCache()
    fast = CompileConfig(fastmath=True)
    result = cache.compile_fatbin(kernels.tanh_kernel, kernels.TANH_SIG, fast, sms=(70, 75, 86))
    ir = {sm: r.llvm_ir for sm, r in result.per_target.items()}
    assert "tanh.approx" not in ir[70] and "tanh.approx" in ir[75] and ir[75] == ir[86]
    tokens = {sm: r.stages["llvm"].token for sm, r in result.per_target.items()}
    assert tokens[75] == tokens[86] != tokens[70]
    assert result.per_target[86].stages["llvm"].hit and not result.per_target[75].stages["llvm"].hit
    atomic = _atomic_kernel(tmp_path)
    built = KernelCache().compile_fatbin(atomic, ATOMIC_SIG, sms=(52, 60, 80))
    fresh = KernelCache()
    for sm, each in built.per_target.items():  # each target's IR is what a single-target build gives
        assert each.llvm_ir == fresh.compile(atomic, ATOMIC_SIG, CompileConfig(sm=sm)).llvm_ir
    tokens = {sm: r.stages["llvm"].token for sm, r in built.per_target.items()}
    assert tokens[60] == tokens[80] != tokens[52]
    assert "atom.add.f64" not in built.per_target[52].ptx and "atom.global.add.f64" in built.per_target[80].ptx


def test_targets_are_validated_with_the_field_and_what_is_allowed():
    for sms, ptx, field, words in [
        ("80,86,86", None, "sm", "listed twice"), ("80,99", None, "sm", "use one of"),
        ((), None, "sm", "at least one"), ("80,86", 86, "ptx", "above the lowest cubin target sm_80"),
        ("80", "x", "ptx", "none for no PTX"),
    ]:
        with pytest.raises(ConfigError, match=words) as info:
            Targets(sms, ptx)
        assert info.value.field == field
    cache = KernelCache()
    with pytest.raises(ConfigError):
        cache.compile_fatbin(kernels.axpy, SIG, sms="80,80")
    assert all(s.misses == 0 for s in cache.stats().values())  # nothing compiled


def test_an_lto_kernel_leaves_the_ptx_out_unless_it_was_asked_for():
    cache = KernelCache()
    lto = CompileConfig(lto=True)
    result = cache.compile_fatbin(kernels.copy, kernels.COPY_SIG, lto, sms=(80, 86))
    assert [m.kind for m in result.members] == ["cubin", "cubin"] and "LTO-IR" in result.ptx_note
    with pytest.raises(ConfigError, match="ptx='none'") as info:
        cache.compile_fatbin(kernels.copy, kernels.COPY_SIG, lto, sms=(80, 86), ptx=80)
    assert info.value.field == "ptx"


NEW_PROCESS_FATBIN = """
import hashlib, json, sys
from gpucache_ext import CompileConfig, KernelCache
from tests import kernels
cache = KernelCache(directory=sys.argv[1])
result = cache.compile_fatbin(kernels.axpy, kernels.AXPY_SIG, CompileConfig(), sms=sys.argv[2])
print(json.dumps({"misses": {s: v.misses for s, v in cache.stats().items()},
                  "tier": result.fatbin_stage.tier, "fatbin": hashlib.sha256(result.fatbin).hexdigest()}))
"""


@pytest.mark.slow
def test_a_new_process_building_the_same_fatbin_compiles_nothing(tmp_path):
    first = json.loads(run_python(NEW_PROCESS_FATBIN, tmp_path, "80,86,90"))
    assert first["misses"] == {"typing": 1, "llvm": 1, "ptx": 3, "cubin": 3, "fatbin": 1}
    second = json.loads(run_python(NEW_PROCESS_FATBIN, tmp_path, "90,86,80"))
    assert second["misses"] == dict.fromkeys(first["misses"], 0)
    assert second["tier"] == "disk" and second["fatbin"] == first["fatbin"]
    assert list((tmp_path / "v1" / "fatbin").glob("*/*.entry"))


COPY_CELL = '''
from numba import cuda

@cuda.jit("void(float32[:], float32[:])")
def copy2(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = x[i] * 2
'''


def test_the_magic_builds_a_fatbin_from_a_list_of_targets_and_reports_each(ip, capsys, tmp_path):
    import numpy as np

    ip.run_cell_magic("gpukernel", "--sm 90,80,86", COPY_CELL)
    kernel = ip.user_ns["copy2"]
    assert kernel.targets.sms == (80, 86, 90) and kernel.config.sm == 80
    elves, ptxs, _ = listed(kernel.fatbin, tmp_path)
    assert elves == [80, 86, 90] and ptxs == [80]
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("copy2") and "per architecture" not in line]
    assert [line.split()[3] for line in lines] == ["sm_80", "sm_86", "sm_90", "sm_80,86,90"]
    assert "fatbin" in out.splitlines()[0] and "MISS" in lines[-1] and "first compile of copy2" in lines[-1]
    ip.run_cell_magic("gpukernel", "--sm 75,80,86,90", COPY_CELL)
    out = capsys.readouterr().out
    rows = {line.split()[3]: line for line in out.splitlines()
            if line.startswith("copy2") and "per architecture" not in line}
    # one row of resources per cubin target under the table
    table = out.split("copy2 (float32[:], float32[:]) per architecture (fatbin ", 1)[1].splitlines()
    assert [line.split()[0] for line in table[1:6]] == ["arch", "sm_75", "sm_80", "sm_86", "sm_90"]
    assert rows["sm_75"].count("MISS") == 2 and "MISS" not in rows["sm_86"]
    assert "fatbin: sm_75 added, PTX compute_80 -> compute_75" in rows["sm_75,80,86,90"]
    x = np.arange(4, dtype=np.float32)
    r = np.zeros_like(x)
    ip.user_ns["copy2"][1, 4](r, x)  # the simulator runs it as any kernel
    assert (r == 2 * x).all()
    assert "resources sm_75:" in ip.user_ns["copy2"].inspect()


@pytest.mark.slow
def test_the_command_exports_shows_and_verifies_fatbins(tmp_path):
    folder = tmp_path / "cache"
    cache = KernelCache(directory=folder)
    result = cache.compile_fatbin(kernels.axpy, SIG, sms="80,86,90")
    out = tmp_path / "axpy.fatbin"
    done = gpucache("--dir", folder, "export", "axpy", "--fatbin", out)
    assert out.read_bytes() == result.fatbin and "sm_80 (cubin" in done.stdout and "compute_80 (ptx" in done.stdout
    elves, ptxs, _ = listed(out.read_bytes(), tmp_path)
    assert elves == [80, 86, 90] and ptxs == [80]
    by_token = tmp_path / "by-token.fatbin"
    gpucache("--dir", folder, "export", result.fatbin_stage.token[:10], "--fatbin", by_token)
    assert by_token.read_bytes() == result.fatbin
    cache.compile_fatbin(kernels.axpy, SIG, sms="75,80")  # a second fatbin of axpy: the name is ambiguous
    refused = gpucache("--dir", folder, "export", "axpy", "--fatbin", tmp_path / "x", expect=2).stderr
    assert "axpy has 2 fatbins" in refused and "give the token" in refused
    assert "no fatbin of a kernel or token 'nothere'" in gpucache(
        "--dir", folder, "export", "nothere", "--fatbin", tmp_path / "x", expect=2).stderr
    shown = gpucache("--dir", folder, "show", result.fatbin_stage.token[:10], "--out", tmp_path / "shown").stdout
    assert "holds sm_80 (cubin" in shown and (tmp_path / "shown").read_bytes() == result.fatbin
    assert "cubin sm_86" in shown  # its token's components, by member
    report = json.loads(gpucache("--dir", folder, "verify", "--recompile", "--json").stdout)
    assert report["recompiled"]["counts"]["mismatch"] == 0
    assert report["recompiled"]["counts"]["match"] == 4 + 4 + 2  # ptx and cubin for 75, 80, 86, 90; two fatbins
    listing = json.loads(gpucache("--dir", folder, "ls", "--stage", "fatbin", "--json").stdout)
    assert sorted(row["config"] for row in listing) == ["sm_75,80 +ptx 75", "sm_80,86,90 +ptx 80"]


def test_sass_per_architecture_and_a_plain_note_where_nvdisasm_cannot_read_it():
    from gpucache_ext import Kernel

    old = 70 if CUDA_MAJOR < 13 else 75  # (CUDA 13 builds nothing nvdisasm 13 cannot read)
    kernel = Kernel(kernels.axpy, [SIG], cache=KernelCache(), targets=f"{old},80,90")
    kernel.compile_declared()
    sass = kernel.inspect_sass_by_arch(SIG)
    assert sorted(sass) == [old, 80, 90]
    entry = kernel.last.entry_name
    assert entry in sass[80] and entry in sass[90] and sass[80] != sass[90]
    if old == 75:
        assert entry in sass[75]
        return
    from gpucache_ext.toolchain.sass import SassUnavailable, nvdisasm_for

    try:
        nvdisasm_for(70)  # a CUDA 12 toolkit's nvdisasm on PATH reads sm_70
    except SassUnavailable:  # the wheel's nvdisasm 13 alone does not
        assert sass[70].startswith("(no SASS: ") and "sm_70" in sass[70] and "sm_75" in sass[70]
    else:
        assert entry in sass[70]


def test_what_a_gpu_would_load_is_the_fatbin_where_a_member_runs_there():
    from gpucache_ext import LaunchError
    from gpucache_ext.backends.numba_cuda.launch.kernel import choose_image

    cache = KernelCache()
    built = cache.compile_fatbin(kernels.copy, kernels.COPY_SIG, sms=(80, 90))
    assert choose_image(built, (8, 9)).code_type == "fatbin"  # sm_80's cubin runs on sm_89
    assert choose_image(built, (10, 0)).code_type == "fatbin"  # the driver compiles compute_80's PTX
    assert choose_image(built, (10, 0)).code == built.fatbin
    with pytest.raises(LaunchError, match="add 75 to --sm"):
        choose_image(built, (7, 5))
    without_ptx = cache.compile_fatbin(kernels.copy, kernels.COPY_SIG, sms=(80, 90), ptx="none")
    with pytest.raises(LaunchError, match="add 100 to --sm"):
        choose_image(without_ptx, (10, 0))
    single = cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))
    assert choose_image(single, (8, 9)).code_type == "cubin" and choose_image(single, (9, 0)).code_type == "ptx"


def test_a_fatbin_is_shared_signed_and_a_teammate_builds_nothing(redis_server):
    KernelCache(redis_url=redis_server.url, secret="team").compile_fatbin(kernels.axpy, SIG, sms="80,90")
    teammate = KernelCache(redis_url=redis_server.url, secret="team")
    found = teammate.compile_fatbin(kernels.axpy, SIG, sms="90,80")
    assert found.fatbin_stage.tier == "shared" and all(s.misses == 0 for s in teammate.stats().values())
    stranger = KernelCache(redis_url=redis_server.url, secret="other team")  # refused: built anew
    built = stranger.compile_fatbin(kernels.axpy, SIG, sms="80,90")
    assert not built.fatbin_stage.hit and built.fatbin == found.fatbin
    assert stranger.stats()["fatbin"].tiers["shared"].rejected_by == {"other secret": 1}
    assert built.fatbin_stage.reasons[0] == "shared entry refused: other secret"


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from([75, 80, 86, 89, 90]), min_size=1, max_size=5, unique=True),
       st.randoms(use_true_random=False))
def test_a_fatbin_depends_on_the_set_of_targets_alone(targets, shuffle):
    """Any order of the same targets is the same fatbin, found without
    compiling; the members are exactly the targets (and the lowest's PTX)."""
    first = _SHARED.compile_fatbin(kernels.copy, kernels.COPY_SIG, sms=targets)
    again = list(targets)
    shuffle.shuffle(again)
    before = _SHARED.stats()
    second = _SHARED.compile_fatbin(kernels.copy, kernels.COPY_SIG, sms=again)
    assert second.hit and second.fatbin == first.fatbin
    assert all(_SHARED.stats()[s].misses == before[s].misses for s in before)
    assert [m.name for m in second.members] == [f"sm_{t}" for t in sorted(targets)] + [f"compute_{min(targets)}"]


_SHARED = KernelCache()


def test_explain_predicts_each_target_of_a_multi_target_kernel(ip, capsys):
    ip.run_cell_magic("gpukernel", "--sm 80,90 --ptx 75 --quiet", COPY_CELL)
    kernel = ip.user_ns["copy2"]
    kernel.cache.evict("cubin", kernel.last.per_target[90].stages["cubin"].token)
    ip.run_line_magic("gpucache", "explain copy2")
    out = capsys.readouterr().out.split("if compiled now:", 1)[1]
    assert "(float32[:], float32[:]) sm_75: every stage hits" in out  # its PTX alone: no cubin to miss
    assert "(float32[:], float32[:]) sm_80: every stage hits" in out
    assert "(float32[:], float32[:]) sm_90: cubin misses" in out
    # and recompiling the fatbin entry from the inspector's action builds every target again
    again = kernel.cache.recompile(kernel.last.fatbin_stage.token)
    assert again.fatbin == kernel.last.fatbin and not again.fatbin_stage.hit
    assert again.fatbin_stage.reasons == ("recompiled on request",)


def test_a_ptx_the_driver_cannot_compile_fails_the_cell_and_keeps_the_earlier_kernel(ip):
    ip.run_cell_magic("gpukernel", "--sm 80,86 --quiet", COPY_CELL)
    kernel = ip.user_ns["copy2"]
    done = ip.run_cell("%%gpukernel --sm 80,86 --ptx 80 --lto --quiet\n" + COPY_CELL)
    assert not done.success and isinstance(done.error_in_exec, ConfigError)
    assert "LTO-IR" in str(done.error_in_exec) and "ptx='none'" in str(done.error_in_exec)
    assert ip.user_ns["copy2"] is kernel  # the name keeps the kernel it had
    ip.run_cell_magic("gpukernel", "--sm 80,86 --lto --quiet", COPY_CELL)  # without --ptx: cubins alone
    assert [m.kind for m in ip.user_ns["copy2"].last.members] == ["cubin", "cubin"]


def test_a_fatbin_miss_names_each_changed_member_and_why():
    """Each member that changed, with why this compile rebuilt it (the global
    and its values), or that it is an entry built earlier: never a member
    that did not change."""
    from .helpers import DEVICE_READS_G, reading

    namespace, _ = reading(DEVICE_READS_G, G=1.5)
    cache, sig = KernelCache(), "void(float32[:])"
    cache.compile_fatbin(namespace["kernel"], sig, sms="80,86", ptx="none")
    namespace["G"] = 3.0
    both = cache.compile_fatbin(namespace["kernel"], sig, sms="80,86", ptx="none")
    assert both.fatbin_stage.reasons == ("cubin sm_80 rebuilt: global G 1.5 -> 3.0 (read by scale)",
                                         "cubin sm_86 rebuilt: global G 1.5 -> 3.0 (read by scale)")
    namespace["G"] = 2.0
    cache.compile(namespace["kernel"], sig, CompileConfig(sm=86))  # sm_86's cubin, built on its own
    again = cache.compile_fatbin(namespace["kernel"], sig, sms="80,86", ptx="none")
    assert again.per_target[86].stages["cubin"].hit and not again.per_target[80].stages["cubin"].hit
    assert again.fatbin_stage.reasons[0].startswith("cubin sm_80 rebuilt")
    assert again.fatbin_stage.reasons[1:] == ("cubin sm_86 changed (an entry built earlier, reused)",)
    namespace["G"] = 1.5  # back: every member is there, and so is the fatbin
    assert cache.compile_fatbin(namespace["kernel"], sig, sms="80,86", ptx="none").fatbin_stage.hit
    with_75 = cache.compile_fatbin(namespace["kernel"], sig, sms="75,80,86", ptx="none")
    assert with_75.fatbin_stage.reasons == ("sm_75 added",)  # the members that did not change go unnamed
