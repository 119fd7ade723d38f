"""Differential soundness test of the staged cache (CPU only, no GPU needed).

Every (kernel, config) pair of a grid is compiled

* in one shared `KernelCache`, in an order that maximises reuse between
  stages (the sm loop innermost, so lowering is reused across targets),
* in a second shared cache, in the reverse order (other reuse paths: e.g. the
  debug and lineinfo variants share a typing entry, and which comes first
  changes),
* in a brand-new `KernelCache` of its own ("fresh").

A cache is sound when what it serves is what a compile from nothing gives, so
the NVVM IR, PTX and cubin of every pair must be byte-identical across all
three.  Tokens must be precise enough: equal tokens imply equal artifacts.
The kernels include the cases where lowering reads the target (float64
atomic add below sm_60, tanh under fastmath below sm_75), which must not be
reused across targets.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from numba import cuda

from gpucache_ext import CompileConfig, KernelCache, samples

pytestmark = pytest.mark.slow  # the differential grid compiles every config fresh

# ---------------------------------------------------------------------------
# Kernels (module level, so their identity includes module globals)


@cuda.jit(device=True)
def axpy_op(a, x, y):
    return a * x + y


@cuda.jit
def axpy(out, x, y):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = axpy_op(np.float32(2.5), x[i], y[i])


@cuda.jit
def tanh_kernel(out, x):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = math.tanh(x[i])


# Two of the shared samples (gpucache_ext/samples.py); their globals are their own.
atomic_f64 = samples.load(samples.TOTAL)["total"]
matmul_tiled = samples.load(samples.MATMUL)["matmul"]


SCALE = 1.5
COEFFS = (0.5, 0.25, 0.125)


@cuda.jit
def poly_globals(out, x):
    i = cuda.grid(1)
    if i < out.size:
        v = x[i]
        out[i] = SCALE * (COEFFS[0] + COEFFS[1] * v + COEFFS[2] * v * v)


KERNELS = {
    "axpy": (axpy, "void(float32[:], float32[:], float32[:])"),
    "tanh": (tanh_kernel, "void(float32[:], float32[:])"),
    "atomic_f64": (atomic_f64, samples.TOTAL_SIG),
    "matmul": (matmul_tiled, samples.MATMUL_SIG),
    "globals": (poly_globals, "void(float32[:], float32[:])"),
}

# ---------------------------------------------------------------------------
# Config grid: every variant at every sm, for every kernel.

SMS = (52, 61, 75, 80, 86, 90)
VARIANTS = {
    "base": {},
    "O0": {"opt": 0},
    "fastmath": {"fastmath": True},
    "lineinfo": {"lineinfo": True},
    "debug": {"debug": True, "opt": 0},
    "maxreg32": {"max_registers": 32},
    "lb128": {"launch_bounds": (128,)},
}
BASE = dict(opt=3, fastmath=False, debug=False, lineinfo=False,
            max_registers=None, launch_bounds=None, lto=False)


def make_config(variant: str, sm: int) -> CompileConfig:
    return CompileConfig(sm=sm, **{**BASE, **VARIANTS[variant]})


# (kernel, variant, sm), in the order that maximises reuse: kernel, then
# variant, then sm innermost (only sm changes between neighbours, so typing
# and, unless lowering reads the target, lowering are reused).
GRID = [(k, v, sm) for k in KERNELS for v in VARIANTS for sm in SMS]
GRID_IDS = [f"{k}-{v}-sm{sm}" for k, v, sm in GRID]
ARTIFACT_STAGES = ("llvm", "ptx", "cubin")


def artifact(res, stage):
    if stage == "llvm":
        return res.llvm_ir
    if stage == "ptx":
        return res.ptx
    if stage == "cubin":
        return res.cubin
    raise ValueError(stage)


def compile_pair(cache, key):
    kernel, variant, sm = key
    func, sig = KERNELS[kernel]
    return cache.compile(func, sig, make_config(variant, sm))


def describe(key):
    kernel, variant, sm = key
    return f"kernel {kernel}, config {variant} ({make_config(variant, sm).summary()})"


# ---------------------------------------------------------------------------
# Fixtures: compile the grid once per module.


@pytest.fixture(scope="module")
def shared_forward():
    cache = KernelCache()
    return {key: compile_pair(cache, key) for key in GRID}


@pytest.fixture(scope="module")
def shared_reverse():
    cache = KernelCache()
    return {key: compile_pair(cache, key) for key in reversed(GRID)}


@pytest.fixture(scope="module")
def fresh():
    return {key: compile_pair(KernelCache(), key) for key in GRID}


# ---------------------------------------------------------------------------
# Soundness: shared caches serve exactly what a fresh compile produces.


@pytest.mark.parametrize("key", GRID, ids=GRID_IDS)
def test_shared_cache_matches_fresh(key, shared_forward, shared_reverse, fresh):
    want = fresh[key]
    problems = []
    for order, results in (("forward", shared_forward), ("reverse", shared_reverse)):
        got = results[key]
        for stage in ARTIFACT_STAGES:
            if artifact(got, stage) != artifact(want, stage):
                layer = got.stages[stage]
                problems.append(
                    f"stage {stage}: shared cache ({order} order, "
                    f"{'hit' if layer.hit else 'miss'}) differs from a fresh compile"
                )
        if got.entry_name != want.entry_name:
            problems.append(f"entry name: shared cache ({order} order) differs from a fresh compile")
        for stage in ("llvm", "ptx", "cubin"):
            if got.stages[stage].token != want.stages[stage].token:
                problems.append(
                    f"stage {stage}: token in the shared cache ({order} order) differs from "
                    "the fresh compile's (tokens must be a function of the inputs only)"
                )
    assert not problems, f"{describe(key)}:\n  " + "\n  ".join(problems)


def test_fresh_compiles_miss_everything(fresh):
    for key, res in fresh.items():
        hits = [stage for stage, layer in res.stages.items() if layer.hit]
        assert not hits, f"{describe(key)}: a brand-new cache reported hits at {hits}"


# ---------------------------------------------------------------------------
# Token precision: an equal token must imply an equal artifact, within one
# kernel across configs and across kernels.


@pytest.mark.parametrize("order", ["forward", "reverse"])
@pytest.mark.parametrize("stage", ARTIFACT_STAGES)
def test_equal_token_implies_equal_artifact(stage, order, shared_forward, shared_reverse, fresh):
    results = {"forward": shared_forward, "reverse": shared_reverse}[order]
    by_token = {}
    problems = []
    # The fresh results too: a token must mean the same artifact in any cache.
    for source, res_map in ((order, results), ("fresh", fresh)):
        for key, res in res_map.items():
            token = res.stages[stage].token
            seen = by_token.setdefault(token, (source, key, artifact(res, stage)))
            if seen[2] != artifact(res, stage):
                problems.append(
                    f"stage {stage}: token {token[:12]} is shared by {describe(seen[1])} "
                    f"[{seen[0]}] and {describe(key)} [{source}], whose {stage} artifacts differ"
                )
    assert not problems, "\n".join(problems[:20]) + (
        f"\n... and {len(problems) - 20} more" if len(problems) > 20 else "")


def test_artifacts_differ_where_configs_should_matter(fresh):
    """Guard against a vacuous grid: the fields really change the artifacts."""
    for kernel in KERNELS:
        for sm in (75, 86):
            base = fresh[(kernel, "base", sm)]
            where = f"kernel {kernel}, sm_{sm}"
            for variant in ("lineinfo", "debug", "lb128"):
                assert fresh[(kernel, variant, sm)].llvm_ir != base.llvm_ir, (
                    f"{where}: config {variant} gives the same llvm_ir as base")
            assert fresh[(kernel, "O0", sm)].ptx != base.ptx, f"{where}: opt=0 gives the same ptx"
            # max_registers only reaches nvJitLink: same ptx, different cubin.
            assert fresh[(kernel, "maxreg32", sm)].ptx == base.ptx, (
                f"{where}: config maxreg32, stage ptx differs from base (max_registers "
                "should only reach the cubin stage)")
        # ptx/cubin always depend on the target
        cubins = {fresh[(kernel, "base", sm)].cubin for sm in SMS}
        assert len(cubins) == len(SMS), kernel


# ---------------------------------------------------------------------------
# Reuse actually happens, and target-dependent lowering is not reused.

AXPY_SIG = KERNELS["axpy"][1]


def test_axpy_lowering_reused_when_only_sm_changes(fresh):
    cache = KernelCache()
    first = cache.compile(axpy, AXPY_SIG, make_config("base", 80))
    assert not first.stages["llvm"].hit
    second = cache.compile(axpy, AXPY_SIG, make_config("base", 86))
    assert second.stages["typing"].hit
    assert second.stages["llvm"].hit, second.explain()
    assert not second.stages["ptx"].hit, second.explain()
    assert not second.stages["cubin"].hit, second.explain()
    assert second.llvm_ir == first.llvm_ir
    want = fresh[("axpy", "base", 86)]
    assert (second.llvm_ir, second.ptx, second.cubin) == (want.llvm_ir, want.ptx, want.cubin)


def test_axpy_lowering_reused_in_grid(shared_forward):
    """In the shared cache, axpy's lowering never reads the target: after the
    first sm of each variant, every compile hits llvm and compiles ptx."""
    for variant in VARIANTS:
        for sm in SMS[1:]:
            res = shared_forward[("axpy", variant, sm)]
            where = f"{describe(('axpy', variant, sm))}\n{res.explain()}"
            assert res.stages["typing"].hit, where
            assert res.stages["llvm"].hit, where
            assert not res.stages["cubin"].hit, where


@pytest.mark.parametrize("first_sm, second_sm", [(86, 52), (52, 86)])
def test_atomic_f64_lowering_not_reused_across_sm60(first_sm, second_sm, fresh):
    func, sig = KERNELS["atomic_f64"]
    cache = KernelCache()
    a = cache.compile(func, sig, make_config("base", first_sm))
    b = cache.compile(func, sig, make_config("base", second_sm))
    assert not b.stages["llvm"].hit, b.explain()
    assert b.llvm_ir != a.llvm_ir
    assert b.stages["llvm"].token != a.stages["llvm"].token
    for res, sm in ((a, first_sm), (b, second_sm)):
        want = fresh[("atomic_f64", "base", sm)]
        assert (res.llvm_ir, res.ptx, res.cubin) == (want.llvm_ir, want.ptx, want.cubin), sm


@pytest.mark.parametrize("first_sm, second_sm", [(75, 70), (70, 75)])
def test_tanh_fastmath_lowering_not_reused_across_sm75(first_sm, second_sm):
    func, sig = KERNELS["tanh"]
    cache = KernelCache()
    a = cache.compile(func, sig, make_config("fastmath", first_sm))
    b = cache.compile(func, sig, make_config("fastmath", second_sm))
    assert not b.stages["llvm"].hit, b.explain()
    assert b.llvm_ir != a.llvm_ir
    assert b.stages["llvm"].token != a.stages["llvm"].token
    by_sm = {first_sm: a, second_sm: b}
    assert "tanh.approx.f32" in by_sm[75].llvm_ir and "tanh.approx.f32" in by_sm[75].ptx
    assert "tanh.approx" not in by_sm[70].llvm_ir and "tanh.approx" not in by_sm[70].ptx
    assert "__nv_tanhf" in by_sm[70].llvm_ir
    fresh70 = KernelCache().compile(func, sig, make_config("fastmath", 70))
    assert (by_sm[70].llvm_ir, by_sm[70].ptx, by_sm[70].cubin) == (
        fresh70.llvm_ir, fresh70.ptx, fresh70.cubin)


# ---------------------------------------------------------------------------
# The IR of the hard cases, over the whole grid.

ATOMIC_NATIVE = "llvm.nvvm.atomic.load.add.f64"
ATOMIC_EMULATED = "___numba_atomic_double_add"


@pytest.mark.parametrize("source", ["fresh", "shared_forward", "shared_reverse"])
def test_atomic_f64_ir_per_target(source, request):
    results = request.getfixturevalue(source)
    for variant in VARIANTS:
        for sm in SMS:
            res = results[("atomic_f64", variant, sm)]
            where = f"{describe(('atomic_f64', variant, sm))} [{source}]"
            # The state space is dropped at opt=0 (atom.cas.b64, not atom.global.cas.b64).
            native_ptx = re.search(r"\batom(\.global)?\.add\.f64\b", res.ptx)
            cas_ptx = re.search(r"\batom(\.global)?\.cas\.b64\b", res.ptx)
            if sm < 60:
                assert ATOMIC_EMULATED in res.llvm_ir, where
                assert ATOMIC_NATIVE not in res.llvm_ir, where
                assert not native_ptx, where
                assert cas_ptx, where
            else:
                assert ATOMIC_NATIVE in res.llvm_ir, where
                assert ATOMIC_EMULATED not in res.llvm_ir, where
                assert native_ptx, where


@pytest.mark.parametrize("source", ["fresh", "shared_forward", "shared_reverse"])
def test_tanh_ir_per_target(source, request):
    results = request.getfixturevalue(source)
    for variant in VARIANTS:
        for sm in SMS:
            res = results[("tanh", variant, sm)]
            where = f"{describe(('tanh', variant, sm))} [{source}]"
            approx = VARIANTS[variant].get("fastmath", False) and sm >= 75
            if approx:
                assert "tanh.approx.f32" in res.llvm_ir, where
                assert "tanh.approx.f32" in res.ptx, where
                assert "__nv_tanhf" not in res.llvm_ir, where
            else:
                assert "tanh.approx" not in res.llvm_ir, where
                assert "tanh.approx" not in res.ptx, where
                assert "__nv_tanhf" in res.llvm_ir, where
