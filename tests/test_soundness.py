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
reused across targets.  Two variants (opt 1, prec_div False) rebuild the PTX
to the base config's bytes for some kernels, so the shared caches reuse the
cubin after it (early cutoff): it too must be what a fresh compile gives.

The grid's tests are `slow` (the grid compiles every config fresh); the quick
run takes a sample of the grid: the hard cases, both orders.
"""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pytest
from numba import cuda

from gpucache_ext import CompileConfig, KernelCache, samples

from .helpers import buildable


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

SMS = buildable((52, 61, 75, 80, 86, 90))  # (CUDA 13: from sm_75)
VARIANTS = {
    "base": {},
    "O0": {"opt": 0},
    "fastmath": {"fastmath": True},
    "lineinfo": {"lineinfo": True},
    "debug": {"debug": True, "opt": 0},
    "maxreg32": {"max_registers": 32},
    "lb128": {"launch_bounds": (128,)},
    # ptx-only fields whose PTX is often the default's: the cubin is then
    # reused (early cutoff).  opt 1 changes axpy's and matmul's PTX, not the
    # other kernels'; prec_div changes none (no kernel here divides floats).
    "O1": {"opt": 1},
    "precdiv": {"prec_div": False},
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
# The quick run's sample: where lowering reads the target (tanh under fastmath
# across sm_75, the float64 atomic add across sm_60), and a cubin early cutoff reuses.
# (CUDA 13 builds no target below either threshold: there, two targets above them)
QUICK_GRID = [("tanh", v, sm) for v in ("base", "fastmath") for sm in buildable((61, 75, 86))[:2]] + [
    ("atomic_f64", v, sm) for v in ("base", "precdiv") for sm in buildable((52, 61, 75, 80))[:2]]
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
@pytest.mark.slow
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


@pytest.fixture(scope="module")
def shared_fatbins():
    """Every kernel and variant built for all the grid's targets at once
    (`compile_fatbin`: the targets' ptx and cubin stages run in threads), in
    one cache, the PTX of the lowest target where the kernel has one alone."""
    cache = KernelCache()
    built = {}
    for kernel, variant in itertools.product(KERNELS, VARIANTS):
        func, sig = KERNELS[kernel]
        config = make_config(variant, SMS[0])
        built[(kernel, variant)] = cache.compile_fatbin(func, sig, config, sms=SMS)
    return built


@pytest.mark.parametrize("key", GRID, ids=GRID_IDS)
@pytest.mark.slow
def test_multi_target_builds_match_fresh_single_target_compiles(key, shared_fatbins, fresh):
    kernel, variant, sm = key
    built = shared_fatbins[(kernel, variant)]
    got, want = built.per_target[sm], fresh[key]
    for stage in ARTIFACT_STAGES:
        assert artifact(got, stage) == artifact(want, stage), f"{describe(key)}: {stage} differs"
        assert got.stages[stage].token == want.stages[stage].token, f"{describe(key)}: {stage} token differs"
    assert built.cubins[sm] == want.cubin


@pytest.mark.slow
def test_fresh_compiles_miss_everything(fresh):
    for key, res in fresh.items():
        hits = [stage for stage, layer in res.stages.items() if layer.hit]
        assert not hits, f"{describe(key)}: a brand-new cache reported hits at {hits}"


# ---------------------------------------------------------------------------
# Token precision: an equal token must imply an equal artifact, within one
# kernel across configs and across kernels.


@pytest.mark.parametrize("order", ["forward", "reverse"])
@pytest.mark.parametrize("stage", ARTIFACT_STAGES)
@pytest.mark.slow
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


@pytest.mark.slow
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
    # The variants that exercise early cutoff: the same PTX as base for some
    # kernels (every kernel here, for prec_div), other PTX for others.
    same_ptx = {variant: {kernel for kernel in KERNELS for sm in SMS
                          if fresh[(kernel, variant, sm)].ptx == fresh[(kernel, "base", sm)].ptx}
                for variant in ("O1", "precdiv")}
    assert same_ptx == {"O1": {"tanh", "atomic_f64", "globals"}, "precdiv": set(KERNELS)}


# ---------------------------------------------------------------------------
# Reuse actually happens, and target-dependent lowering is not reused.

AXPY_SIG = KERNELS["axpy"][1]


@pytest.mark.slow
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


@pytest.mark.slow
def test_axpy_lowering_reused_in_grid(shared_forward):
    """In the shared cache, axpy's lowering never reads the target: after the
    first sm of each variant, every compile hits llvm.  The cubin is compiled,
    unless the PTX came out as the base config's at that sm (compiled before
    it) and the cubin reads nothing else that differs: then it is base's
    cubin, reused (early cutoff)."""
    for variant in VARIANTS:
        for sm in SMS[1:]:
            res = shared_forward[("axpy", variant, sm)]
            where = f"{describe(('axpy', variant, sm))}\n{res.explain()}"
            assert res.stages["typing"].hit, where
            assert res.stages["llvm"].hit, where
            base = shared_forward[("axpy", "base", sm)]
            cutoff = variant != "base" and res.ptx == base.ptx and \
                make_config(variant, sm).stage_fields("cubin") == make_config("base", sm).stage_fields("cubin")
            assert res.stages["cubin"].hit == res.stages["cubin"].cutoff == cutoff, where
            assert cutoff == (variant == "precdiv"), where  # (O1 changes axpy's PTX)


@pytest.mark.parametrize("first_sm, second_sm", [(86, 52), (52, 86)])
@pytest.mark.slow
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
@pytest.mark.slow
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
@pytest.mark.slow
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
@pytest.mark.slow
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


# ---------------------------------------------------------------------------
# Reuse precision (issue 12; bench/reuse_precision.py prints it).  Over the
# pairs of configs that differ in one field, per stage: of the pairs whose
# outputs are byte-equal, the share that is also shared by token (reused, not
# rebuilt).  A pair that differs in a field the stage itself reads (opt 1 vs
# 3 at ptx) can only be found equal by building it, under any token; the
# others ("reusable": only what came before the stage differs) are what early
# cutoff should share, all of them.

COUNTS = ("byte_equal", "shared", "reusable", "reused", "unsound")


def single_field_pairs():
    """(variant, sm) pairs that differ in one field: a variant against the
    base config at the same sm, or one variant at two sms."""
    for variant in VARIANTS:
        if variant == "base":
            continue
        for sm in SMS:
            yield ("base", sm), (variant, sm)
    for variant in VARIANTS:
        for sm_a, sm_b in itertools.combinations(SMS, 2):
            yield (variant, sm_a), (variant, sm_b)


def reuse_counts(results):
    """Per stage, and over all stages ("all"), for the single-field pairs of
    `results` ({(kernel, variant, sm): CompileResult}): how many are
    byte-equal, how many of those share the token; how many of those are
    reusable (the fields the stage reads are equal) and how many of these
    share the token; how many share a token with other bytes (unsound)."""
    counts = {stage: dict.fromkeys(COUNTS, 0) for stage in ARTIFACT_STAGES}
    for kernel in KERNELS:
        for a, b in single_field_pairs():
            first, second = results[(kernel, *a)], results[(kernel, *b)]
            for stage in ARTIFACT_STAGES:
                same_bytes = artifact(first, stage) == artifact(second, stage)
                same_token = first.stages[stage].token == second.stages[stage].token
                reusable = same_bytes and make_config(*a).stage_fields(stage) == make_config(*b).stage_fields(stage)
                row = counts[stage]
                row["byte_equal"] += same_bytes
                row["shared"] += same_bytes and same_token
                row["reusable"] += reusable
                row["reused"] += reusable and same_token
                row["unsound"] += same_token and not same_bytes
    counts["all"] = {key: sum(row[key] for row in counts.values()) for key in COUNTS}
    return counts


@pytest.mark.slow
def test_reuse_precision(shared_forward):
    counts = reuse_counts(shared_forward)
    summary = "\n".join(f"{stage}: {row}" for stage, row in counts.items())
    assert counts["all"]["unsound"] == 0, summary
    # the grid has cubins that early cutoff reuses (O1 and precdiv keep some PTX) ...
    assert counts["cubin"]["reusable"] >= 30, summary
    # ... and reuses: at every stage, the byte-equal outputs whose own inputs
    # are equal share their token
    for row in counts.values():
        assert row["reused"] >= 0.95 * row["reusable"], summary


def test_a_sample_of_the_grid_serves_what_fresh_compiles_give_in_either_order():
    fresh = {key: compile_pair(KernelCache(), key) for key in QUICK_GRID}
    for order in (QUICK_GRID, QUICK_GRID[::-1]):
        cache = KernelCache()
        served = {key: compile_pair(cache, key) for key in order}
        for key in QUICK_GRID:
            got, want = served[key], fresh[key]
            for stage in ARTIFACT_STAGES:
                assert artifact(got, stage) == artifact(want, stage), f"{describe(key)}: {stage} differs"
                assert got.stages[stage].token == want.stages[stage].token, f"{describe(key)}: {stage} token"
        assert any(result.stages["cubin"].cutoff for result in served.values())  # precdiv: the same PTX
    # the hard cases are hard: the target changes the lowering (CUDA 13 builds neither sm_52 nor sm_61)
    assert "tanh.approx.f32" in fresh[("tanh", "fastmath", 75)].llvm_ir
    if ("tanh", "fastmath", 61) in fresh:
        assert "tanh.approx" not in fresh[("tanh", "fastmath", 61)].llvm_ir
        assert ATOMIC_NATIVE in fresh[("atomic_f64", "base", 61)].llvm_ir
        assert ATOMIC_EMULATED in fresh[("atomic_f64", "base", 52)].llvm_ir
    else:
        assert ATOMIC_NATIVE in fresh[("atomic_f64", "base", 75)].llvm_ir
