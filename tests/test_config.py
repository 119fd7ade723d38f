"""CompileConfig: validation, normalisation, and the field/stage table."""

import dataclasses

import pytest

from gpucache_ext import FIELD_STAGES, STAGES, CompileConfig, ConfigError


@pytest.mark.parametrize("given", [86, "86", "8.6", "sm_86", "compute_86", (8, 6), [8, 6], 8.6, " SM_86 "])
def test_sm_spellings_normalise_to_one_value(given):
    config = CompileConfig(sm=given)
    assert config.sm == 86
    assert config.cc == (8, 6)
    assert config.arch == "compute_86"
    assert config.sm_name == "sm_86"
    assert config == CompileConfig(sm=86)


@pytest.mark.parametrize("bad", [99, "abc", "sm_", (8,), (8, 6, "a"), True, None, 0, "8.6.1", 2.0])
def test_bad_sm_names_the_field_value_and_choices(bad):
    with pytest.raises(ConfigError) as info:
        CompileConfig(sm=bad)
    message = str(info.value)
    assert message.startswith(f"sm={bad!r} is invalid")
    assert "86" in message and "sm_86" in message


@pytest.mark.parametrize(
    "field, bad, allowed",
    [
        ("opt", 4, "0 to 3"), ("opt", -1, "0 to 3"), ("opt", "3", "0 to 3"), ("opt", True, "0 to 3"),
        ("fastmath", 1, "True or False"), ("debug", "yes", "True or False"),
        ("lineinfo", None, "True or False"), ("lto", 0, "True or False"),
        ("ftz", 1, "follow fastmath"), ("prec_div", "no", "follow fastmath"),
        ("max_registers", 0, "1 to 255"), ("max_registers", 256, "1 to 255"), ("max_registers", 3.5, "1 to 255"),
        ("launch_bounds", 0, "positive"), ("launch_bounds", (1, 2, 3, 4), "max_threads"),
        ("launch_bounds", (128, -1), "positive"), ("launch_bounds", "128", "positive"),
        ("launch_bounds", 2000, "more than any GPU allows (1024)"), ("launch_bounds", (1025, 2), "at most 1024"),
    ],
)
def test_invalid_values_raise_value_error_naming_field(field, bad, allowed):
    with pytest.raises(ValueError) as info:
        CompileConfig(**{field: bad})
    assert str(info.value).startswith(f"{field}={bad!r} is invalid")
    assert allowed in str(info.value)


def test_launch_bounds_normalised_to_tuple():
    assert CompileConfig(launch_bounds=128).launch_bounds == (128,)
    assert CompileConfig(launch_bounds=[128, 2]).launch_bounds == (128, 2)
    assert CompileConfig(launch_bounds=(256, 2, 1)).launch_bounds == (256, 2, 1)


def test_config_is_frozen_and_replace_validates():
    config = CompileConfig(sm=80)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.opt = 0
    assert config.replace(opt=0).opt == 0
    with pytest.raises(ConfigError):
        config.replace(opt=9)


def test_math_flags_follow_fastmath_unless_set():
    assert CompileConfig().nvvm_math() == {"ftz": False, "prec_div": True, "prec_sqrt": True, "fma": True}
    assert CompileConfig(fastmath=True).nvvm_math() == {
        "ftz": True, "prec_div": False, "prec_sqrt": False, "fma": True}
    assert CompileConfig(fastmath=True, ftz=False).nvvm_math()["ftz"] is False
    assert CompileConfig(fma=False).nvvm_math()["fma"] is False


def test_unset_equals_default_in_normalised_form():
    explicit = CompileConfig(ftz=False, prec_div=True, prec_sqrt=True, fma=True)
    assert CompileConfig().normalised() == explicit.normalised()
    assert CompileConfig(fastmath=True).normalised() == CompileConfig(
        fastmath=True, ftz=True, prec_div=False, prec_sqrt=False, fma=True).normalised()


def test_every_field_is_classified():
    """Fail closed: a new CompileConfig field must say which stages read it."""
    fields = {f.name for f in dataclasses.fields(CompileConfig)}
    assert fields == set(FIELD_STAGES), f"unclassified: {fields ^ set(FIELD_STAGES)}"
    for name, stages in FIELD_STAGES.items():
        if name == "backend":  # (it picks the chain; every token names its backend's packages: test_mlir_backend)
            assert stages == (), name
            continue
        assert stages, f"{name} is read by no stage"
        assert set(stages) <= set(STAGES), name


def test_stage_fields_follow_the_table():
    config = CompileConfig(sm=75, max_registers=40)
    assert set(config.stage_fields("typing")) == set()
    assert set(config.stage_fields("cubin")) == {"sm", "max_registers", "lto"}
    assert config.stage_fields("cubin")["max_registers"] == 40
    assert "opt" in config.stage_fields("ptx") and "opt" not in config.stage_fields("llvm")


def test_diff_and_summary():
    a, b = CompileConfig(sm=80), CompileConfig(sm=86, fastmath=True)
    diff = a.diff(b)
    assert diff["sm"] == (80, 86) and diff["fastmath"] == (False, True) and diff["ftz"] == (False, True)
    assert "opt" not in diff
    assert CompileConfig(sm=80, opt=0).summary() == "sm_80 opt=0"


def test_a_stage_has_one_name_in_one_place():
    import gpucache_ext.keys.config as config
    import gpucache_ext.keys.stagespec as stagespec

    assert stagespec.ALL_STAGES == stagespec.TARGET_STAGES + ("fatbin",)
    assert stagespec.STAGES == stagespec.DEFAULT_CHAIN.stages
    assert not hasattr(config, "ALL_STAGES")  # (declared in stagespec alone)
    with pytest.raises(AttributeError):
        config.LAYERS  # noqa: B018 (the name of a release that never was)


def test_the_stages_are_what_their_declarations_say(monkeypatch, request):
    """Every stage tuple, the driver's table and the toolchain part of a
    token are made from the stage declarations (`stagespec.STAGE_SPECS`):
    changing a declaration changes what each reads."""
    from gpucache_ext import memos, toolchain
    from gpucache_ext.keys import stagespec
    from gpucache_ext.pipeline import driver as pipeline

    specs = stagespec.STAGE_SPECS
    assert STAGES == ("typing", "llvm", "ptx", "cubin")  # (numba-cuda's chain)
    assert stagespec.TARGET_STAGES == tuple(s.name for s in specs if s.per_target) == (
        "typing", "llvm", "mlir", "ptx", "cubin")
    assert stagespec.PERSISTENT_STAGES == ("llvm", "mlir", "ptx", "cubin", "fatbin")
    chain = stagespec.DEFAULT_CHAIN
    for spec in specs:
        stage = pipeline.STAGE_TABLE[spec.name]
        assert (stage.persisted, stage.keyed_on_bytes) == (spec.persisted, spec.keyed_on_bytes)
        assert stage.fields == tuple(f for f, read in FIELD_STAGES.items() if spec.name in read)
        # the stage's own tools, then those numba-cuda's chain adds to it
        assert tuple(toolchain.stage_toolchain(spec.name)) == spec.tools + dict(chain.tools).get(spec.name, ())
    # each stage of a chain is built from the one before it; the fatbin from the last
    assert [chain.upstream(name) for name in (*chain.stages, "fatbin")] == [None, "typing", "llvm", "ptx", "cubin"]
    assert (chain.front, chain.entry, chain.back) == (("typing", "llvm"), "llvm", ("ptx", "cubin"))
    assert chain.back == tuple(name for name in chain.stages if name in stagespec.KEYED_ON_BYTES)
    # a tool declared for a stage enters its toolchain part (and so its token), with no other edit
    monkeypatch.setitem(stagespec.STAGE_SPEC, "fatbin", dataclasses.replace(stagespec.STAGE_SPEC["fatbin"],
                                                                   tools=("nvfatbin", "numpy")))
    memos.forget()  # (what was worked out from the declarations as they were; again once they are back)
    request.addfinalizer(memos.forget)
    assert set(toolchain.stage_toolchain("fatbin")) == {"nvfatbin", "numpy"}
    with pytest.raises(ValueError, match="unknown stage 'sass'"):
        toolchain.stage_toolchain("sass")
