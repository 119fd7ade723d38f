"""Token stability (same inputs, same token, in every process) and
sensitivity (each field changes exactly the tokens of the stages that read it)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpucache_ext import FIELD_STAGES, STAGES, CompileConfig, KernelCache
from gpucache_ext.keys.stagespec import DEFAULT_CHAIN
from gpucache_ext.keys.tokens import component, digest, explain_difference, make_token

from . import kernels

ROOT = Path(__file__).resolve().parent.parent

# A second value for each field (the base config uses the defaults at sm 80).
CHANGES = {
    "sm": 86, "opt": 0, "fastmath": True, "ftz": True, "prec_div": False, "prec_sqrt": False,
    "fma": False, "debug": True, "lineinfo": True, "max_registers": 32,
    "launch_bounds": (128,), "lto": True,
}


def test_every_field_has_a_sensitivity_case():
    # (backend: every token of another backend differs, tests/test_mlir_backend.py)
    assert set(CHANGES) | {"backend"} == set(FIELD_STAGES)


def tokens_of(config, func=kernels.axpy, sig=kernels.AXPY_SIG):
    return {s: t.hex for s, t in KernelCache().tokens(func, sig, config).items()}


@pytest.mark.parametrize("field", sorted(CHANGES))
def test_field_changes_exactly_the_stages_that_read_it(field):
    base = CompileConfig(sm=80)
    changed = base.replace(**{field: CHANGES[field]})
    before, after = tokens_of(base), tokens_of(changed)
    stages = DEFAULT_CHAIN.stages
    first = min(stages.index(s) for s in FIELD_STAGES[field] if s in stages)
    # debug and lineinfo also put source locations into the typing identity.
    if field in ("debug", "lineinfo"):
        first = 0
    for index, stage in enumerate(stages):
        if index >= first:
            assert before[stage] != after[stage], f"{field} must change the {stage} token"
        else:
            assert before[stage] == after[stage], f"{field} must not change the {stage} token"


def test_unset_and_default_give_the_same_tokens():
    explicit = CompileConfig(sm=80, ftz=False, prec_div=True, prec_sqrt=True, fma=True)
    assert tokens_of(CompileConfig(sm=80)) == tokens_of(explicit)
    fast = CompileConfig(sm=80, fastmath=True)
    assert tokens_of(fast) == tokens_of(fast.replace(ftz=True, prec_div=False, prec_sqrt=False))


def test_sm_spelling_does_not_change_tokens():
    assert tokens_of(CompileConfig(sm="8.6")) == tokens_of(CompileConfig(sm=(8, 6)))


def test_signature_changes_every_token():
    a = tokens_of(CompileConfig(), kernels.copy, "void(float32[:], float32[:])")
    b = tokens_of(CompileConfig(), kernels.copy, "void(float64[:], float64[:])")
    assert all(a[s] != b[s] for s in STAGES)


def test_dispatcher_and_function_share_tokens():
    config = CompileConfig(sm=80)
    assert tokens_of(config, kernels.jitted_copy, kernels.COPY_SIG) == tokens_of(
        config, kernels.jitted_copy.py_func, kernels.COPY_SIG)


_SUBPROCESS = """
import json, sys
sys.path.insert(0, {root!r})
from gpucache_ext import CompileConfig, KernelCache
from tests import kernels
out = {{}}
for name, cfg in [("base", CompileConfig(sm=80)), ("fast", CompileConfig(sm=86, fastmath=True, lineinfo=True))]:
    out[name] = {{s: t.hex for s, t in KernelCache().tokens(kernels.axpy, kernels.AXPY_SIG, cfg).items()}}
print(json.dumps(out))
"""


@pytest.mark.slow
def test_tokens_are_stable_across_processes():
    script = _SUBPROCESS.format(root=str(ROOT))
    runs = [
        json.loads(subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                                  text=True, cwd=ROOT).stdout)
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
    here = {"base": tokens_of(CompileConfig(sm=80)),
            "fast": tokens_of(CompileConfig(sm=86, fastmath=True, lineinfo=True))}
    assert runs[0] == here


def test_digest_is_canonical():
    assert digest({"b": 1, "a": (1, 2)}) == digest({"a": [1, 2], "b": 1})
    assert digest(1) != digest(True) != digest("1")
    assert digest(1.0) != digest(1)
    with pytest.raises(TypeError):
        digest(object())


def test_token_components_explain_differences():
    old = make_token("ptx", {"opt": component(3), "sm": component(80)})
    new = make_token("ptx", {"opt": component(0), "sm": component(80)})
    assert old.hex != new.hex
    assert explain_difference(new.components, old.components) == ("opt 3 -> 0",)


def test_a_device_functions_parts_survive_storage_and_tampered_parts_explain_nothing():
    from gpucache_ext.keys.tokens import Component, component_from_json, component_json, parts_digest

    parts = {"global ALPHA": component(1.5), "code": component("x * ALPHA", "code")}
    whole = Component(parts_digest(parts), "device function", tuple(sorted(parts.items())))
    stored = json.loads(json.dumps(component_json(whole)))
    assert component_from_json(stored).parts == whole.parts
    stored[2]["global ALPHA"] = component_json(component(3.0))  # parts that no longer hash to the digest
    assert component_from_json(stored).parts == ()
    other = {**parts, "global ALPHA": component(3.0)}
    changed = Component(parts_digest(other), "device function", tuple(sorted(other.items())))
    assert explain_difference({"device function act": changed}, {"device function act": whole}) == \
        ("global ALPHA 1.5 -> 3.0 (read by act)",)
    assert explain_difference({"device function act": changed},
                              {"device function act": component_from_json(stored)}) == \
        ("device function act changed",)


def test_a_global_read_by_a_device_function_is_named_after_a_restart(tmp_path):
    """The why names the global, its values and the device function reading
    it, against an entry a cache read back from disk (as after a restart)."""
    from .helpers import notebook_namespace, run_cell

    namespace = notebook_namespace()
    namespace.update(ALPHA=1.5, BETA=2)
    run_cell(namespace, """
        @cuda.jit(device=True)
        def inner(x):
            return x + BETA

        @cuda.jit(device=True)
        def activate(x):
            return inner(x) * ALPHA

        def kernel(r):
            r[0] = activate(r[0])
    """)
    sig, config = "void(float32[:])", CompileConfig(sm=86)
    KernelCache(directory=tmp_path).compile(namespace["kernel"], sig, config)
    namespace.update(ALPHA=3.0, BETA=5)
    after = KernelCache(directory=tmp_path).compile(namespace["kernel"], sig, config)
    assert set(after.stages["typing"].reasons) == {
        "global ALPHA 1.5 -> 3.0 (read by activate)", "global BETA 2 -> 5 (read by inner, called by activate)"}
    assert after.stages["llvm"].reasons == ("typing input changed",)
