"""A config field's flag is declared once, with the field (`config.Flag`):
the magic's arguments, ``gpucache warm``'s flags, sweeps and the table of
which stage reads which field are made from that one declaration, so that
the front ends take the same flags, in any order, and build the same config."""

import argparse
import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucache_ext.cli.parser import build_parser
from gpucache_ext.keys.config import (FIELD_STAGES, FLAGS, SWEPT, CompileConfig, config_from_flags, flags_text,
                                 with_consts)
from gpucache_ext.sweeps import combinations


def _warm_parser():
    parser = build_parser()
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return parser, subparsers.choices["warm"]


def _options(parser):
    return {option: action for action in parser._actions for option in action.option_strings}


def test_every_front_end_takes_every_fields_flag_as_declared():
    from gpucache_ext.ipython.magic import GpuCacheMagics

    magic = _options(GpuCacheMagics.gpukernel.parser)
    _, warm = _warm_parser()
    warm = _options(warm)
    assert [flag.name for flag in FLAGS] == [f.name for f in dataclasses.fields(CompileConfig)]
    for flag in FLAGS:
        assert flag.option in magic and flag.option in warm, flag.option
        if flag.name != "sm":  # (each front end says its own default target)
            assert magic[flag.option].help == warm[flag.option].help == flag.help
    assert FIELD_STAGES == {flag.name: flag.stages for flag in FLAGS}
    assert SWEPT == ("opt", "fastmath", "max_registers", "backend")


_CHOICES = {
    "opt": st.lists(st.sampled_from("0123"), min_size=1, max_size=3, unique=True).map(",".join),
    "fastmath": st.sampled_from([None, "on", "off", "off,on", "on,off"]),
    "max_registers": st.lists(st.sampled_from(["32", "64", "none", "255"]), min_size=1, max_size=3,
                              unique=True).map(",".join),
    "ftz": st.sampled_from([None, True, False]),
    "fma": st.sampled_from([None, True, False]),
    "debug": st.booleans(),
    "lto": st.booleans(),
    "launch_bounds": st.sampled_from([None, "256", "128,2", "64,1,2"]),
}


@settings(max_examples=30, deadline=None)
@given(st.fixed_dictionaries({name: st.one_of(st.none(), choice) for name, choice in _CHOICES.items()}),
       st.randoms(use_true_random=False))
def test_flags_given_in_any_order_build_the_config_the_fields_say(chosen, random):
    """The words a config's flags are written as (`flags_text`), shuffled
    around the path and --sm as a user may write them, parse back to the
    same configs; each value is the one the field's own parser gives."""
    parser, _ = _warm_parser()
    given_flags = argparse.Namespace(**{flag.name: chosen.get(flag.name) for flag in FLAGS})
    words = flags_text(given_flags)
    groups, index = [], 0  # (a value stays after its flag)
    while index < len(words):
        take = 2 if index + 1 < len(words) and not words[index + 1].startswith("--") else 1
        groups.append(words[index:index + take])
        index += take
    groups += [["--sm", "80"], ["nb.ipynb"]]
    random.shuffle(groups)
    args = parser.parse_args(with_consts(["warm"] + [word for group in groups for word in group]))
    assert args.target == "nb.ipynb" and args.sm == "80"
    config, swept = config_from_flags(args, 80)
    expected, expected_swept = config_from_flags(given_flags, 80)
    assert config == expected and swept == expected_swept
    variants = combinations(config, swept)
    assert variants[0] == config and len(set(variants)) == math.prod(len(v) for v in swept.values())


def test_a_flag_that_may_stand_alone_does_not_take_the_path():
    parser, _ = _warm_parser()
    args = parser.parse_args(with_consts(["warm", "--sm", "86", "--fastmath", "nb.ipynb"]))
    assert (args.fastmath, args.target) == ("on", "nb.ipynb")
    args = parser.parse_args(with_consts(["warm", "--fastmath", "off,on", "nb.ipynb", "--sm", "86"]))
    assert (args.fastmath, args.target) == ("off,on", "nb.ipynb")
    config, swept = config_from_flags(args, 86)
    assert swept == {"fastmath": (False, True)} and config.fastmath is False


@pytest.mark.parametrize("words, message", [
    (["--opt", "5"], "--opt 5: '5' is no optimisation level"),
    (["--max-registers", "300"], "--max-registers 300: '300' is out of range"),
    (["--launch-bounds", "2x"], "--launch-bounds 2x: use T[,B[,C]]"),
    (["--fastmath", "maybe,on"], "--fastmath maybe,on: 'maybe' is neither on nor off"),
])
def test_a_bad_value_names_its_flag(words, message):
    parser, _ = _warm_parser()
    args = parser.parse_args(["warm", "x.py", "--sm", "86", *words])
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        config_from_flags(args, 86)
