"""What a `Kernel` is built with besides its function, its signatures and
its ``@cuda.jit`` options, as one frozen record: the magic makes one per
cell, `gpucache_ext.jit` one per decorator, and `Kernel.specialize` passes
its kernel's on whole."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional, Tuple

from ..keys.config import CompileConfig, Targets


@dataclass(frozen=True)
class KernelSpec:
    config: CompileConfig  # the bound variant's (a sweep's first)
    targets: Optional[Targets] = None  # several targets: each signature compiles to a fatbin
    pinned: bool = False  # the target was given (else it follows the device: `default_sm`)
    variants: Tuple[CompileConfig, ...] = ()  # a sweep's configs (``--max-registers 32,64``)
    blocks: Tuple[int, ...] = ()  # the block sizes whose occupancy the report shows
    dynamic_shared: int = 0  # the dynamic shared memory a launch gives a block (occupancy, tune)
    simulate: bool = False  # launches run on numba's CUDA simulator
    force: bool = False  # recompile every stage at each signature's first compile
    audit: Optional[bool] = None  # True: audit each compile's hits at once (see KernelCache.compile)

    @classmethod
    def make(cls, config: Optional[CompileConfig] = None, *, targets=None, pinned: Optional[bool] = None,
             variants=(), blocks=(), **fields) -> "KernelSpec":
        """As `Kernel` takes its settings: without a config or targets the
        target is `default_sm()`'s and follows the device (not pinned); a
        given target is pinned; `targets` a `Targets` or what it takes
        (``"80,86,90"``)."""
        from .. import backends

        pinned = (config is not None or targets is not None) if pinned is None else pinned
        config = config if config is not None else CompileConfig(sm=backends.backend().default_sm())
        targets = targets if targets is None or isinstance(targets, Targets) else Targets(targets)
        return cls(config, targets, pinned, tuple(variants), tuple(blocks), **fields)

    def replace(self, **fields) -> "KernelSpec":
        return dataclasses.replace(self, **fields)
