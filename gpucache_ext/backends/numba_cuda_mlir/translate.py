"""A kernel written for numba-cuda (``from numba import cuda``), as numba-cuda-mlir reads it.

A sweep ``--backend numba-cuda,mlir`` compiles one kernel with both
compilers, so that its registers, spills and code can be compared.  Its
snapshot (`sources.snapshot.rebind`) binds numba-cuda's objects: the
``numba.cuda`` module and its members (``cuda.grid``, ``cuda.shared``,
``float32``), and numba-cuda device functions.  numba-cuda-mlir types none
of them, so `translated` binds numba-cuda-mlir's object of the same name in
their place (``numba.cuda`` -> ``numba_cuda_mlir.cuda``), and a numba-cuda
device function becomes a numba-cuda-mlir one over its own snapshot,
translated likewise.  This is what the migration guide asks of users, one
import swapped, done on the snapshot: a source compiled so gives the PTX
numba-cuda-mlir gives the source with its import swapped
(tests/test_mlir_translate.py).

The translation reads names alone: the typing token, which holds the
snapshot (numba-cuda's objects by module and name) and numba-cuda-mlir's
version, covers it.  A numba-cuda object numba-cuda-mlir has no namesake
for is refused, naming it.
"""

from __future__ import annotations

import sys
import types as pytypes
from typing import Any, Callable, Dict

from ... import memos
from ...errors import UnsupportedKernelError
from ...importing import loaded_class

# numba-cuda's device function options numba-cuda-mlir's cuda.jit takes as they are
_DEVICE_OPTIONS = ("fastmath", "debug", "lineinfo", "forceinline")


@memos.cached("backends.numba_cuda_mlir.translate._namesakes", maxsize=1)
def _namesakes() -> Dict[int, Any]:
    """{id(numba-cuda's object): numba-cuda-mlir's namesake}: ``numba.cuda``'s
    public members (its intrinsics, memory namespaces, types, submodules)
    that ``numba_cuda_mlir.cuda`` has too, and the module itself."""
    import numba.cuda as numba_cuda
    from numba_cuda_mlir import cuda as mlir_cuda

    found = {id(numba_cuda): mlir_cuda}
    for name in dir(numba_cuda):
        if name.startswith("_") or not hasattr(mlir_cuda, name):
            continue
        found[id(getattr(numba_cuda, name))] = getattr(mlir_cuda, name)
    return found


def _numba_cudas(value) -> bool:
    """Whether `value` is an object of numba's or numba-cuda's (not numba-cuda-mlir's)."""
    if isinstance(value, pytypes.ModuleType):
        name = value.__name__
    else:
        name = getattr(type(value), "__module__", "") or ""
    return name == "numba" or name.startswith("numba.") or name.startswith("numba_cuda.")


def translated_value(value, label: str, qualname: str):
    """numba-cuda-mlir's namesake of `value` where it is numba-cuda's, else `value`."""
    if "numba.cuda" not in sys.modules or not _numba_cudas(value):
        return value
    try:
        found = _namesakes().get(id(value))
    except TypeError:  # (an unhashable value is no member of numba.cuda)
        found = None
    if found is not None:
        return found
    name = getattr(value, "__name__", None) or type(value).__name__
    raise UnsupportedKernelError(
        f"{qualname} reads {label} ({name}), numba-cuda's, which numba-cuda-mlir has no namesake for; "
        "compile it with --backend numba-cuda alone, or write it with numba-cuda-mlir "
        "(from numba_cuda_mlir import cuda)")


def translated(func: pytypes.FunctionType, qualname: str) -> pytypes.FunctionType:
    """`func` (a snapshot's rebound function, whose globals and closure are
    its own) with numba-cuda's objects replaced in place by numba-cuda-mlir's."""
    namespace = func.__globals__
    for name, value in list(namespace.items()):
        if not name.startswith("__"):
            namespace[name] = translated_value(value, f"the global {name}", qualname)
    for name, cell in zip(func.__code__.co_freevars, func.__closure__ or ()):
        cell.cell_contents = translated_value(cell.cell_contents, f"the closure variable {name}", qualname)
    return func


def device_proxy(rebind: Callable, qualname: str) -> Callable:
    """The ``proxy_for`` of `sources.snapshot.rebind` for numba-cuda-mlir: a
    device function (its own, or numba-cuda's) made anew over its snapshot,
    translated, with its own options (once per function in one kernel's
    build), so that typing reads what the token hashed and nothing live, as
    numba-cuda's device proxies do; the user's dispatcher is left alone."""
    made: Dict[str, Any] = {}
    dispatchers = (loaded_class("numba.cuda.dispatcher", "CUDADispatcher")
                   + loaded_class("numba_cuda_mlir.descriptor", "MLIRDispatcher"))

    def proxy(dispatcher, identity):
        if not isinstance(dispatcher, dispatchers):
            return dispatcher
        found = made.get(identity.digest)
        if found is None:
            from numba_cuda_mlir import cuda as mlir_cuda

            options = {name: dispatcher.targetoptions[name] for name in _DEVICE_OPTIONS
                       if dispatcher.targetoptions.get(name)}
            pyfunc = translated(rebind(identity, proxy), qualname)
            found = made[identity.digest] = mlir_cuda.jit(device=True, **options)(pyfunc)
        return found

    return proxy
