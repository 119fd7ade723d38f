"""numba-cuda's ``@cuda.jit`` options, as the cache reads them.

Which options become `CompileConfig` fields (and so enter the tokens), which
change nothing a kernel is compiled from, which are used only when a kernel
is loaded and launched, which name code the cubin links; and the ones
numba-cuda itself refuses, refused the same way before anything compiles.
"""

from __future__ import annotations

from typing import Any, Dict

from ...keys.config import CompileConfig
from ...errors import UnsupportedKernelError
from ... import memos

# numba-cuda's @cuda.jit options: those that map onto CompileConfig fields,
# those that do not change the kernel's code here, those used at launch, and
# the code the cubin links.
_CONFIG_OPTIONS = ("fastmath", "debug", "lineinfo", "max_registers", "launch_bounds", "lto")
_INERT_OPTIONS = ("device", "inline", "forceinline", "cache")  # cache: this cache replaces numba's
# used when the kernel is loaded and launched, never part of its code
_LAUNCH_OPTIONS = ("shared_memory_carveout", "extensions")
# code the cubin links (KernelCache.compile's link=)
_LINK_OPTIONS = ("link",)
_JIT_OPTIONS = _CONFIG_OPTIONS + _INERT_OPTIONS + _LAUNCH_OPTIONS + _LINK_OPTIONS + ("opt", "boundscheck")


def check_options(options: Dict[str, Any], what: str = "@cuda.jit") -> None:
    """Refuse what numba-cuda's jit refuses (boundscheck, deprecated and
    unknown options, bad carveouts), before anything compiles."""
    if options.get("boundscheck"):
        raise UnsupportedKernelError(
            f"{what}(boundscheck=True): bounds checking is not supported for CUDA "
            "(numba-cuda refuses it too); remove the option"
        )
    for name in ("argtypes", "restype", "bind"):
        if options.get(name) is not None:
            raise UnsupportedKernelError(
                f"{what}({name}=...) is no longer supported by numba-cuda; give the "
                "signature as the first argument, e.g. @cuda.jit('void(float32[:])')"
            )
    unknown = sorted(set(options) - set(_JIT_OPTIONS) - {"argtypes", "restype", "bind"})
    if unknown:
        raise UnsupportedKernelError(
            f"{what}: unknown option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
            f"numba-cuda's jit accepts {', '.join(sorted(_JIT_OPTIONS))}"
        )
    carveout = options.get("shared_memory_carveout")
    if carveout is not None:
        from numba.cuda.decorators import _validate_shared_memory_carveout

        try:  # numba's own check, with its message
            _validate_shared_memory_carveout(carveout)
        except ValueError as exc:
            raise UnsupportedKernelError(f"{what}(shared_memory_carveout=...): {exc}") from None


def explicit_options(targetoptions: Dict[str, Any]) -> Dict[str, Any]:
    """The options of a numba dispatcher that would change or refuse a kernel,
    where they differ from numba's defaults (numba fills in debug=0, opt=True
    and the like)."""
    options = {}
    for name in set(_JIT_OPTIONS) - set(_INERT_OPTIONS):
        value = targetoptions.get(name)
        if (value is not True and value is not None) if name == "opt" else value:
            options[name] = value
    if options.get("lto") and not targetoptions.get("debug") and _numba_lto_default():
        # numba turns LTO on by itself wherever nvJitLink is new enough
        del options["lto"]
    return options


@memos.cached("options._numba_lto_default", maxsize=1)
def _numba_lto_default() -> bool:
    try:
        from numba.cuda.decorators import _have_nvjitlink
    except ImportError:  # older numba-cuda: LTO only when asked for
        return False
    return bool(_have_nvjitlink())


def config_with_options(config: CompileConfig, options: Dict[str, Any]) -> CompileConfig:
    """`config` overridden by a ``@cuda.jit(...)`` decorator's options."""
    check_options(options)
    changes = {}
    for name in _CONFIG_OPTIONS:
        value = options.get(name)
        if value is not None:
            # numba takes any truth value for its switches (debug=1)
            changes[name] = bool(value) if name in ("fastmath", "debug", "lineinfo", "lto") else value
    opt = options.get("opt")
    if opt is not None:
        changes["opt"] = (config.opt or 3) if opt is True else 0 if opt is False else opt
    return config.replace(**changes) if changes else config


def device_options(dispatcher) -> Dict[str, Any]:
    """The options numba lowers a device function with: its own decorator's
    (numba's defaults where it has none), never the calling kernel's."""
    options = getattr(dispatcher, "targetoptions", None) or {}
    return {"fastmath": bool(options.get("fastmath")), "debug": bool(options.get("debug")),
            "lineinfo": bool(options.get("lineinfo")), "forceinline": bool(options.get("forceinline")),
            "inline": options.get("inline", "never")}
