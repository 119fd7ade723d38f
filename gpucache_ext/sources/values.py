"""Plain values as the source identity describes them: the scalars it keys
exactly (by type and value, floats by their bits), how a value is shown in
a miss, numba's types recognised cheaply, and numpy dtypes and array
contents byte for byte.  Shared by the code digest (`code`), the snapshot
(`snapshot`) and the walk (`walk`)."""

from __future__ import annotations

import sys
import types as pytypes
from typing import Dict

import xxhash
from .. import memos


# Scalars described exactly by their type and value (tokens hash floats by
# their bits and ints by value)
EXACT_SCALARS = frozenset({type(None), bool, int, float, str, bytes})
SCALAR_BASES = (int, float, complex, str, bytes)


MISSING = object()  # (a name or attribute that is not there)


def short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def shown(value) -> str:
    if type(value).__name__ == "FakeCUDAArray":
        return f"device array{tuple(value.shape)} {value.dtype}"
    interface = getattr(value, "__cuda_array_interface__", None)
    if interface:  # any object with the CUDA Array Interface
        return f"device array{tuple(interface['shape'])} {interface['typestr']}"
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.ndarray):
        return f"array{value.shape} {value.dtype}"
    if isinstance(value, pytypes.FunctionType):
        return f"function {value.__qualname__}"
    if isinstance(value, type):
        return f"class {value.__qualname__}"
    return repr(value)


def is_numba_type(value) -> bool:
    """Whether `value` is a numba type, numba-cuda's, numba's own
    (``numba.core.types``: its ``Function``) or numba-cuda-mlir's, by the
    class's bases: the ABC's own check walks every one of numba's type
    classes for each new class that is none (0.1 s on a first compile)."""
    kind = type(value)
    known = _NUMBA_TYPE_CLASSES.get(kind)
    if known is None:
        known = _NUMBA_TYPE_CLASSES[kind] = any(base in kind.__mro__ for base in numba_type_bases())
    return known


# the modules of the numba type classes every type derives from: numba-cuda's, numba's own,
# and numba-cuda-mlir's copy of numba-cuda's
_TYPE_MODULES = ("numba.cuda.types", "numba.core.types", "numba_cuda_mlir.numba_cuda.types")


def numba_type_bases() -> tuple:
    """The base type classes of those compilers loaded (a type's class is
    made after its base, whose module is then loaded: none is imported here)."""
    return tuple(module.Type for module in map(sys.modules.get, _TYPE_MODULES)
                 if module is not None and hasattr(module, "Type"))


_NUMBA_TYPE_CLASSES: Dict[type, bool] = memos.memo("sources.values._NUMBA_TYPE_CLASSES", {})


def dtype_data(dtype) -> list:
    """A dtype in full: byte order, kind and size, or every field's name, offset and type."""
    if dtype.fields is not None:
        fields = []
        for name in dtype.names:
            spec = dtype.fields[name]
            fields.append([name, dtype_data(spec[0]), spec[1], spec[2] if len(spec) > 2 else None])
        return ["struct", dtype.itemsize, bool(dtype.isalignedstruct), fields]
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        return ["subarray", dtype_data(base), list(shape)]
    return ["dtype", dtype.str]


def array_content(array) -> str:
    """A digest of an array's elements, byte for byte (padding included).
    XXH3-128: a 64 MiB array in a few milliseconds, where SHA-256 takes
    around 200 (the token itself is SHA-256 over this and the rest)."""
    np = sys.modules["numpy"]
    contiguous = np.ascontiguousarray(array)
    return "xxh3-128:" + xxhash.xxh3_128_hexdigest(
        contiguous.view(np.uint8).reshape(-1) if contiguous.size else b"")


def array_data(array, content: str) -> list:
    flags = array.flags
    return ["ndarray", dtype_data(array.dtype), list(array.shape), list(array.strides),
            [bool(flags.c_contiguous), bool(flags.f_contiguous), bool(flags.writeable), bool(flags.aligned)],
            content]
