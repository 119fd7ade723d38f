"""The argument types a kernel signature gives: a signature string, a numba
signature or a tuple of types.  Apart from the stages, whose import brings
numba-cuda's compiler: a compile that every stage serves from a cache needs
the signature and none of the compiler."""

from __future__ import annotations

from typing import Any, Tuple

from numba.cuda import types as nbtypes
from numba.cuda.core import sigutils
from ... import memos


def normalize_signature(sig) -> Tuple[Any, ...]:
    """Argument types of a signature string, numba signature or tuple of types."""
    if isinstance(sig, str):  # parsed once: the parse reads numba's type names alone
        return _parse_signature(sig)
    return _normalize_signature(sig)


@memos.cached("signatures._parse_signature", maxsize=1024)
def _parse_signature(sig: str) -> Tuple[Any, ...]:
    return _normalize_signature(sig)


def _normalize_signature(sig) -> Tuple[Any, ...]:
    try:
        args, return_type = sigutils.normalize_signature(sig)
    except Exception as exc:
        raise TypeError(f"invalid kernel signature {sig!r}: {exc}") from exc
    if return_type not in (None, nbtypes.void, nbtypes.none):
        raise TypeError(f"invalid kernel signature {sig!r}: a CUDA kernel must return void")
    return tuple(args)
