"""Target-read tracking: IR is shared across targets exactly where lowering
asked nothing that the targets answer differently."""

from gpucache_ext import CompileConfig, KernelCache
from gpucache_ext.keys.targets import TrackedCC, VariantMemo, describe, holds_for, track

from . import kernels
from .helpers import buildable, needs_pre_turing


def test_comparisons_are_recorded_with_their_answers():
    with track() as reads:
        assert TrackedCC((8, 6)) >= (7, 5)
        assert not TrackedCC((8, 6)) < (6, 0)
        assert (6, 0) <= TrackedCC((8, 6))  # reflected comparison is seen too
    assert reads == {(">=", (7, 5), True), ("<", (6, 0), False), (">=", (6, 0), True)}
    assert holds_for(reads, (9, 0)) and holds_for(reads, (7, 5))
    assert not holds_for(reads, (7, 0))
    assert describe({(">=", (7, 5), False)}) == "not cc>=(7, 5)"


def test_any_other_use_pins_the_exact_target():
    with track() as reads:
        major = TrackedCC((8, 6))[0]
    assert major == 8
    assert reads == {("==", (8, 6), True)}
    assert holds_for(reads, (8, 6)) and not holds_for(reads, (8, 9))


def test_reads_reach_every_open_frame():
    with track() as outer:
        with track() as inner:
            _ = TrackedCC((7, 0)) >= (6, 0)
    assert outer == inner == {(">=", (6, 0), True)}


def test_variant_memo_picks_the_variant_that_holds():
    memo = VariantMemo()
    memo.put("k", frozenset({(">=", (7, 5), True)}), "fast")
    memo.put("k", frozenset({(">=", (7, 5), False)}), "slow")
    assert memo.get("k", (8, 6)) == "fast"
    assert memo.get("k", (7, 0)) == "slow"
    assert memo.get("other", (8, 6)) is None


@needs_pre_turing  # (tanh.approx from sm_75)
def test_lowering_that_asks_about_the_target_is_shared_where_answers_agree():
    cache = KernelCache()
    sig = kernels.TANH_SIG
    at_75 = cache.compile(kernels.tanh_kernel, sig, CompileConfig(sm=75, fastmath=True))
    at_86 = cache.compile(kernels.tanh_kernel, sig, CompileConfig(sm=86, fastmath=True))
    at_70 = cache.compile(kernels.tanh_kernel, sig, CompileConfig(sm=70, fastmath=True))
    assert at_86.stages["llvm"].hit and at_86.llvm_ir == at_75.llvm_ir
    assert not at_70.stages["llvm"].hit
    assert "tanh.approx" in at_75.llvm_ir and "tanh.approx" not in at_70.llvm_ir
    assert at_70.stages["llvm"].reasons == ("target cc>=(7, 5) -> not cc>=(7, 5)",)
    # without fastmath lowering never asks: one IR for every target
    plain = [cache.compile(kernels.tanh_kernel, sig, CompileConfig(sm=sm)) for sm in (52, 90)]
    assert plain[1].stages["llvm"].hit


def test_kernels_that_never_ask_share_ir_across_all_targets():
    cache = KernelCache()
    first_sm, *others = buildable((52, 61, 75, 80, 86, 90))  # (CUDA 13: from sm_75)
    first = cache.compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=first_sm))
    for sm in others:
        result = cache.compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=sm))
        assert result.stages["typing"].hit and result.stages["llvm"].hit
        assert result.stages["llvm"].token == first.stages["llvm"].token


def test_variant_memo_reports_what_it_drops():
    dropped = []
    memo = VariantMemo(limit=2, on_evict=dropped.append)
    for key in "abc":
        memo.put(key, frozenset(), key.upper())
    memo.put("c", frozenset(), "C2")  # replacing a variant drops the old value
    assert dropped == ["A", "C"]
    assert memo.get("a", (8, 6)) is None and memo.get("c", (8, 6)) == "C2"


def test_the_flags_values_are_every_options_default_then_those_set_and_read_no_target():
    from gpucache_ext.backends.numba_cuda.stages.compiling import lowering_flags, typing_flags

    for flags in (typing_flags(CompileConfig(sm=86)), lowering_flags(CompileConfig(sm=80, fastmath=True, opt=0))):
        expected = {name: flags._values.get(name, option.default) for name, option in flags.options.items()}
        assert list(flags.values().items()) == list(expected.items())
        assert flags.values()["compute_capability"] == flags._values["compute_capability"]
        assert type(flags.values()["compute_capability"]) is tuple  # (not the tracked value: no read recorded)
        copy = type(flags)(flags)
        assert copy == flags and hash(copy) == hash(flags)
        copy.fastmath = not flags.fastmath
        assert copy != flags
