"""KernelCache behaviour: hits, partial recompiles, globals and device
functions from elsewhere, explanations, bounds, errors and threads."""

import dataclasses
import gc
import json
import threading

import numpy as np
import pytest

from gpucache_ext import STAGES, CompileConfig, CompileError, KernelCache, Outcome, UnsupportedKernelError

from . import kernels
from .helpers import DEVICE_READS_G, needs_pre_turing, notebook_namespace, reading, run_cell


def missed(result):
    return [s for s, layer in result.stages.items() if not layer.hit]


def test_exact_repeat_compiles_nothing():
    cache = KernelCache()
    config = CompileConfig(sm=80)
    first = cache.compile(kernels.axpy, kernels.AXPY_SIG, config)
    assert missed(first) == ["typing", "llvm", "ptx", "cubin"]
    before = cache.stats()
    again = cache.compile(kernels.axpy, kernels.AXPY_SIG, config)
    assert again.hit and missed(again) == []
    assert all(layer.tier == "memory" for layer in again.stages.values())
    after = cache.stats()
    assert all(after[s].misses == before[s].misses for s in after)
    assert all(after[s].hits == before[s].hits + 1 for s in STAGES)
    assert again.cubin == first.cubin and again.ptx == first.ptx and again.llvm_ir == first.llvm_ir
    assert first.entry_name in first.ptx
    assert first.cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize(
    "change, expect_missed",
    [
        (dict(sm=86), ["ptx", "cubin"]),
        (dict(opt=0), ["ptx", "cubin"]),
        (dict(max_registers=32), ["cubin"]),
        (dict(fastmath=True), ["llvm", "ptx", "cubin"]),
        (dict(launch_bounds=128), ["llvm", "ptx", "cubin"]),
        (dict(ftz=True), ["ptx", "cubin"]),
        (dict(lto=True), ["ptx", "cubin"]),
    ],
)
def test_config_change_recompiles_only_the_stages_that_read_it(change, expect_missed):
    cache = KernelCache()
    base = CompileConfig(sm=80)
    cache.compile(kernels.axpy, kernels.AXPY_SIG, base)
    result = cache.compile(kernels.axpy, kernels.AXPY_SIG, base.replace(**change))
    assert missed(result) == expect_missed
    fresh = KernelCache().compile(kernels.axpy, kernels.AXPY_SIG, base.replace(**change))
    assert result.cubin == fresh.cubin and result.ptx == fresh.ptx


def test_miss_reasons_name_the_changed_field():
    cache = KernelCache()
    cache.compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=80))
    result = cache.compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=80, opt=1))
    assert result.stages["ptx"].reasons == ("opt 3 -> 1",)
    assert "ptx input changed" in result.stages["cubin"].reasons
    assert "opt 3 -> 1" in result.explain()
    assert cache.recent_misses()[-1]["stage"] == "cubin"
    first = KernelCache().compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=80))
    assert first.stages["typing"].reasons == ("first compile of copy",)


def test_changing_a_global_recompiles_and_restoring_it_hits(monkeypatch):
    cache = KernelCache()
    config = CompileConfig(sm=80)
    first = cache.compile(kernels.copy, kernels.COPY_SIG, config)
    monkeypatch.setattr(kernels, "OFFSETS", (5.0, 2.0))
    changed = cache.compile(kernels.copy, kernels.COPY_SIG, config)
    assert missed(changed) == ["typing", "llvm", "ptx", "cubin"]
    assert any("global OFFSETS (1.0, 2.0) -> (5.0, 2.0)" in r for r in changed.stages["typing"].reasons)
    assert changed.ptx != first.ptx  # the constant is frozen into the code
    monkeypatch.setattr(kernels, "OFFSETS", (1.0, 2.0))
    assert cache.compile(kernels.copy, kernels.COPY_SIG, config).hit


def test_global_read_by_a_device_function_recompiles_its_caller(monkeypatch):
    cache = KernelCache()
    config = CompileConfig(sm=80)
    first = cache.compile(kernels.axpy, kernels.AXPY_SIG, config)
    monkeypatch.setattr(kernels, "SCALE", 3.0)
    changed = cache.compile(kernels.axpy, kernels.AXPY_SIG, config)
    assert "typing" in missed(changed)
    assert "global SCALE 2.0 -> 3.0 (read by twice)" in changed.stages["typing"].reasons
    assert changed.llvm_ir != first.llvm_ir
    assert changed.llvm_ir == KernelCache().compile(kernels.axpy, kernels.AXPY_SIG, config).llvm_ir


def test_device_function_edited_in_another_cell_recompiles_the_kernel():
    ns = notebook_namespace()
    run_cell(ns, """
        @cuda.jit(device=True)
        def helper(x):
            return x + 1.0
    """)
    run_cell(ns, """
        def kern(r, x):
            i = cuda.grid(1)
            if i < r.size:
                r[i] = helper(x[i])
    """)
    cache = KernelCache()
    config = CompileConfig(sm=86)
    first = cache.compile(ns["kern"], "void(float32[:], float32[:])", config)
    run_cell(ns, """
        @cuda.jit(device=True)
        def helper(x):
            return x + 2.0
    """)
    second = cache.compile(ns["kern"], "void(float32[:], float32[:])", config)
    assert missed(second) == ["typing", "llvm", "ptx", "cubin"]
    assert "device function helper: code changed" in second.stages["typing"].reasons
    assert "2.0" in second.llvm_ir or "0x4000000000000000" in second.llvm_ir
    assert second.llvm_ir != first.llvm_ir


@needs_pre_turing  # (float64 atomic add is a CAS loop below sm_60)
def test_device_functions_follow_the_kernels_config_and_target():
    ns = notebook_namespace()
    run_cell(ns, """
        @cuda.jit(device=True)
        def add(arr, v):
            cuda.atomic.add(arr, 0, v)

        def kern(r, x):
            i = cuda.grid(1)
            if i < x.size:
                add(r, x[i])
    """)
    cache = KernelCache()
    sig = "void(float64[:], float64[:])"
    new = cache.compile(ns["kern"], sig, CompileConfig(sm=86))
    old = cache.compile(ns["kern"], sig, CompileConfig(sm=52))
    # float64 atomic add lowers to a CAS loop below sm_60, inside the device function
    assert "___numba_atomic_double_add" in old.llvm_ir
    assert "___numba_atomic_double_add" not in new.llvm_ir
    assert not old.stages["llvm"].hit
    assert old.cubin == KernelCache().compile(ns["kern"], sig, CompileConfig(sm=52)).cubin
    fast = cache.compile(ns["kern"], sig, CompileConfig(sm=86, fastmath=True))
    assert fast.llvm_ir != new.llvm_ir


def test_closure_variables_enter_the_token():
    ns = notebook_namespace()
    run_cell(ns, """
        def make(offset):
            def kern(r, x):
                i = cuda.grid(1)
                if i < r.size:
                    r[i] = x[i] + offset
            return kern
    """)
    cache = KernelCache()
    a = cache.compile(ns["make"](1.5), kernels.COPY_SIG, CompileConfig(sm=80))
    b = cache.compile(ns["make"](2.5), kernels.COPY_SIG, CompileConfig(sm=80))
    assert not b.stages["typing"].hit
    assert any("closure offset 1.5 -> 2.5" in r for r in b.stages["typing"].reasons)
    assert a.ptx != b.ptx
    assert cache.compile(ns["make"](1.5), kernels.COPY_SIG, CompileConfig(sm=80)).hit


def test_numpy_global_contents_enter_the_token():
    ns = notebook_namespace()
    ns["TABLE"] = np.arange(4, dtype=np.float32)
    run_cell(ns, """
        def kern(r, x):
            i = cuda.grid(1)
            if i < r.size:
                r[i] = x[i] * TABLE[i % 4]
    """)
    cache = KernelCache()
    cache.compile(ns["kern"], kernels.COPY_SIG, CompileConfig(sm=80))
    ns["TABLE"] = np.arange(4, dtype=np.float32) * 2
    again = cache.compile(ns["kern"], kernels.COPY_SIG, CompileConfig(sm=80))
    assert not again.stages["typing"].hit


@pytest.mark.filterwarnings("ignore::numba.cuda.core.errors.NumbaDebugInfoWarning")
def test_source_location_matters_only_with_debug_info():
    source = """
        def kern(r, x):
            i = cuda.grid(1)
            if i < r.size:
                r[i] = x[i] * 3.0
    """
    results = {}
    for line in (1, 40):
        ns = notebook_namespace()
        run_cell(ns, source, first_line=line)
        for lineinfo in (False, True):
            results[line, lineinfo] = KernelCache().compile(
                ns["kern"], kernels.COPY_SIG, CompileConfig(sm=80, lineinfo=lineinfo))
    plain_1, plain_40 = results[1, False], results[40, False]
    assert plain_1.stages["typing"].token == plain_40.stages["typing"].token
    assert plain_1.ptx == plain_40.ptx and plain_1.cubin == plain_40.cubin
    info_1, info_40 = results[1, True], results[40, True]
    assert info_1.stages["typing"].token != info_40.stages["typing"].token
    assert info_1.ptx != info_40.ptx


def test_numba_settings_enter_the_llvm_token(monkeypatch):
    """NUMBA_OPT is read by lowering (debug info's isOptimized), so it is in the llvm token."""
    cache = KernelCache()
    config = CompileConfig(sm=80, debug=True, opt=0)
    monkeypatch.setenv("NUMBA_OPT", "3")
    before = cache.tokens(kernels.copy, kernels.COPY_SIG, config)
    optimised = cache.compile(kernels.copy, kernels.COPY_SIG, config)
    monkeypatch.setenv("NUMBA_OPT", "0")
    after = cache.tokens(kernels.copy, kernels.COPY_SIG, config)
    assert before["typing"].hex == after["typing"].hex
    assert before["llvm"].hex != after["llvm"].hex
    unoptimised = cache.compile(kernels.copy, kernels.COPY_SIG, config)
    assert not unoptimised.stages["llvm"].hit
    assert any(r.startswith("numba settings") for r in unoptimised.stages["llvm"].reasons)
    assert "isOptimized: true" in optimised.llvm_ir
    assert "isOptimized: false" in unoptimised.llvm_ir


def test_typing_error_names_the_kernel_and_leaves_no_entry():
    ns = notebook_namespace()
    run_cell(ns, """
        def broken(r, x):
            i = cuda.grid(1)
            r[i] = undefined_name + x[i]
    """, filename="<cell-7>")
    cache = KernelCache()
    with pytest.raises(CompileError) as info:
        cache.compile(ns["broken"], kernels.COPY_SIG, CompileConfig(sm=80))
    assert info.value.stage == "typing" and info.value.kernel == "__main__.broken"
    assert "undefined_name" in str(info.value)
    assert all(v.entries == 0 for v in cache.stats().values())


def test_bad_inputs_are_clear_errors():
    cache = KernelCache()
    with pytest.raises(TypeError, match="invalid kernel signature"):
        cache.compile(kernels.copy, "void(notatype[:])")
    with pytest.raises(TypeError, match="must return void"):
        cache.compile(kernels.copy, "float32(float32[:], float32[:])")
    with pytest.raises(TypeError, match="CompileConfig"):
        cache.compile(kernels.copy, kernels.COPY_SIG, {"sm": 80})
    with pytest.raises(TypeError, match="Python function"):
        cache.compile(42, kernels.COPY_SIG)
    ns = notebook_namespace()
    ns["THING"] = object()
    run_cell(ns, """
        def kern(r, x):
            r[0] = THING
    """)
    with pytest.raises(UnsupportedKernelError, match="pass it to the kernel as an argument"):
        cache.compile(ns["kern"], kernels.COPY_SIG)
    with pytest.raises(ValueError, match="unknown stage"):
        cache.clear("sass")
    with pytest.raises(ValueError, match="max_entries"):
        KernelCache(max_entries={"cubn": 3})


def test_memory_tiers_are_bounded_lru():
    cache = KernelCache(max_entries=2)
    for sm in (75, 80, 86):
        cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=sm))
    stats = cache.stats()
    assert stats["cubin"].entries == 2 and stats["cubin"].evictions == 1
    again = cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=75))
    assert not again.stages["cubin"].hit
    assert again.stages["cubin"].reasons == ("entry was evicted or cleared",)
    bytes_before = cache.stats()["ptx"].bytes
    assert bytes_before > 0
    cache.clear("ptx")
    assert cache.stats()["ptx"] == dataclasses.replace(cache.stats()["ptx"], entries=0, bytes=0)
    assert cache.stats()["cubin"].entries == 2


def test_concurrent_compiles_from_threads_match_serial_results():
    configs = [CompileConfig(sm=sm, opt=opt) for sm in (75, 80, 86) for opt in (0, 3)]
    expected = {c: KernelCache().compile(kernels.axpy, kernels.AXPY_SIG, c).cubin for c in configs}
    cache = KernelCache()
    results, errors = [], []

    def worker(order):
        try:
            for config in order:
                results.append((config, cache.compile(kernels.axpy, kernels.AXPY_SIG, config).cubin))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(configs[i:] + configs[:i],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 4 * len(configs)
    assert all(cubin == expected[config] for config, cubin in results)


def test_explain_predicts_misses_without_compiling():
    cache = KernelCache()
    cache.compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=80))
    before = cache.stats()
    predicted = cache.explain(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=80, max_registers=64))
    assert predicted == {"typing": (), "llvm": (), "ptx": (), "cubin": ("max_registers None -> 64",)}
    assert cache.explain(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=80)) == dict.fromkeys(
        ("typing", "llvm", "ptx", "cubin"), ())
    assert cache.stats() == before
    assert cache.explain(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=80))["typing"] == (
        "first compile of copy",)


def test_lowered_device_functions_are_unregistered_when_dropped():
    from numba.cuda.descriptor import cuda_target

    from gpucache_ext.backends.numba_cuda.stages.device import _DeviceImplKey

    def registered():
        return sum(isinstance(k, _DeviceImplKey) for k in cuda_target.target_context._defns)

    gc.collect()
    start = registered()
    cache = KernelCache()
    for fastmath in (False, True):
        cache.compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=80, fastmath=fastmath))
    # one lowering serves both: as numba, a device function is lowered with
    # its own options, not the kernel's fastmath
    assert registered() == start + 1
    del cache
    gc.collect()
    assert registered() == start


def test_forced_cc_environment_has_no_effect(monkeypatch):
    """NUMBA_FORCE_CUDA_CC would change numba's arch; the config's sm decides here."""
    plain = KernelCache().compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))
    monkeypatch.setenv("NUMBA_FORCE_CUDA_CC", "7.0")
    monkeypatch.setenv("NUMBA_CUDA_DEFAULT_PTX_CC", "7.0")
    forced = KernelCache().compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))
    assert ".target sm_86" in forced.ptx
    assert forced.ptx == plain.ptx and forced.cubin == plain.cubin
    assert forced.stages["cubin"].token == plain.stages["cubin"].token


def test_entries_evict_and_recompile():
    cache = KernelCache()
    first = cache.compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=80))
    cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86, opt=1))
    rows = cache.entries()
    assert len(rows) == 8 and {r.stage for r in rows} == {"typing", "llvm", "ptx", "cubin"}
    cubins = cache.entries(stage="cubin", kernel="axpy")
    assert len(cubins) == 1
    row = cubins[0]
    assert row.token == first.stages["cubin"].token and row.tiers == ("memory",)
    assert row.config == "sm_80" and "float32" in row.signature
    assert row.reasons == ("first compile of axpy",) and row.bytes > 0 and row.seconds > 0
    assert cache.entries(kernel="tests.kernels.copy")[0].config == "sm_86 opt=1"
    assert cache.entry("cubin", row.token).artifact.cubin == first.cubin

    assert cache.stats()["cubin"].evictions == 0
    assert cache.evict("cubin", row.token) and not cache.evict("cubin", row.token)
    assert cache.entries(stage="cubin", kernel="axpy") == []
    assert cache.stats()["cubin"].evictions == 1  # the asked-for eviction counts, once
    again = cache.compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=80))
    assert [s for s, layer in again.stages.items() if not layer.hit] == ["cubin"]

    redone = cache.recompile(first.stages["ptx"].token)
    assert all(not layer.hit for layer in redone.stages.values())
    assert all(layer.reasons == ("recompiled on request",) for layer in redone.stages.values())
    why_built = {row.stage: row.reasons for row in cache.entries(kernel="axpy") if row.config == "sm_80"}
    assert why_built == dict.fromkeys(STAGES, ("recompiled on request",))
    assert redone.cubin == first.cubin
    with pytest.raises(KeyError, match="not compiled by this process"):
        cache.recompile("0" * 64)
    assert "run its cell again" in cache.recompile_problem("0" * 64)


def test_recompile_rebuilds_the_entrys_own_inputs_not_the_current_state():
    """An entry built while a global and a device function had other values
    is rebuilt from those values, under its own token, after both changed."""
    namespace, _ = reading(DEVICE_READS_G, G=1.5)
    cache = KernelCache()
    sig = "void(float32[:])"
    old = cache.compile(namespace["kernel"], sig, CompileConfig(sm=86))
    namespace["G"] = 3.0
    run_cell(namespace, """
        @cuda.jit(device=True)
        def scale(x):
            return x * G + 1.0
    """)
    new = cache.compile(namespace["kernel"], sig, CompileConfig(sm=86))
    assert new.stages["cubin"].token != old.stages["cubin"].token
    del namespace["kernel"]
    gc.collect()  # the kernel's function may be gone: the entry's snapshot is what is rebuilt

    redone = cache.recompile(old.stages["cubin"].token)
    assert {stage: layer.token for stage, layer in redone.stages.items()} == \
        {stage: layer.token for stage, layer in old.stages.items()}
    assert all(not layer.hit for layer in redone.stages.values())
    assert redone.ptx == old.ptx and redone.cubin == old.cubin and redone.ptx != new.ptx
    assert "0f3FC00000" in redone.ptx  # 1.5, the value it was built with


def test_recompile_says_when_the_inputs_were_let_go(monkeypatch):
    from gpucache_ext.pipeline import provenance

    monkeypatch.setattr(provenance, "SNAPSHOT_LIMIT", 1)
    cache = KernelCache()
    first = cache.compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=80))
    latest = cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=80))
    assert cache.recompile_problem(latest.stages["cubin"].token) is None
    problem = cache.recompile_problem(first.stages["cubin"].token)
    assert "let go" in problem and "cannot be rebuilt exactly" in problem
    with pytest.raises(KeyError, match="let go"):
        cache.recompile(first.stages["typing"].token)


def test_stats_have_per_tier_counters_and_saved_time():
    from gpucache_ext import TierStats

    cache = KernelCache()
    first = cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=80))
    cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=80))
    stats = cache.stats()["cubin"]
    built = first.stages["cubin"].seconds
    assert stats.tiers == {"memory": TierStats(hits=1, saved_seconds=round(built, 6), entries=1, bytes=stats.bytes)}
    assert stats.saved_seconds == round(built, 6) and stats.compile_seconds == round(built, 6)
    row = cache.entries(stage="cubin")[0]
    assert row.config_fields == CompileConfig(sm=80).fields()


def test_a_typing_stage_that_was_not_needed_is_counted_as_such(tmp_path):
    KernelCache(directory=tmp_path).compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))
    cache = KernelCache(directory=tmp_path)  # a new session: typed IR is never on disk
    result = cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))
    assert result.stages["typing"].outcome is Outcome.NOT_NEEDED and result.stages["typing"].tier is None
    assert result.stages["typing"].hit and result.hit  # nothing compiled
    assert result.stages["cubin"].outcome is Outcome.HIT and result.stages["cubin"].tier == "disk"
    typing = cache.stats()["typing"]
    assert (typing.hits, typing.misses, typing.not_needed) == (0, 0, 1)
    assert (typing.hits, typing.misses, typing.not_needed) == (0, 0, 1)
    assert cache.stats()["cubin"].not_needed == 0


def test_an_all_hit_compile_saves_the_same_before_and_after_a_restart(tmp_path):
    """What a hit saves is what its entries took to build: in this process
    (typing hit in memory) and in a new session (typing not needed, as the
    llvm entry on disk skips it too) the same figure, typing's included."""
    first = KernelCache(directory=tmp_path)
    built = first.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))
    took = {stage: built.stages[stage].seconds for stage in STAGES}
    again = first.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))
    assert {stage: again.stages[stage].saved_seconds for stage in STAGES} == pytest.approx(took, rel=1e-9)
    cache = KernelCache(directory=tmp_path)  # a new session: typed IR is never on disk
    restarted = cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))
    assert restarted.stages["typing"].outcome is Outcome.NOT_NEEDED
    assert {stage: restarted.stages[stage].saved_seconds for stage in STAGES} == pytest.approx(took, rel=1e-9)
    assert restarted.saved_seconds == pytest.approx(again.saved_seconds, rel=1e-9) and took["typing"] > 0
    assert cache.stats()["typing"].saved_seconds == pytest.approx(took["typing"], abs=2e-6)


def test_stats_and_entries_are_typed_and_read_by_attribute(tmp_path):
    from gpucache_ext import CacheStats, EntryInfo, StageStats, TierStats

    cache = KernelCache(directory=tmp_path)
    cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))
    again = cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))
    assert {layer.outcome for layer in again.stages.values()} == {Outcome.HIT}
    stats = cache.stats()
    assert isinstance(stats, CacheStats) and isinstance(stats["ptx"], StageStats)
    ptx = stats["ptx"]
    assert (ptx.hits, ptx.misses, ptx.lookups, ptx.not_needed) == (1, 1, 2, 0)
    memory, disk = ptx.tiers["memory"], ptx.tiers["disk"]
    assert isinstance(disk, TierStats) and memory.hits == 1 and disk.entries == 1
    assert disk.corrupt == 0 and memory.corrupt is None  # a memory tier has no such count
    assert not hasattr(ptx, "hit")
    with pytest.raises(dataclasses.FrozenInstanceError):
        ptx.hits = 3
    plain = stats.as_dict()
    assert json.loads(json.dumps(plain))["ptx"]["tiers"]["disk"]["bytes"] == disk.bytes > 0
    # (None fields are left out of the plain form: a memory tier has no corrupt count)
    assert "corrupt" in plain["ptx"]["tiers"]["disk"] and "corrupt" not in plain["ptx"]["tiers"]["memory"]
    rows = cache.entries(stage="cubin")
    assert len(rows) == 1 and isinstance(rows[0], EntryInfo)
    assert rows[0].tiers == ("memory", "disk") and rows[0].as_dict()["tiers"] == list(rows[0].tiers)
    assert rows[0].token == again.stages["cubin"].token
    assert rows[0].bytes == again.artifacts()["cubin"].nbytes > len(again.cubin)


def test_explain_changes_nothing_and_says_typing_is_not_needed_after_a_restart(tmp_path):
    config = CompileConfig(sm=86)
    KernelCache(directory=tmp_path).compile(kernels.copy, kernels.COPY_SIG, config)
    cache = KernelCache(directory=tmp_path)  # a new session: memory is empty, disk is not
    before = cache.stats().as_dict()
    predicted = cache.explain(kernels.copy, kernels.COPY_SIG, config)
    assert dict(predicted) == dict.fromkeys(("typing", "llvm", "ptx", "cubin"), ())
    assert predicted.outcomes == {"typing": Outcome.NOT_NEEDED, "llvm": Outcome.HIT,
                                  "ptx": Outcome.HIT, "cubin": Outcome.HIT}
    assert predicted.misses == {}
    # nothing counted, and the disk hits did not fill the memory tier
    assert cache.stats().as_dict() == before
    assert all(cache.stats()[s].entries == 0 for s in ("llvm", "ptx", "cubin"))
    # the compile that follows does what explain said
    result = cache.compile(kernels.copy, kernels.COPY_SIG, config)
    assert {s: layer.outcome for s, layer in result.stages.items()} == predicted.outcomes


def test_a_miss_after_a_restart_is_explained_against_the_entries_on_disk(tmp_path):
    KernelCache(directory=tmp_path).compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))
    cache = KernelCache(directory=tmp_path)  # a new session
    predicted = cache.explain(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=80, fastmath=True))
    assert {"fastmath False -> True", "sm 86 -> 80", "llvm input changed"} <= set(predicted.misses["ptx"])
    assert "fastmath False -> True" in predicted.misses["llvm"]
    result = cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=80, fastmath=True))
    assert result.stages["ptx"].reasons == predicted.misses["ptx"]
    assert result.stages["cubin"].reasons[0] == "ptx input changed"
    assert "first compile" not in " ".join(r for layer in result.stages.values() for r in layer.reasons)
    assert result.stages["typing"].reasons == ("first typing of copy in this process "
                                               "(typed IR is not kept on disk)",)


def test_from_environment_turns_a_tier_off_with_off(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUCACHE_REDIS_URL", "redis://127.0.0.1:1/0")  # never contacted here
    monkeypatch.setenv("GPUCACHE_SECRET", "s")
    monkeypatch.setenv("GPUCACHE_DIR", str(tmp_path))
    assert [t.name for t in KernelCache.from_environment().tiers] == ["disk", "shared"]
    assert [t.name for t in KernelCache.from_environment(redis_url="off").tiers] == ["disk"]
    assert KernelCache.from_environment(directory="off", redis_url="none").tiers == []


def test_a_result_names_its_stages_one_way():
    import gpucache_ext

    result = KernelCache().compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))
    assert set(result.stages) == {"typing", "llvm", "ptx", "cubin"}
    assert not hasattr(result, "layers") and not hasattr(gpucache_ext, "LayerResult")


def test_stats_and_entries_no_longer_read_as_dicts():
    """Records are read by attribute; the dict spelling is refused (use `as_dict` for a plain dict)."""
    from gpucache_ext.pipeline.results import TierInfo

    cache = KernelCache()
    cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))
    stats, row = cache.stats(), cache.entries(stage="cubin")[0]
    info = TierInfo("disk", "/tmp/cache", signed=True, used=True)
    for record, field in ((stats["ptx"], "hits"), (stats["ptx"].tiers["memory"], "entries"), (row, "token"),
                          (info, "location")):
        with pytest.raises(TypeError):
            record[field]
        with pytest.raises(AttributeError):
            record.get(field)
        with pytest.raises(TypeError):
            dict(record)
        with pytest.raises(TypeError):
            assert field in record
        assert getattr(record, field) == record.as_dict()[field]


def test_misses_list_the_persistent_tiers_once_per_stage(tmp_path):
    from gpucache_ext.store.disk import DiskTier

    KernelCache(directory=tmp_path).compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))
    listings = []

    class CountingDisk(DiskTier):
        def entries(self, stage):
            listings.append(stage)
            return super().entries(stage)

    cache = KernelCache(tiers=[CountingDisk(tmp_path)])  # a new session over the same folder
    first = cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=80))
    cache.compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=80))  # another kernel: no new listing
    cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=75))
    assert "ptx" in listings and len(listings) == len(set(listings))  # each stage listed once at most
    assert "sm 86 -> 80" in first.stages["ptx"].reasons  # explained against the entry on disk


def test_the_result_text_marks_a_hit_after_a_rebuild_to_the_same_bytes():
    cache = KernelCache()
    cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))
    text = cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86, opt=2)).explain()
    lines = {line.split()[0]: line for line in text.splitlines()[1:]}
    assert "miss" in lines["ptx"] and "hit (memory, same bytes)" in lines["cubin"], text


def test_entries_record_where_their_kernel_was_defined(tmp_path):
    """A kernel from a file is known by that file, in memory and on disk (in
    no token: the same code defined elsewhere hits)."""
    import os

    from gpucache_ext.pipeline import definitions

    result = KernelCache(directory=tmp_path).compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=80))
    assert result.place == "file:" + os.path.realpath(kernels.__file__)
    again = KernelCache(directory=tmp_path)
    assert {row.place for row in again.entries()} == {result.place}
    assert definitions.describe(result.place) == "kernels.py"
    namespace = notebook_namespace()
    run_cell(namespace, "def copy(r, x):\n    r[0] = x[0]\n", filename="<elsewhere>")
    assert definitions.place_of(namespace["copy"].__code__) is None  # no file, and no notebook cell
    elsewhere = KernelCache(directory=tmp_path).compile(namespace["copy"], "void(float32[:], float32[:])",
                                                        CompileConfig(sm=80))
    assert elsewhere.place is None and {row.place for row in KernelCache(directory=tmp_path).entries()
                                        if row.kernel == "__main__.copy"} == {None}
