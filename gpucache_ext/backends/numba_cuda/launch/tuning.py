"""`Kernel.tune`: choose a sweep's variant and block size for the user's arguments.

With a GPU, every variant (`Kernel.variants`) is launched at every block size
on the user's own arguments and timed with CUDA events (warm-up launches
first, then the median of several), the fastest is bound, and the choice is
filed in the cache (`KernelCache.file_note`: memory, disk and shared tiers,
signed as entries are) under a key made of the variants' cubin tokens, the
device and the arguments' types and shapes: a new process with the same
inputs reuses it without timing anything.  Without a GPU nothing can be
timed: the variants are ranked by theoretical occupancy
(`gpucache_ext.occupancy`), which is not speed, and the result says so.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any, Callable, Optional, Sequence, Tuple

from ....keys.config import CompileConfig
from ....queries import DEFAULT_BLOCKS, ResourceRow, variant_occupancy
from ....pipeline.results import FatbinResult, applied_summary, short_signature
from ..signatures import normalize_signature
from ....keys.tokens import digest
from .compiled import LaunchError


@dataclasses.dataclass(frozen=True)
class TuneResult:
    """What `Kernel.tune` chose, and from what."""

    config: CompileConfig  # the variant now bound
    block: Any  # threads a block (an int, or a tuple for 2D and 3D blocks)
    grid: Any  # the grid it was (or would be) launched with
    measured: bool  # timed on a GPU; False: ranked by theoretical occupancy
    remembered: bool  # an earlier choice for the same inputs, found in the cache (nothing was timed)
    # (variant's config summary, block, milliseconds (measured) or occupancy 0-1 (ranked))
    table: Tuple[Tuple[str, Any, Optional[float]], ...]
    note: str  # how the choice was made, in words

    def __str__(self) -> str:
        return f"{self.config.summary()} at {self.block} threads a block: {self.note}"


def threads(block) -> int:
    """The threads of a block given as 128 or (16, 16)."""
    return math.prod(block) if isinstance(block, tuple) else int(block)


def _grid_for(grid, args) -> Callable[[Any], Any]:
    """(block) -> the grid to launch with: `grid` itself, `grid(block)`, or
    (None) enough blocks to cover the largest array argument once."""
    if callable(grid):
        return grid
    if grid is not None:
        return lambda block: grid
    size = max((int(getattr(arg, "size", 0) or 0) for arg in args), default=0)
    if not size:
        raise ValueError("tune() needs grid= (a grid, or a function of the block size) where no argument "
                         "is an array to cover")
    return lambda block: max(1, math.ceil(size / threads(block)))


def _row(result) -> ResourceRow:
    """The resources of a variant's result on its first target."""
    return ResourceRow.from_result(next(iter(result.cubin_targets.values())))


def _summary(config, result) -> str:
    """The variant's config as ptxas applied it ("max_registers=16 (raised
    to 24 by ptxas)" where the cap was below the target's floor)."""
    return applied_summary(config.summary(), next(iter(result.cubin_targets.values())).link_log)


def tune(kernel, args: Sequence[Any], *, blocks=None, grid=None, runs: int = 5, warmup: int = 1,
         signature=None, force: bool = False) -> TuneResult:
    """`Kernel.tune` (see there)."""
    if runs < 1 or warmup < 0:
        raise ValueError(f"runs={runs!r}, warmup={warmup!r}: give at least 1 timed run and no negative warm-up")
    argtypes = _signature(kernel, args, signature)
    blocks = tuple(blocks or kernel.blocks or DEFAULT_BLOCKS)
    grid_of = _grid_for(grid, args)
    # (the variants it can launch: another compiler's, in a sweep --backend numba-cuda,mlir, are to compare)
    results = {config: kernel.builds.result(argtypes, config) for config in kernel.sweep
               if kernel.variant_set.launchable(config)}
    if kernel.on_simulator():
        return _ranked(kernel, results, blocks, grid_of)
    return _timed(kernel, args, argtypes, results, blocks, grid_of, runs, warmup, force)


def _signature(kernel, args, signature) -> Tuple:
    """The argument types `tune` compiles the variants for."""
    if signature is not None:
        return normalize_signature(signature)
    if len(kernel.declared) == 1:
        return kernel.declared[0]
    if kernel.declared:
        raise LaunchError(f"{kernel.__name__} has {len(kernel.declared)} signatures; give the one to tune for: "
                          f"{kernel.__name__}.tune(..., signature={short_signature(kernel.declared[0])!r})")
    return tuple(kernel.typeof_pyval(arg) for arg in args)


def _ranked(kernel, results, blocks, grid_of) -> TuneResult:
    """No GPU: the variant and block with the highest theoretical occupancy
    (no spills first, then fewer registers, then the block given first)."""
    rows = {config: _row(result) for config, result in results.items()}
    found = variant_occupancy(list(rows.values()), tuple(threads(block) for block in blocks), kernel.dynamic_shared)
    table, best, best_key = [], None, None
    for order, (config, row) in enumerate(rows.items()):
        for position, (block, share) in enumerate(zip(blocks, found.by_row[row.token])):
            value = share.occupancy if share is not None else None
            table.append((_summary(config, results[config]), block, value))
            if value is None:
                continue
            # (a cap ptxas raised to its floor ranks after the same registers asked for as applied)
            key = (not (row.spill_stores or row.spill_loads), value, -row.registers, not row.cap_raised,
                   -order, -position)
            if best_key is None or key > best_key:
                best, best_key = (config, block), key
    if best is None:
        raise ValueError(f"{kernel.__name__}: none of the block sizes {blocks} can launch a variant "
                         "(launch bounds, more threads than a block holds, or static + dynamic shared memory "
                         "past the 48 KiB a numba-cuda launch may have)")
    config, block = best
    kernel.variant_set.bind(config)
    arch = rows[config].arch
    return TuneResult(config, block, grid_of(block), measured=False, remembered=False, table=tuple(table),
                      note=f"no GPU: ranked by theoretical occupancy on {arch} "
                           f"({round(best_key[1] * 100)}%), which is not speed; tune on a GPU to time them")


def _timed(kernel, args, argtypes, results, blocks, grid_of, runs, warmup, force) -> TuneResult:
    from numba import cuda

    device = cuda.get_current_device()
    key = digest({"kernel": kernel.py_func.__qualname__,
                  "variants": sorted(_cubin_tokens(result) for result in results.values()),
                  "device": [str(device.name), list(device.compute_capability)],
                  "signature": short_signature(argtypes),
                  "shapes": [list(getattr(arg, "shape", ())) for arg in args],
                  "blocks": [list(b) if isinstance(b, tuple) else b for b in blocks]})
    if not force:
        filed = kernel.cache.note(key)
        chosen = next((config for config in results if filed and config.summary() == filed.get("config")), None)
        if chosen is not None:
            block = tuple(filed["block"]) if isinstance(filed["block"], list) else filed["block"]
            kernel.variant_set.bind(chosen)
            return TuneResult(chosen, block, grid_of(block), measured=True, remembered=True,
                              table=tuple((s, tuple(b) if isinstance(b, list) else b, ms)
                                          for s, b, ms in filed.get("table", ())),
                              note=f"chosen earlier on {device.name} for these inputs (tune(force=True) "
                                   "times them again)")
    table, best = [], None
    for config in results:
        kernel.variant_set.bind(config)
        for block in blocks:
            launch = kernel[grid_of(block), block, 0, kernel.dynamic_shared]
            for _ in range(warmup):
                launch(*args)
            cuda.synchronize()
            times = []
            for _ in range(runs):
                start, end = cuda.event(timing=True), cuda.event(timing=True)
                start.record()
                launch(*args)
                end.record()
                end.synchronize()
                times.append(cuda.event_elapsed_time(start, end))
            ms = statistics.median(times)
            table.append((_summary(config, results[config]), block, ms))
            if best is None or ms < best[2]:
                best = (config, block, ms)
    config, block, ms = best
    kernel.variant_set.bind(config)
    kernel.cache.file_note(key, {"config": config.summary(), "block": list(block) if isinstance(block, tuple)
                                 else block, "table": [[s, list(b) if isinstance(b, tuple) else b, t]
                                                       for s, b, t in table]})
    return TuneResult(config, block, grid_of(block), measured=True, remembered=False, table=tuple(table),
                      note=f"fastest on {device.name}: {ms:.3f} ms (median of {runs}, after {warmup} warm-up "
                           f"launch{'es' if warmup != 1 else ''})")


def _cubin_tokens(result) -> str:
    if isinstance(result, FatbinResult):
        return result.fatbin_stage.token
    return result.stages["cubin"].token
