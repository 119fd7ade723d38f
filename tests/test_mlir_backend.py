"""numba-cuda-mlir as a second backend ("mlir"): its kernels compile through
the pipeline, without a GPU or a driver, to numba-cuda-mlir's own PTX and
cubin; every option it compiles with is in the token (each field against a
fresh compile, the optimisation level first: numba-cuda-mlir's own
``cache=True`` loads an opt-3 binary for an ``opt=0`` kernel); stages cut off
early where bytes repeat; its entries share no token with numba-cuda's.
"""

import hashlib
import json

import pytest

pytest.importorskip("numba_cuda_mlir", reason="numba-cuda-mlir is not installed (gpucache_ext[mlir]: Python 3.11+)")

from gpucache_ext import CompileConfig, ConfigError, KernelCache  # noqa: E402
from gpucache_ext.backends.numba_cuda_mlir import compiler  # noqa: E402
from gpucache_ext.errors import UnsupportedKernelError  # noqa: E402
from gpucache_ext.pipeline.results import Outcome  # noqa: E402

from . import mlir_kernels as mk  # noqa: E402
from .helpers import run_python  # noqa: E402

from numba_cuda_mlir import cuda as mlir_cuda  # noqa: E402


def own_ptx(kernel, sig, config: CompileConfig) -> str:
    """numba-cuda-mlir's own ``compile_ptx`` of `kernel` for `config` (its
    host query answered with the target: there is no driver here; its
    counters from the start, as in a new process)."""
    with compiler.answering_host_query(config.cc), compiler._numbered_afresh():
        ptx, _ = mlir_cuda.compile_ptx(kernel.py_func, sig, cc=config.cc, opt=config.opt != 0,
                                       fastmath=config.fastmath, lineinfo=config.lineinfo,
                                       launch_bounds=config.launch_bounds and (
                                           config.launch_bounds[0] if len(config.launch_bounds) == 1
                                           else config.launch_bounds))
    return ptx


def own_cubin(kernel, sig, config: CompileConfig) -> bytes:
    with compiler.answering_host_query(config.cc), compiler._numbered_afresh():
        options = {"chip": config.sm_name, "opt_level": config.opt}
        if config.max_registers is not None:
            options["max_registers"] = config.max_registers
        return mlir_cuda.compile_cubin(kernel.py_func, sig, **options)


def fresh(kernel, sig, config):
    return KernelCache().compile(kernel, sig, config)


def outcomes(result):
    return {stage: each.outcome for stage, each in result.stages.items()}


# -- numba-cuda-mlir's own output ---------------------------------------------

@pytest.mark.parametrize("kernel,sig", mk.ALL, ids=[k.__name__ for k, _ in mk.ALL])
def test_ptx_is_numba_cuda_mlirs_own(kernel, sig):
    cache = KernelCache()
    for config in (CompileConfig(sm=86), CompileConfig(sm=75, opt=0), CompileConfig(sm=90, lineinfo=True),
                   CompileConfig(sm=80, fastmath=True, launch_bounds=128)):
        result = cache.compile(kernel, sig, config)
        assert result.config.backend == "mlir"  # (the kernel's import decided)
        assert result.ptx == own_ptx(kernel, sig, config), config.summary()
        assert "gpu.module @" in result.mlir and "gpu.func @" in result.mlir
        assert result.llvm_ir == ""  # (no NVVM IR is kept: the MLIR is)


def test_cubin_is_numba_cuda_mlirs_own():
    """The same code; under CUDA 12 the same bytes.  (The cache links verbose,
    for nvJitLink's log of what the kernel uses, and CUDA 13's nvJitLink writes
    its command line into a note of the cubin.)"""
    from gpucache_ext.toolchain import cuda_major
    from gpucache_ext.toolchain.sass import disassembly

    cache = KernelCache()
    for config in (CompileConfig(sm=86), CompileConfig(sm=86, opt=0), CompileConfig(sm=80, max_registers=32)):
        result = cache.compile(mk.transcendental, mk.UNARY_SIG, config)
        own = own_cubin(mk.transcendental, mk.UNARY_SIG, config)
        assert disassembly(result.cubin).text == disassembly(own).text, config.summary()
        if cuda_major() == 12:
            assert result.cubin == own, config.summary()
        assert result.resources["registers"] > 0  # (nvJitLink's log, verbose, says what it uses)


def test_the_host_query_is_answered_only_inside_a_compile():
    from numba_cuda_mlir import tools

    before = tools._cached_cc
    KernelCache().compile(mk.axpy, mk.AXPY_SIG, CompileConfig(sm=75))
    assert tools._cached_cc == before  # (numba-cuda-mlir's own launches ask the real GPU)


# -- every option in the token, against fresh compiles ------------------------

# (a field, the base value, a changed value); opt first: numba-cuda-mlir's own cache misses it
FIELDS = [("opt", 3, 0), ("opt", 3, 1), ("fastmath", False, True), ("lineinfo", False, True),
          ("launch_bounds", None, (256, 2)), ("max_registers", None, 24), ("sm", 86, 75), ("lto", False, True),
          ("debug", False, True)]


@pytest.mark.parametrize("field,base,changed", FIELDS, ids=[f"{f}={c}" for f, _, c in FIELDS])
def test_each_field_against_a_fresh_compile(field, base, changed):
    kernel, sig = mk.transcendental, mk.UNARY_SIG
    extra = {"opt": 0} if field == "debug" else {}  # (it debugs at opt 0 alone)
    before = CompileConfig(**{"sm": 86, **extra, field: base})
    after = before.replace(**{field: changed})
    cache = KernelCache()
    first = cache.compile(kernel, sig, before)
    second = cache.compile(kernel, sig, after)
    expected = fresh(kernel, sig, after)
    assert (second.mlir, second.ptx, second.ltoir, second.cubin) == \
        (expected.mlir, expected.ptx, expected.ltoir, expected.cubin)
    assert second.cubin != first.cubin or field == "fastmath", f"{field} should change this kernel's code"
    # the stages that compiled again are those a reader of the field, or a byte before them, changed
    built = {stage for stage, outcome in outcomes(second).items() if outcome is Outcome.MISS}
    assert "mlir" in built or field == "max_registers"
    assert ("cubin" in built) == (second.cubin != first.cubin or field in ("opt", "debug", "lineinfo", "lto",
                                                                          "sm", "max_registers"))


def test_opt_zero_after_opt_three_is_not_the_opt_three_binary():
    """numba-cuda-mlir's own cache=True, measured: an opt=0 kernel loads the opt-3 binary."""
    cache = KernelCache()
    optimised = cache.compile(mk.axpy, mk.AXPY_SIG, CompileConfig(sm=86, opt=3))
    unoptimised = cache.compile(mk.axpy, mk.AXPY_SIG, CompileConfig(sm=86, opt=0))
    assert unoptimised.ptx != optimised.ptx
    assert unoptimised.ptx == own_ptx(mk.axpy, mk.AXPY_SIG, CompileConfig(sm=86, opt=0))


def test_early_cutoff_where_the_bytes_repeat():
    cache = KernelCache()
    cache.compile(mk.transcendental, mk.UNARY_SIG, CompileConfig(sm=86))
    # fast math changes the MLIR (its target's flags) and not this kernel's PTX: the cubin is a hit
    again = cache.compile(mk.transcendental, mk.UNARY_SIG, CompileConfig(sm=86, fastmath=True))
    assert outcomes(again) == {"typing": Outcome.HIT, "mlir": Outcome.MISS, "ptx": Outcome.MISS,
                               "cubin": Outcome.HIT}
    assert again.stages["cubin"].cutoff


def test_a_global_the_kernel_reads_is_in_its_snapshot(monkeypatch):
    cache = KernelCache()
    before = cache.compile(mk.scaled, mk.UNARY_SIG, CompileConfig(sm=86))
    monkeypatch.setattr(mk, "ALPHA", mk.np.float32(4.0))
    after = cache.compile(mk.scaled, mk.UNARY_SIG, CompileConfig(sm=86))
    assert after.ptx != before.ptx and after.ptx == fresh(mk.scaled, mk.UNARY_SIG, CompileConfig(sm=86)).ptx
    assert outcomes(after)["typing"] is Outcome.MISS


def test_no_token_is_shared_with_numba_cuda():
    pytest.importorskip("numba_cuda", reason="numba-cuda is not installed (numba-cuda-mlir alone)")
    from . import kernels

    cache = KernelCache()
    numba = {stage: token.hex for stage, token in cache.tokens(kernels.axpy, kernels.AXPY_SIG,
                                                               CompileConfig(sm=86)).items()}
    mlir = {stage: token.hex for stage, token in cache.tokens(mk.axpy, mk.AXPY_SIG, CompileConfig(sm=86)).items()}
    assert set(numba) == {"typing", "llvm", "ptx", "cubin"} and set(mlir) == {"typing", "mlir", "ptx", "cubin"}
    assert not set(numba.values()) & set(mlir.values())


# -- what it does not take, refused by name --------------------------------------

def test_refusals_name_the_flag_and_the_fix():
    cache = KernelCache()
    with pytest.raises(ConfigError, match="--ftz.*--fastmath alone"):
        cache.compile(mk.axpy, mk.AXPY_SIG, CompileConfig(sm=86, ftz=True))
    with pytest.raises(ConfigError, match="--debug only at --opt 0"):
        cache.compile(mk.axpy, mk.AXPY_SIG, CompileConfig(sm=86, debug=True))
    with pytest.raises(ConfigError, match="backend='numba-cuda-mlr' is no backend; use numba-cuda or mlir"):
        CompileConfig(backend="numba-cuda-mlr")
    assert CompileConfig(backend="numba-cuda-mlir").backend == "mlir"

    @mlir_cuda.jit(device=True)
    def helper(x):
        return x + 1

    with pytest.raises(UnsupportedKernelError, match="helper is a device function"):
        cache.compile(helper, "float32(float32)", CompileConfig(sm=86))
    assert not any(cache.stats()[stage].misses for stage in cache.stats())  # (nothing compiled, nothing stored)


# -- a new process ---------------------------------------------------------------

SCRIPT = """
import hashlib, json, sys
from gpucache_ext import CompileConfig, KernelCache
from tests import mlir_kernels as mk
cache = KernelCache(directory=sys.argv[1])
result = cache.compile(mk.transcendental, mk.UNARY_SIG, CompileConfig(sm=86, opt=int(sys.argv[2])))
print(json.dumps({"outcomes": {s: r.outcome.name for s, r in result.stages.items()},
                  "tiers": {s: r.tier for s, r in result.stages.items()},
                  "cubin": hashlib.sha256(result.cubin).hexdigest(), "mlir": result.mlir}))
"""


@pytest.mark.slow  # (three processes, each importing numba-cuda-mlir: 15 s)
def test_a_new_process_reads_every_persisted_stage_from_disk(tmp_path):
    first = run_python(SCRIPT, tmp_path, 3, json_line=True)
    second = run_python(SCRIPT, tmp_path, 3, json_line=True)
    assert set(first["outcomes"].values()) == {"MISS"}
    assert second["outcomes"] == {"typing": "NOT_NEEDED", "mlir": "HIT", "ptx": "HIT", "cubin": "HIT"}
    assert second["tiers"]["mlir"] == "disk"
    # the same inputs give the same bytes in every process (nothing numbered by the process)
    assert (second["cubin"], second["mlir"]) == (first["cubin"], first["mlir"])
    other = run_python(SCRIPT, tmp_path, 0, json_line=True)
    assert other["outcomes"]["mlir"] == "MISS" and other["cubin"] != first["cubin"]
    here = KernelCache().compile(mk.transcendental, mk.UNARY_SIG, CompileConfig(sm=86))
    assert hashlib.sha256(here.cubin).hexdigest() == first["cubin"]
    assert json.dumps(here.mlir) == json.dumps(first["mlir"])


def test_extensions_user_code_registered_are_refused_by_name():
    """numba-cuda-mlir's extension registries are read by its typing and keyed by no token yet."""
    from numba_cuda_mlir import extending
    from numba_cuda_mlir.descriptor import mlir_target
    from numba_cuda_mlir.numba_cuda.typing.templates import Registry

    cache = KernelCache()
    cache.compile(mk.axpy, mk.AXPY_SIG, CompileConfig(sm=86))  # (numba-cuda-mlir's own registrations: none refused)
    registry = Registry()

    def clamp01(x):
        return x

    @extending.overload(clamp01, typing_registry=registry)
    def clamp01_typed(x):
        def impl(x):
            return min(max(x, 0.0), 1.0)
        return impl

    context = mlir_target.typing_context
    context.install_registry(registry)
    try:
        refused = (r"registered numba-cuda-mlir extensions \(test_extensions_user_code_registered_are_refused_"
                   r"by_name.<locals>.clamp01_typed in tests.test_mlir_backend\)")
        with pytest.raises(UnsupportedKernelError, match=refused):
            cache.compile(mk.scaled, mk.UNARY_SIG, CompileConfig(sm=86))
    finally:
        del context._registries[registry]
        context._registry_versions.pop(registry, None)


def test_a_global_a_device_function_reads_is_in_the_kernels_snapshot(monkeypatch):
    cache = KernelCache()
    before = cache.compile(mk.through_device, mk.UNARY_SIG, CompileConfig(sm=86))
    assert "device function times_factor" in before.stages["typing"].components
    monkeypatch.setattr(mk, "FACTOR", mk.np.float32(3.0))
    after = cache.compile(mk.through_device, mk.UNARY_SIG, CompileConfig(sm=86))
    assert after.stages["typing"].outcome is Outcome.MISS and after.ptx != before.ptx
    assert after.ptx == fresh(mk.through_device, mk.UNARY_SIG, CompileConfig(sm=86)).ptx


def test_the_cli_lists_shows_and_exports_mlir_entries(tmp_path):
    from .helpers import gpucache

    KernelCache(directory=tmp_path).compile(mk.axpy, mk.AXPY_SIG, CompileConfig(sm=86))
    listed = gpucache("ls", "--dir", tmp_path, "--stage", "mlir").stdout
    assert "axpy" in listed
    token = next(word for line in listed.splitlines() for word in line.split()
                 if len(word) >= 12 and all(c in "0123456789abcdef" for c in word))
    out = tmp_path / "axpy.mlir"
    gpucache("export", token, out, "--dir", tmp_path)
    assert "gpu.module" in out.read_text()
    assert "gpu.func" in gpucache("show", token, "--dir", tmp_path).stdout


def test_explain_follows_the_mlir_chain_of_a_stored_build(tmp_path):
    from .helpers import gpucache

    cache = KernelCache(directory=tmp_path)
    opt3 = cache.compile(mk.axpy, mk.AXPY_SIG, CompileConfig(sm=86))
    opt0 = cache.compile(mk.axpy, mk.AXPY_SIG, CompileConfig(sm=86, opt=0))
    diffed = gpucache("diff", opt3.stages["mlir"].token, opt0.stages["mlir"].token, "--dir", tmp_path).stdout
    assert "(MLIR sm_86)" in diffed and "O = 3" in diffed and "O = 0" in diffed, diffed  # (the MLIR, side by side)
    out = gpucache("explain", "axpy", "--dir", tmp_path).stdout
    stages = [line.split()[0] for line in out.splitlines() if line.split()[1:2] == ["built"]]
    assert stages == ["typing", "mlir", "ptx", "cubin"], out  # (not numba-cuda's llvm: the entry's backend's chain)
    assert "<- ptx built because mlir input changed" in out and "root cause: opt 3 -> 0 (mlir)" in out, out
    shown = gpucache("show", cache.compile(mk.axpy, mk.AXPY_SIG, CompileConfig(sm=86, opt=0)).stages["cubin"].token,
                     "--dir", tmp_path).stdout
    assert "<- mlir" in shown and "opt 3 -> 0" in shown, shown


def test_its_settings_and_variables_are_in_the_tokens(monkeypatch):
    """numba-cuda-mlir reads its configuration module and NUMBA_* variables as it compiles
    (NUMBA_CUDA_MLIR_DISABLE_LTO_OPT changes an LTO link): both are in every token after typing."""
    from numba_cuda_mlir.numba_cuda.core import config as its_config

    cache = KernelCache()

    def tokens():
        return {stage: token.hex for stage, token in cache.tokens(mk.axpy, mk.AXPY_SIG, CompileConfig(sm=86)).items()}

    before = tokens()
    monkeypatch.setenv("NUMBA_CUDA_MLIR_DISABLE_LTO_OPT", "1")
    by_variable = tokens()
    monkeypatch.setattr(its_config, "CUDA_LOW_OCCUPANCY_WARNINGS", 0, raising=False)
    by_setting = tokens()
    for stage in ("mlir", "ptx", "cubin"):
        assert len({before[stage], by_variable[stage], by_setting[stage]}) == 3, stage
    assert before["typing"] == by_variable["typing"]  # (typing reads numba-cuda-mlir's own code, by its version)


def test_a_device_function_is_typed_from_its_snapshot_not_the_live_dispatcher():
    """Hermetic typing, as numba-cuda's device functions have it: the kernel's
    build makes the device function anew over its snapshot (the global it
    read when hashed), and leaves the user's dispatcher uncompiled."""
    from gpucache_ext.backends.numba_cuda_mlir import translate
    from gpucache_ext.sources.snapshot import rebind
    from gpucache_ext.sources.walk import identify

    device = mk.times_factor
    before = set(device.overloads)
    result = KernelCache().compile(mk.through_device, mk.UNARY_SIG, CompileConfig(sm=86))
    assert set(device.overloads) == before  # (not compiled through the user's dispatcher)
    ident = identify(mk.through_device.py_func, False)
    proxy = translate.device_proxy(rebind, "through_device")
    rebound = rebind(ident, proxy)
    made = rebound.__globals__["times_factor"]
    assert made is not device and made.py_func.__globals__["FACTOR"] == mk.FACTOR
    assert made.py_func.__globals__ is not mk.__dict__  # (its own namespace: a later change is not read)
    assert result.ptx == fresh(mk.through_device, mk.UNARY_SIG, CompileConfig(sm=86)).ptx


def test_the_shared_tier_serves_mlir_entries_to_another_cache(redis_server):
    """numba-cuda-mlir's stages through the Redis tier, signed: another user's
    empty cache reads the mlir, ptx and cubin entries the first one built."""
    config = CompileConfig(sm=86)
    first = KernelCache(redis_url=redis_server.url, secret="team").compile(mk.axpy, mk.AXPY_SIG, config)
    other = KernelCache(redis_url=redis_server.url, secret="team")
    result = other.compile(mk.axpy, mk.AXPY_SIG, config)
    assert [result.stages[s].tier for s in ("mlir", "ptx", "cubin")] == ["shared"] * 3
    assert (result.mlir, result.ptx, result.cubin) == (first.mlir, first.ptx, first.cubin)
    assert [row.kernel for row in other.entries(stage="mlir")] == ["tests.mlir_kernels.axpy"]
    assert KernelCache(redis_url=redis_server.url, secret="another").compile(
        mk.axpy, mk.AXPY_SIG, config).stages["mlir"].tier != "shared"  # (signed by another secret: refused)


TABLE = mk.np.arange(5, dtype=mk.np.float64)


@mlir_cuda.jit
def looks_up(r, i):
    r[0] = TABLE[i[0]]


def test_a_global_arrays_constant_is_named_alike_in_every_compile():
    """numba-cuda-mlir names a global array's constant from a process-wide
    counter (constant_array_<n>): numbered afresh per kernel, two compiles
    from nothing in one process give the same PTX."""
    config, sig = CompileConfig(sm=86), "void(float64[:], int32[:])"
    first = KernelCache().compile(looks_up, sig, config).ptx
    assert "constant_array_0" in first
    assert KernelCache().compile(looks_up, sig, config).ptx == first == own_ptx(looks_up, sig, config)
