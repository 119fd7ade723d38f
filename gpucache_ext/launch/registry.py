"""Which `Kernel`s are alive, which one compiled each live result, and the
count of `refresh_all` calls their re-checks follow.

A kernel re-checks its inputs (globals, device functions) at its first
launch since `refresh_all` (the magic calls it after every cell), and at its
first `Kernel.variants` read or `Kernel.use`; a view that holds only results
(the cell's report, the inspector) re-checks them with the kernel that
compiled them (`stale_reasons`).  Nothing here imports numba.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Dict, Optional, Protocol, Tuple

from .. import memos

if TYPE_CHECKING:
    from ..pipeline.cache import CompileResult, KernelCache


class LiveKernel(Protocol):
    """What the registry asks of a live `Kernel`: the cache it compiles
    through and what changed since one of its results.  Declared here so that
    the registry is written against what it asks, not against `Kernel`,
    which registers itself here."""

    cache: "KernelCache"

    def changed_since(self, result: "CompileResult") -> Tuple[str, ...]:
        """What changed in the kernel's inputs since `result` was built; () where nothing did."""

# refresh_all's count: a kernel that last checked its inputs at another count checks them again
generation = 0


def refresh_all() -> None:
    """Make every kernel re-check its inputs (globals, device functions) at its
    next launch, and at its next `Kernel.variants` or `Kernel.use`."""
    global generation
    generation += 1


# Every live Kernel (`live_kernels`), and which one compiled each live result
# (`compiled_by`): what a view that holds only results (the cell's report, the
# inspector) re-checks them with.  Keyed by id, each entry checked against its
# weak reference (an id is reused once its object is gone).
_kernels: "weakref.WeakSet[LiveKernel]" = memos.state("launch.registry._kernels", weakref.WeakSet(),
                                                      "the live kernels, while they live")
_compiled_by: Dict[int, Tuple[Any, Any]] = memos.state("launch.registry._compiled_by", {},
                                                       "which live kernel compiled each live result")


def add_kernel(kernel: LiveKernel) -> None:
    """Count `kernel` among the live ones (`live_kernels`) while it lives."""
    _kernels.add(kernel)


def note_compiled(kernel: LiveKernel, result: "CompileResult") -> None:
    """`kernel` compiled `result` (`compiled_by`), while both live."""
    key = id(result)

    def gone(ref, key=key):
        if _compiled_by.get(key, (None,))[0] is ref:
            _compiled_by.pop(key, None)

    _compiled_by[key] = (weakref.ref(result, gone), weakref.ref(kernel))


def compiled_by(result: "CompileResult") -> Optional[LiveKernel]:
    """The live `Kernel` that compiled `result` (None where none is known)."""
    found = _compiled_by.get(id(result))
    if found is None or found[0]() is not result:
        return None
    return found[1]()


def live_kernels(cache: Optional["KernelCache"] = None) -> "list[LiveKernel]":
    """The Kernels alive in this process (those compiling through `cache` where given)."""
    return [kernel for kernel in list(_kernels) if cache is None or kernel.cache is cache]


def stale_reasons(result: "CompileResult") -> Optional[Tuple[str, ...]]:
    """Whether `result` is still what its kernel's inputs compile to now
    (`Kernel.changed_since`): () where it is, what changed where it is not
    ("global K 2.5 -> 3.25"), None where no live kernel compiled it (nothing
    to check it against).  Compiles nothing."""
    kernel = compiled_by(result)
    return None if kernel is None else kernel.changed_since(result)


__all__ = ["LiveKernel", "refresh_all", "add_kernel", "note_compiled", "compiled_by", "live_kernels", "stale_reasons"]
