"""numba's helpers (the functions ``cmath``, ``**`` and friends lower through
``context.compile_internal``) are compiled once per lowering state and shared
by every config and target that leaves their lowering unchanged
(`backends.numba_cuda.stages.numbering._shared_subroutine`).

numba's own helper cache is keyed without the lowering context a helper
inherits: a fastmath kernel compiled after a plain one gets the plain one's
helpers (its PTX follows the process's history).  Here a helper is shared
only by lowerings whose context state is the same, and only for targets its
compile's target questions answer alike; the oracle is the same kernel
compiled with no helper compiled before (the helper table empty, a fresh
cache), and in the slow test a fresh process per config.
"""

from __future__ import annotations

import json
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucache_ext import CompileConfig, KernelCache
from gpucache_ext.backends.numba_cuda.stages import numbering

from .helpers import artifacts, buildable, notebook_namespace, run_cell, run_python

HEAVY = """
import cmath, math
from numba import cuda

def heavy(r, z, n):
    i = cuda.grid(1)
    if i < r.size:
        w = z[i]
        r[i] = cmath.exp(w) * cmath.sqrt(w) + w ** n + w.real ** n + math.atan2(w.real, w.imag)
"""
SIG = "void(complex128[::1], complex128[::1], int64)"

# (the kernel's cell has no source file for debug info to point at: numba says so at each debug compile)
pytestmark = pytest.mark.filterwarnings("ignore:Could not find source for function")


@pytest.fixture(scope="module")
def heavy():
    namespace = notebook_namespace()
    run_cell(namespace, HEAVY, filename="<heavy>")
    return namespace["heavy"]


def _helpers_compiled() -> int:
    return sum(len(variants) for variants in numbering._shared_helpers.values())


def _from_nothing(func, config):
    """`func` compiled as a process that has compiled no helper yet would:
    the shared helpers set aside for the compile, a fresh cache."""
    kept = dict(numbering._shared_helpers)
    numbering._shared_helpers.clear()
    try:
        return artifacts(KernelCache().compile(func, SIG, config))
    finally:
        numbering._shared_helpers.clear()
        numbering._shared_helpers.update(kept)


def test_a_config_that_leaves_the_lowering_context_alone_reuses_the_helpers(heavy):
    cache = KernelCache()
    cache.compile(heavy, SIG, CompileConfig(sm=80))
    compiled = _helpers_compiled()
    assert compiled >= 3  # exp, sqrt, the powers...
    for config in (CompileConfig(sm=80, launch_bounds=256), CompileConfig(sm=80, opt=2, launch_bounds=(128, 2))):
        result = cache.compile(heavy, SIG, config)
        assert result.stages["llvm"].outcome.value == "miss"  # the kernel is lowered again...
        assert _helpers_compiled() == compiled  # ...its helpers are not
        assert artifacts(result) == _from_nothing(heavy, config)


def test_a_new_target_reuses_the_helpers_its_lowering_did_not_ask_about(heavy):
    first, second = buildable((80, 90))[0], buildable((80, 90))[-1]
    KernelCache().compile(heavy, SIG, CompileConfig(sm=first))
    compiled = _helpers_compiled()
    result = KernelCache().compile(heavy, SIG, CompileConfig(sm=second))  # a new cache: lowered again
    assert result.stages["llvm"].outcome.value == "miss"
    assert _helpers_compiled() == compiled
    assert artifacts(result) == _from_nothing(heavy, CompileConfig(sm=second))


def _states_used(monkeypatch):
    used = []

    class Recording(numbering._SharedHelpers):
        __slots__ = ()

        def __init__(self, state, cc):
            used.append(state)
            super().__init__(state, cc)

    monkeypatch.setattr(numbering, "_SharedHelpers", Recording)
    return used


@pytest.mark.parametrize("change", [{"fastmath": True}, pytest.param({"lineinfo": True}, marks=pytest.mark.slow),
                                    pytest.param({"debug": True, "opt": 0}, marks=pytest.mark.slow)])
def test_a_config_that_changes_the_lowering_context_gets_helpers_of_its_own(heavy, change, monkeypatch):
    # numba's own cache hands these the first compile's helpers (see the module's doc)
    cache = KernelCache()
    used = _states_used(monkeypatch)
    plain = cache.compile(heavy, SIG, CompileConfig(sm=80))
    plain_states, used[:] = set(used), []
    config = CompileConfig(sm=80, **change)
    result = cache.compile(heavy, SIG, config)
    assert used and not plain_states & set(used)
    monkeypatch.undo()
    assert artifacts(result) == _from_nothing(heavy, config)
    assert result.llvm_ir != plain.llvm_ir


def test_a_helper_is_not_served_to_a_target_its_compile_answered_otherwise():
    # (no helper of numba's reads the target today; one that did would record the question)
    class Library:
        pass

    class Result:
        library = Library()

    found = Result()
    numbering._subroutine_reads[found.library] = frozenset({(">=", (7, 5), True)})
    table = numbering._SharedHelpers(("a state", ()), (8, 6))
    table["key"] = found
    try:
        assert table["key"] is found
        assert numbering._SharedHelpers(("a state", ()), (9, 0)).get("key") is found
        assert numbering._SharedHelpers(("a state", ()), (7, 0)).get("key") is None
        assert numbering._SharedHelpers(("another state", ()), (8, 6)).get("key") is None
        with pytest.raises(KeyError):
            numbering._SharedHelpers(("a state", ()), (7, 0))["key"]
    finally:
        numbering._shared_helpers.pop((("a state", ()), "key"), None)


@pytest.mark.slow  # (the fallback path, as helpers were kept before)
def test_a_context_attribute_it_cannot_read_exactly_keeps_helpers_per_config(heavy, monkeypatch):
    # a numba that keeps something more on its lowering context: fail closed to one helper table per
    # lowering config and target, as before helpers were shared
    from numba.cuda.descriptor import cuda_target

    context = cuda_target.target_context.subtarget()
    assert numbering._lowering_state(context) is not None
    context.something_new = object()
    assert numbering._lowering_state(context) is None
    monkeypatch.setattr(numbering, "_lowering_state", lambda context: None)
    before = _helpers_compiled()
    config = CompileConfig(sm=80, launch_bounds=64)
    result = KernelCache().compile(heavy, SIG, config)
    assert _helpers_compiled() == before  # none shared
    monkeypatch.undo()
    assert artifacts(result) == _from_nothing(heavy, config)


CONFIGS = st.builds(
    lambda sm, fastmath, lineinfo, bounds: CompileConfig(sm=sm, fastmath=fastmath, lineinfo=lineinfo,
                                                         launch_bounds=bounds),
    st.sampled_from(buildable((70, 75, 80, 90))), st.booleans(), st.booleans(), st.sampled_from([None, 128, 256]))


@pytest.mark.slow  # a few compiles an example
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(CONFIGS, min_size=2, max_size=3))
def test_any_sequence_of_configs_gives_each_the_code_it_gets_from_nothing(heavy, configs):
    for config in configs:
        assert artifacts(KernelCache().compile(heavy, SIG, config)) == _from_nothing(heavy, config), config


SEQUENCE_SCRIPT = """
import hashlib, json, sys
sys.path.insert(0, sys.argv[1])
from gpucache_ext import CompileConfig, KernelCache
from heavy_kernels import heavy
out = {}
for text in json.loads(sys.argv[2]):
    result = KernelCache().compile(heavy, %r, eval(text))
    out[text] = [hashlib.sha256(x if isinstance(x, bytes) else x.encode()).hexdigest()
                 for x in (result.llvm_ir, result.ptx, result.cubin)]
print(json.dumps(out))
""" % SIG


@pytest.mark.slow  # fresh interpreters
def test_helpers_shared_across_a_process_give_what_a_fresh_process_gives(tmp_path):
    (tmp_path / "heavy_kernels.py").write_text(textwrap.dedent(HEAVY))
    sm = buildable((75, 80, 86, 90))
    configs = [f"CompileConfig(sm={sm[0]})", f"CompileConfig(sm={sm[0]}, launch_bounds=256)",
               f"CompileConfig(sm={sm[-1]})", f"CompileConfig(sm={sm[1]}, fastmath=True)",
               f"CompileConfig(sm={sm[-1]}, fastmath=True, launch_bounds=(64, 2))",
               f"CompileConfig(sm={sm[2]}, lineinfo=True)", f"CompileConfig(sm={sm[2]}, debug=True, opt=0)",
               f"CompileConfig(sm={sm[0]}, fastmath=True, prec_div=True)"]
    env = {"GPUCACHE_DIR": "off"}
    together = run_python(SEQUENCE_SCRIPT, tmp_path, json.dumps(configs), env=env, json_line=True)
    assert len(set(map(tuple, together.values()))) == len(configs)  # every config its own code
    for config in configs:
        alone = run_python(SEQUENCE_SCRIPT, tmp_path, json.dumps([config]), env=env, json_line=True)
        assert alone[config] == together[config], config


USERS_HELPER = '''
import json, re
from tests.helpers import notebook_namespace, run_cell
from gpucache_ext import CompileConfig, KernelCache
from gpucache_ext.backends.numba_cuda.stages import numbering

ns = notebook_namespace()
run_cell(ns, """
from numba import cuda, types
from numba.cuda.extending import type_callable, lower_builtin
SCALE = 2.0
OFFSET = 1.0
def scaled(x):
    pass
def shifted(x):
    pass
@type_callable(scaled)
def type_scaled(context):
    return lambda x: types.float64
@type_callable(shifted)
def type_shifted(context):
    return lambda x: types.float64
def scale_impl(x):
    return x * SCALE
@lower_builtin(scaled, types.float64)
def lower_scaled(context, builder, sig, args):
    return context.compile_internal(builder, scale_impl, sig, args)
@lower_builtin(shifted, types.float64)
def lower_shifted(context, builder, sig, args):
    def impl(x):  # (a new function object at each lowering, the same code)
        return x + OFFSET
    return context.compile_internal(builder, impl, sig, args)
def k(r, x):
    r[0] = scaled(x[0])
    r[1] = shifted(x[1])
""")
SIG = "void(float64[:], float64[:])"

def constants(result):
    return sorted(set(re.findall(r"0d[0-9A-F]{16}", result.ptx)))

def from_nothing(config):
    kept = dict(numbering._shared_helpers)
    numbering._shared_helpers.clear()
    try:
        return constants(KernelCache().compile(ns["k"], SIG, config))
    finally:
        numbering._shared_helpers.clear()
        numbering._shared_helpers.update(kept)

cache = KernelCache()
out = {"first": constants(cache.compile(ns["k"], SIG, CompileConfig(sm=80)))}
ns["SCALE"], ns["OFFSET"] = 3.0, 5.0
out["same config"] = constants(cache.compile(ns["k"], SIG, CompileConfig(sm=80)))
out["new cache, new config"] = constants(KernelCache().compile(ns["k"], SIG, CompileConfig(sm=80, launch_bounds=64)))
out["from nothing"] = from_nothing(CompileConfig(sm=80))
print(json.dumps(out))
'''


def test_a_users_helper_is_keyed_by_the_globals_it_reads():
    # an extension's lowering compiling a function of its own (numba keys it by code and closure only:
    # after SCALE = 3.0 numba's cache, and ours before, served the helper that multiplies by 2)
    out = run_python(USERS_HELPER, env={"GPUCACHE_DIR": "off"}, json_line=True)  # (registers extensions)
    three, five = "0d4008000000000000", "0d4014000000000000"
    assert five not in out["first"] and three not in out["first"]
    for case in ("same config", "new cache, new config", "from nothing"):
        assert three in out[case] and five in out[case], (case, out)
    assert out["same config"] == out["new cache, new config"] == out["from nothing"]
