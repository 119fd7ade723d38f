"""Comparing the pipeline's output with numba-cuda's own.

numba-cuda's `compile_ptx` is the reference.  Symbol names differ by design
(numba numbers functions from a process-wide counter, the pipeline from the
source identity), so names are replaced by placeholders in order of first
appearance, and comment lines (compiler banners) are dropped; nothing else
is normalised.
"""

from __future__ import annotations

import contextlib
import re

_SYMBOL = re.compile(r"_ZN[\w$]+")


def normalise_ptx(text: str) -> str:
    names = {}

    def placeholder(match):
        return names.setdefault(match.group(0), f"SYM{len(names)}")

    text = _SYMBOL.sub(placeholder, text)
    return "\n".join(line.rstrip() for line in text.splitlines()
                     if line.strip() and not line.strip().startswith("//"))


class _StandInDevice:
    """What numba-cuda asks of the current GPU when it compiles a device
    function eagerly: only its compute capability."""

    def __init__(self, cc):
        self.compute_capability = cc


@contextlib.contextmanager
def stand_in_gpu(cc=(8, 6)):
    """Let numba-cuda compile the reference without a GPU (it asks the current
    device for its compute capability; nothing else)."""
    import numba.cuda.dispatcher as dispatcher

    saved = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: _StandInDevice(cc)
    try:
        yield
    finally:
        dispatcher.get_current_device = saved


def numba_ptx(func, sig, cc=(8, 6), **options) -> str:
    """numba-cuda's own PTX for `func`."""
    from numba import cuda

    with stand_in_gpu(cc):
        ptx, _ = cuda.compile_ptx(func, sig, cc=cc, **options)
    return ptx
