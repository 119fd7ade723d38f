"""The GPU this process launches on, and the target a kernel gets by default.

`default_sm` is the one place that decides the target of a kernel whose
target nobody gave (a cell without ``--sm``, ``Kernel(func)``,
``gpucache_ext.jit``): the current GPU's, where there is one; else the
``GPUCACHE_SM`` setting; else sm_86.  A kernel with such a default follows
the device: launched on a GPU of another architecture, it compiles that
target too (see `gpucache_ext.backends.numba_cuda.launch.kernel`).
"""

from __future__ import annotations

import logging
from typing import Optional, Tuple

from .... import memos
from ....importing import installed

log = logging.getLogger(__name__)


@memos.cached("backends.numba_cuda.launch.device.gpu_available", maxsize=1)
def gpu_available() -> bool:
    """True when a CUDA driver and at least one GPU are present (asked of
    numba-cuda, else of numba-cuda-mlir where it is installed alone)."""
    try:
        return bool(_cuda().is_available())
    except Exception:
        log.debug("no CUDA driver or GPU", exc_info=True)
        return False


def cuda_simulator_on() -> bool:
    """Whether numba's CUDA simulator is on (``NUMBA_ENABLE_CUDASIM=1``, read
    by numba-cuda's own config): ``numba.cuda`` is then the simulator, which
    runs kernels in Python and compiles nothing, and numba-cuda's compiler
    cannot be imported.  False where numba-cuda is not installed."""
    if not installed("numba_cuda"):
        return False
    from numba.cuda.core import config

    return bool(config.ENABLE_CUDASIM)


# (how numba.cuda was imported does not change)
@memos.cached("backends.numba_cuda.launch.device.simulator_imported", maxsize=1)
def simulator_imported() -> bool:
    """Whether ``numba.cuda`` was imported as numba's simulator (the variable
    set when it loaded): numba-cuda's compiler cannot be imported then.  (A
    program that turns the simulator on later keeps the compiler: numba's
    ``cuda.jit`` then makes simulator kernels, and compiling still works.)"""
    import numba.cuda

    return not hasattr(numba.cuda, "_auto_device")


def device_cc() -> Tuple[int, int]:
    """The current GPU's compute capability (needs a GPU)."""
    return tuple(_cuda().get_current_device().compute_capability)


def _cuda():
    """``numba.cuda``, or numba-cuda-mlir's ``cuda`` where numba-cuda is not installed."""
    if installed("numba_cuda"):
        from numba import cuda
    else:
        from numba_cuda_mlir import cuda
    return cuda


def default_sm(setting: Optional[str] = None) -> int:
    """The target for a kernel nobody gave one: the current GPU's, else
    `setting` (default: the ``GPUCACHE_SM`` variable), else 86.

    A GPU whose compute capability the cache does not know as a target (a
    ``ConfigError`` from `parse_sm`) falls through to the setting.
    """
    from ....keys.config import ConfigError, configured_sm, parse_sm

    if gpu_available():
        try:
            return parse_sm(device_cc())
        except ConfigError:
            pass
    return configured_sm(setting)
