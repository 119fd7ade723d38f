"""A `Kernel`'s launches on numba's CUDA simulator (no GPU, or
``simulate=True``): the variant a GPU launch would run is still compiled
through the cache (its typing decides what the arguments convert to), and
numba's simulator runs the Python function on the arguments as that launch
would get them (`gpucache_ext.backends.numba_cuda.launch.simulator`).

`SimulatorLaunches` is a part a `Kernel` holds, written against what it
reads of the kernel (`Simulated`).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Protocol

from ....launch import registry
from ....pipeline.cache import CompileResult
from .compiled import LaunchError, raised_as_numba
from .simulator import launch_arguments, notice_simulator, simulated_kernel


class Simulated(Protocol):
    """What `SimulatorLaunches` reads of its `Kernel`: its function, bound
    config and options, whether it was asked to simulate, whether it takes
    raw pointers, and the variant a launch with given arguments runs.
    Declared here so that the simulator's launches are written against what
    they read, not against `Kernel`, which imports this module."""

    __name__: str
    py_func: Callable
    config: Any
    options: Mapping[str, Any]
    simulate: bool
    takes_addresses: bool

    def result_for(self, *args) -> CompileResult:
        """The compiled variant a launch with `args` runs (compiled now if needed)."""


class SimulatorLaunches:
    """A kernel's launches on numba's simulator; the simulator's kernel is
    made again once per `refresh_all` generation (its globals are read then)."""

    def __init__(self, kernel: Simulated, lock):
        self._kernel = kernel
        self._lock = lock
        self._simulated = None  # (generation, numba's simulator kernel)

    def launch(self, *args, griddim, blockdim, stream=0, sharedmem=0) -> None:
        """``kernel[griddim, blockdim, stream, sharedmem](*args)``, simulated."""
        from numba.cuda.errors import normalize_kernel_dimensions

        kernel = self._kernel
        if kernel.takes_addresses:
            raise LaunchError(
                f"{kernel.__name__} takes raw pointers, which need a GPU: the simulator runs "
                "Python and cannot follow a device pointer")
        with raised_as_numba():
            result = kernel.result_for(*args)
        notice_simulator(kernel.simulate)
        if result.cooperative and math.prod(normalize_kernel_dimensions(griddim, blockdim)[0]) > 1:
            raise LaunchError(
                f"{kernel.__name__} synchronises its grid (cuda.cg.this_grid), which numba's "
                f"simulator can do within one block only; launch it as [1, threads] (or with "
                f".forall(n)) to simulate it, or run it on a GPU")
        self._simulator()[griddim, blockdim, stream, sharedmem](*self._as_launched(result, args))

    def forall(self, ntasks: int, stream=0, sharedmem=0) -> Callable[..., None]:
        """numba's ``forall`` on the simulator: `ntasks` blocks of one thread,
        as numba's simulator does (one block for a kernel that synchronises its grid)."""
        if ntasks < 0:
            raise ValueError(f"Can't create ForAll with negative task count: {ntasks}")

        def launch_all(*args):
            if ntasks == 0:
                return None
            if self._kernel.result_for(*args).cooperative:  # grid sync: one block, where the simulator can
                return self.launch(*args, griddim=1, blockdim=ntasks, stream=stream, sharedmem=sharedmem)
            return self.launch(*args, griddim=ntasks, blockdim=1, stream=stream, sharedmem=sharedmem)

        return launch_all

    def _as_launched(self, result: CompileResult, args) -> tuple:
        """The arguments as a GPU launch of `result` gets them (a float32
        parameter gets a rounded float), for the simulator, which would
        otherwise compute with the Python values themselves."""
        try:
            return launch_arguments(result.signature, args)
        except (TypeError, OverflowError, ValueError) as exc:
            raise LaunchError(f"{self._kernel.__name__}: {exc}") from None

    def _simulator(self):
        kernel = self._kernel
        with self._lock:
            if self._simulated is None or self._simulated[0] != registry.generation:
                self._simulated = (registry.generation, simulated_kernel(
                    kernel.py_func, kernel.config, kernel.options.get("extensions") or ()))
            return self._simulated[1]


__all__ = ["Simulated", "SimulatorLaunches"]
