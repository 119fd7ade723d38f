"""The functions a kernel calls, as numba knows them: its dispatchers
(device functions, kernels, ``numba.njit`` functions, intrinsics), the
signatures declared for device functions the magic keeps lazy, the
functions ``register_jitable`` makes callable, the line of ``def`` debug
information names, and the Python a simulated kernel runs instead."""

from __future__ import annotations

import linecache
import sys
import types as pytypes
import weakref
from typing import Any, Callable, Dict, Optional, Tuple

from .libraries import file_origin
from .code import code_reads
from .values import MISSING
from .. import memos
from ..importing import front_end_module, loaded_class


# Signatures declared for device functions the magic keeps lazy (numba would
# compile them at once, for the current GPU): dispatcher -> ((args, return type), ...)
_declared: "weakref.WeakKeyDictionary" = memos.state("sources.functions._declared", weakref.WeakKeyDictionary(),
                                                      "what a cell declared: no later read can tell it")


def declare_signatures(dispatcher, signatures) -> None:
    """Record the signatures given to a lazy ``@cuda.jit(sig, device=True)``.

    As numba-cuda's decorator reads them: a signature without a return type
    (``"(int64, int64)"``) is recorded with None, its return type inferred
    when it is typed (`stages.DeviceProxy.compile_device`); of several that
    take the same argument types, the first alone counts (numba compiles it,
    then finds those arguments compiled and skips the others)."""
    normalize_signature = front_end_module("core.sigutils").normalize_signature
    declared = {}
    for sig in signatures:
        args, return_type = normalize_signature(sig)
        declared.setdefault(tuple(args), return_type)
    _declared[dispatcher] = tuple(declared.items())


def shown_signature(args, return_type) -> str:
    """A declared signature as written: ``(int64, int64)`` without a return type."""
    shown = f"({', '.join(map(str, args))})"
    return shown if return_type is None else f"{return_type}{shown}"


def declared_signatures(dispatcher) -> Tuple[Tuple[tuple, Any], ...]:
    """The signatures a device function was declared with, as numba calls it
    with them (arguments and result cast; a return type None is inferred),
    one per argument types; () when it types per call."""
    found = _declared.get(dispatcher) if hasattr(dispatcher, "__weakref__") else None
    if found is not None:
        return found
    if is_device_dispatcher(dispatcher) and not getattr(dispatcher, "_can_compile", True):
        return tuple((tuple(sig.args), sig.return_type) for sig in dispatcher.nopython_signatures)
    return ()


def is_device_dispatcher(value) -> bool:
    return is_dispatcher(value) and bool(value.targetoptions.get("device"))


def is_dispatcher(value) -> bool:
    """A numba-cuda dispatcher (a kernel or a device function)."""
    return isinstance(value, loaded_class("numba.cuda.dispatcher", "CUDADispatcher"))


def python_function(func) -> Callable:
    """The plain Python function behind a function or a numba dispatcher."""
    if isinstance(func, pytypes.FunctionType):
        return func
    pyfunc = getattr(func, "py_func", None)
    if isinstance(pyfunc, pytypes.FunctionType):
        return pyfunc
    raise TypeError(
        f"expected a Python function or a numba.cuda.jit dispatcher, got {type(func).__name__}"
    )


def def_line(pyfunc) -> Optional[int]:
    """The line of `def` numba-cuda writes into debug info (None when it finds
    no source), found as it finds it (`get_func_def_lineno`: the source text
    from linecache, parsed).  Memoised per code object and linecache entry:
    the text of a file edited on disk changes the answer, not the code."""
    get_func_def_lineno = front_end_module("misc.firstlinefinder").get_func_def_lineno
    code = pyfunc.__code__
    linecache.checkcache(code.co_filename)  # (as inspect does: a file changed on disk is read again)
    linecache.getlines(code.co_filename)
    entry = linecache.cache.get(code.co_filename)
    if entry is None or len(entry) != 4:  # no source at all: nothing to remember it by
        return get_func_def_lineno(pyfunc)
    key = (code, code.co_filename, id(entry[2]), entry[:2])
    found = _DEF_LINES.get(key, MISSING)
    if found is MISSING:
        found = get_func_def_lineno(pyfunc)
        if len(_DEF_LINES) > 4096:
            _DEF_LINES.clear()
        _DEF_LINES[key] = found
    return found


_DEF_LINES: Dict[Any, Optional[int]] = memos.memo("sources.functions._DEF_LINES", {})


def pure_python(dispatcher, memo=None):
    """The Python function behind a numba dispatcher, with the dispatchers it
    calls replaced the same way: what the simulator runs for a library
    function numba would compile as a device function (cuda.random's)."""
    memo = {} if memo is None else memo
    pyfunc = python_function(dispatcher)
    if id(pyfunc) in memo:
        return memo[id(pyfunc)]
    namespace = dict(pyfunc.__globals__)
    copy = memo[id(pyfunc)] = _copy_function(pyfunc, namespace, pyfunc.__closure__)
    for name in code_reads(pyfunc.__code__).globals:
        value = namespace.get(name)
        if value is not None and is_numba_function(value) and type(value).__name__ != "_Intrinsic":
            namespace[name] = pure_python(value, memo)
    return copy


def _copy_function(pyfunc, namespace, closure):
    """`pyfunc` reading its globals from `namespace` and its free variables from `closure`."""
    copy = pytypes.FunctionType(pyfunc.__code__, namespace, pyfunc.__name__, pyfunc.__defaults__, closure)
    copy.__kwdefaults__ = pyfunc.__kwdefaults__
    copy.__qualname__ = pyfunc.__qualname__
    copy.__module__ = pyfunc.__module__
    copy.__doc__ = pyfunc.__doc__
    return copy


def is_numba_function(value) -> bool:
    """A numba CPU dispatcher (``numba.njit``) or an ``@intrinsic``, which
    numba-cuda also compiles when a kernel calls them."""
    kind = type(value).__name__
    module = type(value).__module__ or ""
    return module.startswith("numba") and (
        kind == "_Intrinsic" or (hasattr(value, "py_func") and hasattr(value, "targetoptions")))


def cpu_compilation_disabled(dispatcher) -> bool:
    """A CPU dispatcher numba-cuda will not compile for a kernel: one given
    explicit signatures (``@jit("(i4, i4)")`` turns compiling off), unless
    numba-cuda already made its device dispatcher, which it then reuses
    (numba/cuda/target.py CUDATypingContext.resolve_value_type)."""
    return not getattr(dispatcher, "_can_compile", True) and \
        not hasattr(dispatcher, "_CUDATypingContext__dispatcher")


def registered_jitable(func, qualname, label) -> bool:
    """True when user function `func` is made callable from kernels by
    ``register_jitable`` (it compiles as a device function would).  A user
    function with its own ``@overload`` implementation is refused: numba keeps
    the implementations it builds in process-wide tables keyed by argument
    types alone, which the cache cannot key."""
    if "numba.cuda" not in sys.modules:  # (nothing registered it with numba-cuda, which is not even imported)
        return False
    from numba.cuda.descriptor import cuda_target

    context = cuda_target.typing_context
    context.refresh()
    found = context._lookup_global(func)
    templates = getattr(found, "templates", None) or ()
    if not templates:
        return False
    for template in templates:
        overload_func = getattr(template, "_overload_func", None)
        name = getattr(overload_func, "__qualname__", "")
        if name.startswith("register_jitable.") and file_origin(overload_func.__code__.co_filename):
            continue
        # an @overload of it in user code: numba's extension tables, which every typing token
        # holds (`extensions`), decide the call; the function is keyed as itself
        return False
    return True
