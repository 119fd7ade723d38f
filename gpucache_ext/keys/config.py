"""`CompileConfig`: one frozen, validated record of everything that changes
what a kernel compiles to, and the table of which stage reads which field.

The table (`FIELD_STAGES`) is the heart of the cache's soundness: a stage's
token hashes exactly the fields that stage reads (after normalisation, so that
an unset field and its default give the same token).  A field that is missing
from the table makes the test suite fail (fail closed).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..errors import ConfigError
from .. import memos

log = logging.getLogger(__name__)

# Fields that, left at None, follow fastmath (see `CompileConfig.nvvm_math`).
FOLLOW_FASTMATH = ("ftz", "prec_div", "prec_sqrt")

# What each CUDA major's NVRTC builds (12.9's and 13.5's), used only where it cannot be
# asked (a toolchain that is not installed: compiling then says so, `toolchain.require`).
# CUDA 13 dropped sm_50 to sm_72 and renamed sm_101 (Jetson Thor) to sm_110.
_FALLBACK_CCS = {
    12: ((5, 0), (5, 2), (5, 3), (6, 0), (6, 1), (6, 2), (7, 0), (7, 2), (7, 5),
         (8, 0), (8, 6), (8, 7), (8, 9), (9, 0), (10, 0), (10, 1), (10, 3), (12, 0), (12, 1)),
    13: ((7, 5), (8, 0), (8, 6), (8, 7), (8, 8), (8, 9), (9, 0), (10, 0), (10, 3), (11, 0), (12, 0), (12, 1)),
}
# The oldest target CUDA 13 builds (`_dropped_by_cuda13`)
CUDA13_OLDEST = (7, 5)


@memos.cached("config.supported_ccs", maxsize=1)
def supported_ccs() -> Tuple[Tuple[int, int], ...]:
    """The compute capabilities the installed toolchain can compile for (as
    NVRTC says, remembered in the default disk cache's folder where that folder
    exists, see `toolchain`: a config alone never creates a cache folder).
    They depend on the CUDA major installed: CUDA 13 builds sm_75 and later."""
    try:
        from ..store.disk import configured_directory
        from ..toolchain import supported_archs

        directory = configured_directory()
        return supported_archs(directory if directory is not None and directory.is_dir() else None)
    except Exception:
        log.debug("could not ask NVRTC for its targets; using the fallback list", exc_info=True)
        return _FALLBACK_CCS[13 if _cuda_major() >= 13 else 12]


def _cuda_major() -> int:
    from ..toolchain import cuda_major

    return cuda_major()


def _unsupported_why(major: int, minor: int) -> str:
    """Why the installed toolchain refuses target (major, minor), with the fix."""
    from ..toolchain import INSTALL_CU12

    cuda = _cuda_major()
    if cuda >= 13 and (major, minor) in _FALLBACK_CCS[12]:
        if (major, minor) < CUDA13_OLDEST:
            return (f"CUDA {cuda}, the installed toolchain, builds no target before sm_75; "
                    f"use sm_75 or later, or install the CUDA 12 toolchain for it: {INSTALL_CU12}")
        if (major, minor) == (10, 1):
            return f"CUDA {cuda} calls it sm_110 (Jetson Thor); use 110, or install CUDA 12: {INSTALL_CU12}"
    return "this toolchain cannot compile for it"


def _format_ccs(ccs) -> str:
    return ", ".join(f"{major}{minor}" for major, minor in ccs)


_SM_PATTERN = re.compile(r"^(?:sm_|compute_|sm)?(\d+)(?:\.(\d+))?$")


def parse_sm(value: Any) -> int:
    """Normalise a target given as 86, "86", "8.6", "sm_86", (8, 6) to 86."""
    if isinstance(value, bool):
        raise _sm_error(value, "a bool is not a target")
    if isinstance(value, tuple) or isinstance(value, list):
        if len(value) < 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in value[:2]):
            raise _sm_error(value, "a tuple target must be (major, minor)")
        if len(value) > 2 and value[2] not in ("",):
            raise _sm_error(value, "arch-specific targets (sm_90a) are not supported")
        major, minor = value[0], value[1]
    elif isinstance(value, int):
        major, minor = divmod(value, 10)
    elif isinstance(value, (float, str)):
        match = _SM_PATTERN.match(str(value).strip().lower())
        if not match:
            raise _sm_error(value, "not a compute capability")
        whole, decimal = match.groups()
        if decimal is not None:
            major, minor = int(whole), int(decimal)
        else:
            major, minor = divmod(int(whole), 10)
    else:
        raise _sm_error(value, f"a {type(value).__name__} is not a target")
    if (major, minor) not in supported_ccs():
        raise _sm_error(value, _unsupported_why(major, minor))
    return major * 10 + minor


FALLBACK_SM = 86  # the target where neither a GPU nor GPUCACHE_SM says one


def configured_sm(setting: Optional[str] = None) -> int:
    """The target for a kernel nobody gave one where no GPU says it:
    `setting` (default: the ``GPUCACHE_SM`` variable), else 86."""
    import os

    setting = os.environ.get("GPUCACHE_SM", "") if setting is None else setting
    return parse_sm(setting) if setting else FALLBACK_SM


def _sm_error(value, why):
    error = ConfigError(
        f"sm={value!r} is invalid ({why}); use one of "
        f"{_format_ccs(supported_ccs())}, written as 86, '8.6', 'sm_86' or (8, 6)",
        field="sm", value=value, why=why,  # (the magic says it in its own words: --sm 86)
    )
    return error


def _check_bool(name, value, optional=False):
    if value is None and optional:
        return
    if not isinstance(value, bool):
        allowed = "True, False or None (follow fastmath)" if optional else "True or False"
        raise ConfigError(f"{name}={value!r} is invalid; use {allowed}", field=name)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


MAX_THREADS_PER_BLOCK = 1024  # every compute capability from 2.0 to 12.x


def _normalise_launch_bounds(value):
    if value is None:
        return None
    bounds = (value,) if _is_int(value) else value
    if (
        isinstance(bounds, (tuple, list))
        and 1 <= len(bounds) <= 3
        and all(_is_int(v) and v > 0 for v in bounds)
    ):
        if bounds[0] > MAX_THREADS_PER_BLOCK:
            raise ConfigError(
                f"launch_bounds={value!r} is invalid: {bounds[0]} threads per block is more than any GPU "
                f"allows ({MAX_THREADS_PER_BLOCK}); use at most {MAX_THREADS_PER_BLOCK}",
                field="launch_bounds",
            )
        return tuple(bounds)
    raise ConfigError(
        f"launch_bounds={value!r} is invalid; use None, a positive int (max "
        "threads per block) or a tuple (max_threads[, min_blocks[, max_cluster]]) "
        "of positive ints",
        field="launch_bounds",
    )


_ON = ("on", "true", "yes", "1")
_OFF = ("off", "false", "no", "0")
_NONE = ("none", "off", "no")


def _opt_item(item: str) -> int:
    if item in ("0", "1", "2", "3"):
        return int(item)
    raise ValueError("is no optimisation level (0, 1, 2 or 3)")


def _switch_item(item: str) -> bool:
    if item.lower() in _ON:
        return True
    if item.lower() in _OFF:
        return False
    raise ValueError("is neither on nor off")


def _registers_item(item: str) -> Optional[int]:
    if item.lower() in _NONE:
        return None
    try:
        value = int(item)
    except ValueError:
        raise ValueError("is no register count (1-255) or none") from None
    if not 1 <= value <= 255:
        raise ValueError("is out of range: a thread has 1 to 255 registers (none: no cap)")
    return value


def _backend_item(item: str) -> str:
    from ..backends import canonical_backend

    return canonical_backend(item)


def _bounds_text(text: str) -> Tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError("use T[,B[,C]] (max threads per block, min blocks per SM, max blocks per "
                         "cluster), e.g. --launch-bounds 256,2") from None


@dataclasses.dataclass(frozen=True)
class Flag:
    """How a `CompileConfig` field is given on a command line (the magic's
    line, ``gpucache warm``), and which stages read it: declared once, with
    the field (`_field`); the magic's arguments, ``gpucache warm``'s flags,
    sweeps and `FIELD_STAGES` are made from these declarations.

    ``kind``: "value" (text, through `parse`), "switch" (present: True),
    "either" (``--x`` / ``--no-x``; absent: None), "optional" (``--x`` alone:
    `const`; ``--x off,on``: through `parse`).  A `sweepable` flag may list
    several values (``--opt 2,3``), each parsed by `parse` (an item's error:
    a `ValueError` saying what it is not), and compiles a variant each."""

    stages: Tuple[str, ...]  # the stages whose tokens read the field directly
    help: str
    kind: str = "value"
    parse: Optional[Callable[[str], Any]] = None
    sweepable: bool = False
    metavar: Optional[str] = None
    example: str = ""  # how a list of values is written (for a sweepable flag's errors)
    const: Any = None
    name: str = ""  # the field's (set by `_flags`)

    @property
    def option(self) -> str:
        return "--" + self.name.replace("_", "-")

    def argument(self) -> Tuple[Tuple[str, ...], Dict[str, Any]]:
        """``add_argument``'s arguments for this flag (argparse's, or IPython's ``@argument``)."""
        kwargs: Dict[str, Any] = {"help": self.help}
        if self.kind == "switch":
            kwargs["action"] = "store_true"
        elif self.kind == "either":
            kwargs.update(action=argparse.BooleanOptionalAction, default=None)
        else:
            kwargs.update(default=None, metavar=self.metavar)
            if self.kind == "optional":
                kwargs.update(nargs="?", const=self.const)
        return (self.option,), kwargs

    def values(self, text: Any) -> tuple:
        """The values a flag's text gives: one, or (a sweepable flag) several
        joined by commas; a `ValueError` names the flag, the text and what is
        allowed."""
        if self.kind in ("switch", "either") or text is None or self.parse is None:
            return (text,)
        if not self.sweepable:
            try:
                return (self.parse(str(text)),)
            except ValueError as exc:
                raise ValueError(f"{self.option} {text}: {exc}") from None
        return parse_list(text, self.parse, self.option, self.example)


def parse_list(text: Any, parse: Callable[[str], Any], option: str, example: str) -> tuple:
    """Values written as a flag lists them (``--opt 2,3``), each once."""
    items = [item.strip() for item in str(text).split(",")]
    if any(not item for item in items):
        raise ValueError(f"{option} {text}: an empty value; list values as {example}")
    values: List[Any] = []
    for item in items:
        try:
            value = parse(item)
        except ValueError as exc:
            raise ValueError(f"{option} {text}: {item!r} {exc}; list values as {example}") from None
        if value in values:
            raise ValueError(f"{option} {text}: {item!r} is listed twice; list each value once")
        values.append(value)
    return tuple(values)


def _field(default: Any, flag: Flag) -> Any:
    return dataclasses.field(default=default, metadata={"flag": flag})


_FOLLOW = "(default: follow --fastmath)"


@dataclasses.dataclass(frozen=True)
class CompileConfig:
    """Everything that changes what a kernel compiles to.

    Fields are validated and normalised on construction; a bad value raises
    `ConfigError` (a `ValueError`) naming the field, the value and what is
    allowed.  ``ftz``, ``prec_div`` and ``prec_sqrt`` default to None, meaning
    "follow fastmath"; ``fma`` defaults to None, meaning on (as numba-cuda,
    with or without fastmath); tokens use their effective values, so an unset
    field and its default give the same token.
    """

    # `sm` is read by ptx (-arch=compute_XY) and cubin (sm_XY).  Lowering reads it
    # only for a few operations (float64 atomic add below sm_60, tanh under
    # fastmath below sm_75, any @overload that asks): the pipeline records whether
    # typing or lowering read it, and adds it to those tokens only when they did
    # (`TARGET_TRACKED_STAGES`).  A stage also depends on every field read
    # upstream, through the upstream token it hashes.
    sm: Any = _field(86, Flag(("ptx", "cubin"), metavar="SM[,SM...]",
                              help="target: 86, 8.6 or sm_86; several, 80,86,90: a fatbin with a cubin for each"))
    opt: int = _field(3, Flag(("ptx",), parse=_opt_item, sweepable=True, metavar="N[,N...]", example="--opt 2,3",
                              help="libNVVM optimisation level 0-3 (default 3); several (2,3): a variant each"))
    fastmath: bool = _field(False, Flag(
        ("llvm", "ptx"), kind="optional", const="on", parse=_switch_item, sweepable=True, metavar="off,on",
        example="--fastmath off,on (or --fastmath alone: on)",
        help="fast math in lowering and libNVVM; off,on: a variant each"))
    ftz: Optional[bool] = _field(None, Flag(("ptx",), kind="either", help=f"flush denormals to zero {_FOLLOW}"))
    prec_div: Optional[bool] = _field(None, Flag(("ptx",), kind="either", help=f"IEEE division {_FOLLOW}"))
    prec_sqrt: Optional[bool] = _field(None, Flag(("ptx",), kind="either", help=f"IEEE square root {_FOLLOW}"))
    fma: Optional[bool] = _field(None, Flag(("ptx",), kind="either",
                                            help="contract multiply-add (default: on, with or without --fastmath)"))
    debug: bool = _field(False, Flag(("llvm", "ptx"), kind="switch",
                                     help="full debug information (use with --opt 0)"))
    lineinfo: bool = _field(False, Flag(("llvm",), kind="switch", help="line information for profilers"))
    max_registers: Optional[int] = _field(None, Flag(
        ("cubin",), parse=_registers_item, sweepable=True, metavar="N[,N...]", example="--max-registers 32,64,none",
        help="register limit per thread (1-255); several (32,64,none): a variant each"))
    launch_bounds: Any = _field(None, Flag(
        ("llvm",), parse=_bounds_text, metavar="T[,B[,C]]",
        help="max threads per block[, min blocks per SM[, max blocks per cluster]]"))
    lto: bool = _field(False, Flag(("ptx", "cubin"), kind="switch",
                                   help="link-time optimisation (LTO-IR through nvJitLink)"))
    # The compiler (`gpucache_ext.backends`): None, the kernel's own (numba.cuda.jit: numba-cuda;
    # numba_cuda_mlir.cuda.jit: numba-cuda-mlir; a plain function: the default).  No stage reads
    # it as a field: every token names its backend's packages (`stagespec.Chain.tools`).
    backend: Optional[str] = _field(None, Flag(
        (), parse=_backend_item, sweepable=True, metavar="NAME[,NAME]", example="--backend numba-cuda,mlir",
        help="the compiler: numba-cuda or mlir (numba-cuda-mlir); default: the one the kernel was "
             "defined with; numba-cuda,mlir: a variant each, side by side"))

    def __post_init__(self):
        object.__setattr__(self, "sm", parse_sm(self.sm))
        if not _is_int(self.opt) or not 0 <= self.opt <= 3:
            raise ConfigError(f"opt={self.opt!r} is invalid; use an int from 0 to 3", field="opt")
        for name in ("fastmath", "debug", "lineinfo", "lto"):
            _check_bool(name, getattr(self, name))
        for name in ("ftz", "prec_div", "prec_sqrt", "fma"):
            _check_bool(name, getattr(self, name), optional=True)
        if self.max_registers is not None and (
            not _is_int(self.max_registers) or not 1 <= self.max_registers <= 255
        ):
            raise ConfigError(
                f"max_registers={self.max_registers!r} is invalid; use None or an int from 1 to 255",
                field="max_registers",
            )
        object.__setattr__(self, "launch_bounds", _normalise_launch_bounds(self.launch_bounds))
        if self.backend is not None:
            try:
                object.__setattr__(self, "backend", _backend_item(str(self.backend)))
            except ValueError as exc:
                raise ConfigError(f"backend={self.backend!r} {exc}", field="backend") from None

    # -- derived values -------------------------------------------------
    @property
    def cc(self) -> Tuple[int, int]:
        """The target as numba's (major, minor) tuple."""
        return divmod(self.sm, 10)

    @property
    def arch(self) -> str:
        """libNVVM's -arch value, e.g. ``compute_86``."""
        return f"compute_{self.sm}"

    @property
    def sm_name(self) -> str:
        """nvJitLink's -arch value, e.g. ``sm_86``."""
        return f"sm_{self.sm}"

    def nvvm_math(self) -> dict:
        """Effective libNVVM math options (the expansion numba uses for fastmath)."""
        fast = self.fastmath
        return {
            "ftz": fast if self.ftz is None else self.ftz,
            "prec_div": (not fast) if self.prec_div is None else self.prec_div,
            "prec_sqrt": (not fast) if self.prec_sqrt is None else self.prec_sqrt,
            "fma": True if self.fma is None else self.fma,
        }

    def fields(self) -> dict:
        """Every field as given (JSON-able: tuples become lists in JSON)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def normalised(self) -> dict:
        """Every field at its effective value: the form tokens hash."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values.update(self.nvvm_math())
        return values

    def stage_fields(self, stage: str, chain=None) -> dict:
        """The normalised fields `stage` reads directly (in `chain`, a
        backend's `stagespec.Chain`, where it says so: `Chain.reads_of`)."""
        values = self.normalised()
        reads = chain.reads_of(stage) if chain is not None else None
        if reads is not None:
            return {name: values[name] for name in reads}
        return {name: values[name] for name, stages in FIELD_STAGES.items() if stage in stages}

    def replace(self, **changes) -> "CompileConfig":
        """A copy with some fields changed (validated like the constructor)."""
        return dataclasses.replace(self, **changes)

    def diff(self, other: "CompileConfig") -> dict:
        """Fields whose effective values differ: {name: (self's, other's)}."""
        mine, theirs = self.normalised(), other.normalised()
        return {k: (mine[k], theirs[k]) for k in mine if mine[k] != theirs[k]}

    def summary(self) -> str:
        """A short human-readable form: sm_XY and the fields set away from their defaults."""
        parts = [f"sm_{self.sm}"]
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name != "sm" and value != f.default:
                parts.append(f"{f.name}={value}")
        return " ".join(parts)


def _flags() -> Tuple[Flag, ...]:
    undeclared = [f.name for f in dataclasses.fields(CompileConfig) if "flag" not in f.metadata]
    if undeclared:  # (fail closed: a field no stage is said to read would enter no token)
        raise TypeError(f"CompileConfig fields {undeclared} declare no Flag: declare each with _field(default, "
                        "Flag(stages, ...)), naming the stages that read it")
    return tuple(dataclasses.replace(f.metadata["flag"], name=f.name) for f in dataclasses.fields(CompileConfig))


# Every field's flag, in the order of the fields.
FLAGS: Tuple[Flag, ...] = _flags()
FLAG_OF: Dict[str, Flag] = {flag.name: flag for flag in FLAGS}
# Which stages read each field directly (see `CompileConfig`).  The heart of
# the cache's soundness: a stage's token hashes exactly the fields it reads.
FIELD_STAGES: Dict[str, Tuple[str, ...]] = {flag.name: flag.stages for flag in FLAGS}
# The fields a flag may list, in the order their values vary in a sweep (the last fastest).
SWEPT: Tuple[str, ...] = tuple(flag.name for flag in FLAGS if flag.sweepable)


def option_of(field: Optional[str]) -> str:
    """The flag a field is given with (``--max-registers``); ``--ptx`` for a fatbin's PTX target."""
    return FLAG_OF[field].option if field in FLAG_OF else "--" + (field or "").replace("_", "-")


def add_config_arguments(add: Callable[..., Any], leave_out: Tuple[str, ...] = ("sm",)) -> None:
    """Declare every config field's flag (but `leave_out`'s) with `add`
    (``parser.add_argument``), in the order of the fields."""
    for flag in FLAGS:
        if flag.name not in leave_out:
            args, kwargs = flag.argument()
            add(*args, **kwargs)


def config_from_flags(given: Any, sm: Any) -> Tuple["CompileConfig", Dict[str, tuple]]:
    """The config that parsed flags (`given`: an argparse namespace with an
    attribute per field, None where not given) say for target `sm`, at each
    swept field's first value, and the swept fields' values ({field: values},
    for `gpucache_ext.sweeps.combinations`).  A `ValueError` (a `ConfigError`
    where the value is out of a field's range) names the flag."""
    fields: Dict[str, Any] = {}
    swept: Dict[str, tuple] = {}
    for flag in FLAGS:
        text = getattr(given, flag.name, None)
        if flag.name == "sm" or text is None or (flag.kind == "switch" and not text):
            continue
        values = flag.values(text)
        if flag.sweepable:
            swept[flag.name] = values
        fields[flag.name] = values[0]
    return CompileConfig(sm=sm, **fields), swept


def check_cell_flags(config: "CompileConfig", swept: Dict[str, Sequence]) -> Tuple["CompileConfig", dict]:
    """`config` and `swept` (`config_from_flags`) as a cell's line (the
    magic's, ``gpucache warm``'s) may give them, or a `ValueError` naming the
    flag.  ``--backend``: in a cell the import decides the compiler, so one
    backend alone is refused; ``--backend numba-cuda,mlir`` compares both
    compilers' builds of numba-cuda kernels: its variants are the kernel's
    own compiler's (bound first: launches run its code) and numba-cuda-mlir's."""
    given = tuple(swept.get("backend") or ((config.backend,) if config.backend is not None else ()))
    if not given:
        return config, swept
    if sorted(given) != ["mlir", "numba-cuda"]:
        raise ValueError("--backend: in a cell the import decides the compiler (from numba_cuda_mlir import "
                         "cuda: numba-cuda-mlir; from numba import cuda: numba-cuda); leave --backend out, or "
                         "compare both compilers' builds of numba-cuda kernels with --backend numba-cuda,mlir")
    return config.replace(backend="numba-cuda"), {**swept, "backend": ("numba-cuda", "mlir")}


def with_consts(words: List[str]) -> List[str]:
    """Command-line `words` with the value of a flag that may stand alone
    (``--fastmath``: on) written out where the next word is not a value of
    it: argparse would take ``gpucache warm --fastmath nb.ipynb``'s path for
    the flag's value."""
    out: List[str] = []
    for index, word in enumerate(words):
        out.append(word)
        flag = next((f for f in FLAGS if f.kind == "optional" and f.option == word), None)
        if flag is None:
            continue
        following = words[index + 1] if index + 1 < len(words) else None
        if following is None or following.startswith("-") or not _reads_as(flag, following):
            out.append(str(flag.const))
    return out


def _reads_as(flag: Flag, word: str) -> bool:
    """Whether `word` is a value (or a list of values) of `flag`."""
    try:
        flag.values(word)
    except ValueError:
        return False
    return True


def flags_text(given: Any) -> List[str]:
    """The flags (but --sm) that parsed `given` holds, as words a command line takes again."""
    words: List[str] = []
    for flag in FLAGS:
        value = getattr(given, flag.name, None)
        if flag.name == "sm" or value is None:
            continue
        if flag.kind == "switch":
            words += [flag.option] if value else []
        elif flag.kind == "either":
            words.append(flag.option if value else "--no-" + flag.option[2:])
        else:
            words += [flag.option, str(value)]
    return words


# where a config summary's next field starts ("launch_bounds=(200, 2)" holds a
# space, and so do a fatbin's targets, "sm_80,86 +ptx 80")
_FIELD_START = re.compile(r"\s+(?=[A-Za-z_]\w*=)")


def summary_fields(summary: str) -> List[str]:
    """The fields of a config summary (`CompileConfig.summary`,
    `Targets.describe`), each whole, for layouts that break a long config
    between fields only: ["sm_86", "fastmath=True", "launch_bounds=(200, 2)"],
    ["sm_80,86 +ptx 80", "max_registers=32"]."""
    return [field for field in _FIELD_START.split(summary.strip()) if field] or [""]


def _target_list(value) -> Tuple[Any, ...]:
    if isinstance(value, str):
        items = tuple(part.strip() for part in value.split(","))
        if any(not item for item in items):
            raise ConfigError(f"sm={value!r} is invalid (an empty item); list targets as 80,86,90",
                              field="sm")
        return items
    if isinstance(value, (list, tuple, set, frozenset)) and not (  # (8, 6) is one target, (80, 86) two
            isinstance(value, tuple) and len(value) == 2 and all(_is_int(v) and v < 20 for v in value)):
        return tuple(sorted(value, key=str) if isinstance(value, (set, frozenset)) else value)
    return (value,)


_NO_PTX = ("none", "off", "no")


@dataclasses.dataclass(frozen=True)
class Targets:
    """The targets of a multi-target (fatbin) build: a cubin for each real
    architecture in ``sms``, and the PTX of ``ptx`` for the driver to compile
    on GPUs none of them runs on.

    ``sms``: targets as `CompileConfig` takes them (86, "8.6", "sm_86"), or one
    string "80,86,90"; kept sorted, so the order they are given in does not
    matter.  ``ptx``: the virtual architecture whose PTX the fatbin carries,
    at most the lowest cubin target (its PTX then runs wherever a cubin would
    not); None: the lowest cubin target; "none" (or False): no PTX.
    A bad value raises `ConfigError` naming the field (``"sm"`` or ``"ptx"``).
    """

    sms: Tuple[int, ...]
    ptx: Optional[int] = None
    # the PTX target was given (not the default): a kernel whose PTX cannot
    # go into the fatbin is then an error rather than a fatbin without it
    explicit_ptx: bool = dataclasses.field(default=False, compare=False, repr=False)

    def __init__(self, sms, ptx=None):
        items = _target_list(sms)
        parsed = [parse_sm(item) for item in items]
        if not parsed:
            raise ConfigError("sm=() is invalid: list at least one target, e.g. 80,86,90", field="sm")
        seen = set()
        for sm, given in zip(parsed, items):
            if sm in seen:
                raise ConfigError(f"sm={sms!r} is invalid: sm_{sm} is listed twice ({given!r}); "
                                  "list each target once", field="sm")
            seen.add(sm)
        ordered = tuple(sorted(parsed))
        if ptx is None or ptx is True:
            chosen: Optional[int] = ordered[0]
        elif ptx is False or (isinstance(ptx, str) and ptx.strip().lower() in _NO_PTX):
            chosen = None
        else:
            try:
                chosen = parse_sm(ptx)
            except ConfigError as exc:
                raise ConfigError(str(exc).replace("sm=", "ptx=", 1) + ", or none for no PTX", field="ptx",
                                  value=ptx, why=exc.why) from None
            if chosen > ordered[0]:
                raise ConfigError(
                    f"ptx={ptx!r} is invalid: compute_{chosen} is above the lowest cubin target "
                    f"sm_{ordered[0]}, and the PTX is there for the GPUs no cubin runs on; use a "
                    f"target of at most {ordered[0]} (the default), or none", field="ptx")
        object.__setattr__(self, "sms", ordered)
        object.__setattr__(self, "ptx", chosen)
        object.__setattr__(self, "explicit_ptx", ptx is not None and ptx is not True and chosen is not None)

    @property
    def builds(self) -> Tuple[int, ...]:
        """Every target a stage runs for: the cubin targets, and the PTX
        target where it is none of them (its stages stop at ptx)."""
        if self.ptx is None or self.ptx in self.sms:
            return self.sms
        return tuple(sorted(self.sms + (self.ptx,)))

    def summary(self) -> str:
        """"sm_80,86,90 +ptx 80" (or "no ptx")."""
        text = f"sm_{','.join(str(sm) for sm in self.sms)}"
        return text + (f" +ptx {self.ptx}" if self.ptx is not None else " no ptx")

    def describe(self, config: CompileConfig) -> str:
        """`config`'s summary with these targets in place of its sm:
        "sm_80,86,90 +ptx 80 max_registers=32"."""
        rest = config.summary().split(" ", 1)
        return self.summary() + (" " + rest[1] if len(rest) > 1 else "")

    def __str__(self) -> str:
        return self.summary()

