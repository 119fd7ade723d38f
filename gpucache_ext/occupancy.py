"""Theoretical occupancy: how many blocks of a kernel one SM holds at once,
how many warps that makes, and which resource runs out first.

`occupancy(cc, block, registers, ...)` applies NVIDIA's allocation rules to the
device limits of `ARCHITECTURES`, one row per compute capability from 5.0 to
12.1, taken from the CUDA C++ Programming Guide's table "Technical
Specifications per Compute Capability" (and its sections on each compute
capability, for the shared-memory sizes a carveout picks from).  The rules
(allocation units, granularities, the memory the driver reserves per block,
how a carveout rounds) are those of ``cuda_occupancy.h``, the calculator the
CUDA runtime ships; the test suite compiles that header and compares the two,
case by case, on the same device limits (docs/occupancy.md).

Shared memory per block is held to what numba-cuda can launch: it never raises
a kernel's dynamic shared-memory limit (it does not set
``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES``), so by default static and
dynamic together must fit the 48 KiB every kernel starts with.  A kernel that
opts in itself is described by ``max_dynamic_shared_bytes`` (the header's
``FUNC_SHMEM_LIMIT_OPTIN``); without it, the header's default limit.

Pure and light: no GPU, no driver, no numba; the module imports only the
standard library (and the package's errors), so a report or the ``gpucache``
command can ask it anything.
"""

from __future__ import annotations

import dataclasses
import operator
import types
from typing import Callable, Dict, Mapping, Optional, Sequence, Tuple, Union

from .errors import GpuCacheError

__all__ = [
    "ARCHITECTURES", "LIMITS", "Architecture", "Limits", "Occupancy", "OccupancyError", "architecture", "occupancy",
    "occupancy_table",
]

KiB = 1024

# A compute capability as callers hold one: (8, 6) (numba's device.compute_capability) or 86 (CompileConfig.sm).
CC = Union[Tuple[int, int], int]

# The resources that bound the blocks an SM holds, in the order a tie is
# reported in (cuda_occupancy.h's order of its limiting-factor bits): where
# the warp slots are full, registers or shared memory left over do not matter.
LIMITS = ("warps", "registers", "shared memory", "blocks per SM")


class OccupancyError(GpuCacheError, ValueError):
    """An `occupancy` argument is outside what the device or CUDA allows.

    ``argument`` names it (``"cc"``, ``"block"``, ``"registers"``...)."""

    def __init__(self, message, argument):
        super().__init__(message)
        self.argument = argument


@dataclasses.dataclass(frozen=True)
class Architecture:
    """The limits of one compute capability that decide occupancy.

    Per SM unless the name says otherwise; sizes in bytes, registers as 32-bit
    registers.  The defaults hold for every compute capability from 5.0 on."""

    cc: Tuple[int, int]
    max_warps_per_sm: int
    max_blocks_per_sm: int
    max_registers_per_block: int
    # The SM's sub-partitions (the Occupancy Calculator's "warp allocation
    # granularity"): registers are split evenly among them, and the per-block
    # register check counts a block's warps rounded up to a multiple of them.
    warp_allocation_granularity: int
    shared_memory_per_sm: int  # the largest configuration
    shared_memory_per_block_optin: int  # what dynamic shared memory can opt in to (cudaFuncSetAttribute)
    reserved_shared_memory_per_block: int  # the driver's, on top of the kernel's
    shared_memory_granularity: int  # a block's shared memory is allocated in units of this
    # The per-SM shared-memory sizes a carveout chooses from (the rest of the
    # unified storage is L1); empty where shared memory is not configurable (5.x, 6.x).
    shared_memory_sizes: Tuple[int, ...]
    registers_per_sm: int = 64 * KiB
    max_registers_per_thread: int = 255
    register_allocation_unit: int = 256  # registers are allocated per warp, in units of this
    max_threads_per_block: int = 1024
    shared_memory_per_block: int = 48 * KiB  # without opt-in; also all the static shared memory a block may declare
    warp_size: int = 32

    @property
    def name(self) -> str:
        return f"{self.cc[0]}.{self.cc[1]}"

    @property
    def max_threads_per_sm(self) -> int:
        return self.max_warps_per_sm * self.warp_size


# The shared-memory sizes per SM (KiB) a carveout can select, by family.
_VOLTA = (0, 8, 16, 32, 64, 96)  # 7.0, 7.2
_TURING = (32, 64)  # 7.5
_GA100 = (0, 8, 16, 32, 64, 100, 132, 164)  # 8.0, 8.7
_GA10X = (0, 8, 16, 32, 64, 100)  # 8.6, 8.9, 12.x
_GH100 = (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)  # 9.0, 10.x, 11.0

# cc, max warps/SM, max blocks/SM, registers/block (K), sub-partitions,
# shared memory/SM (KiB), opt-in shared memory/block (KiB), reserved/block (KiB),
# shared-memory granularity (bytes), carveout sizes (KiB).
_TABLE = (
    ((5, 0), 64, 32, 64, 4, 64, 48, 0, 256, ()),
    ((5, 2), 64, 32, 64, 4, 96, 48, 0, 256, ()),
    ((5, 3), 64, 32, 32, 4, 64, 48, 0, 256, ()),
    ((6, 0), 64, 32, 64, 2, 64, 48, 0, 256, ()),
    ((6, 1), 64, 32, 64, 4, 96, 48, 0, 256, ()),
    ((6, 2), 64, 32, 32, 4, 64, 48, 0, 256, ()),
    ((7, 0), 64, 32, 64, 4, 96, 96, 0, 256, _VOLTA),
    ((7, 2), 64, 32, 64, 4, 96, 96, 0, 256, _VOLTA),
    ((7, 5), 32, 16, 64, 4, 64, 64, 0, 256, _TURING),
    ((8, 0), 64, 32, 64, 4, 164, 163, 1, 128, _GA100),
    ((8, 6), 48, 16, 64, 4, 100, 99, 1, 128, _GA10X),
    ((8, 7), 48, 16, 64, 4, 164, 163, 1, 128, _GA100),
    ((8, 9), 48, 24, 64, 4, 100, 99, 1, 128, _GA10X),
    ((9, 0), 64, 32, 64, 4, 228, 227, 1, 128, _GH100),
    ((10, 0), 64, 32, 64, 4, 228, 227, 1, 128, _GH100),
    # Jetson Thor: 10.1 up to CUDA 12.9, renamed 11.0 in CUDA 13 (the same device)
    ((10, 1), 48, 24, 64, 4, 228, 227, 1, 128, _GH100),
    ((10, 3), 64, 32, 64, 4, 228, 227, 1, 128, _GH100),
    ((11, 0), 48, 24, 64, 4, 228, 227, 1, 128, _GH100),
    ((12, 0), 48, 24, 64, 4, 100, 99, 1, 128, _GA10X),
    ((12, 1), 48, 24, 64, 4, 100, 99, 1, 128, _GA10X),
)

ARCHITECTURES: Mapping[Tuple[int, int], Architecture] = types.MappingProxyType({
    cc: Architecture(cc, warps, blocks, registers * KiB, sub_partitions, shared * KiB, optin * KiB, reserved * KiB,
                     granularity, tuple(size * KiB for size in sizes))
    for cc, warps, blocks, registers, sub_partitions, shared, optin, reserved, granularity, sizes in _TABLE
})


@dataclasses.dataclass(frozen=True)
class Limits:
    """The blocks per SM each resource alone allows.  None: the kernel uses
    none of that resource (no registers; no shared memory before 8.0, where
    the driver reserves none), so it sets no bound.  ``limits["shared memory"]``
    reads one by its name in `LIMITS`."""

    warps: int
    registers: Optional[int]
    shared_memory: Optional[int]
    blocks_per_sm: int

    def as_dict(self) -> Dict[str, Optional[int]]:
        return dict(zip(LIMITS, (self.warps, self.registers, self.shared_memory, self.blocks_per_sm)))

    def __getitem__(self, name: str) -> Optional[int]:
        try:
            return self.as_dict()[name]
        except KeyError:
            raise KeyError(f"{name!r} is not a limit; the limits are {', '.join(LIMITS)}") from None


@dataclasses.dataclass(frozen=True)
class Occupancy:
    """What `occupancy` computed for one launch shape: the inputs, the blocks
    and warps one SM holds, and what each resource allows."""

    cc: Tuple[int, int]
    block: int
    registers: int
    shared_bytes: int
    dynamic_shared_bytes: int
    carveout: Optional[int]
    blocks_per_sm: int
    warps_per_block: int
    max_warps: int  # per SM
    limits: Limits
    registers_per_block: int  # allocated: per warp, rounded up to the allocation unit
    shared_bytes_per_block: int  # allocated: static + dynamic + reserved, rounded up to the granularity
    shared_memory_per_sm: int  # the shared-memory size the SM is configured with (the carveout's result)
    # the dynamic shared memory the kernel opted in to; None: numba's default limit (48 KiB, static included)
    max_dynamic_shared_bytes: Optional[int] = None

    @property
    def active_warps(self) -> int:
        return self.blocks_per_sm * self.warps_per_block

    @property
    def occupancy(self) -> float:
        """Active warps / the most warps an SM holds: 0 to 1."""
        return self.active_warps / self.max_warps

    @property
    def limiting_factors(self) -> Tuple[str, ...]:
        """Every resource that alone allows no more than `blocks_per_sm`, in
        `LIMITS` order (cuda_occupancy.h reports the same set)."""
        return tuple(name for name, blocks in self.limits.as_dict().items() if blocks == self.blocks_per_sm)

    @property
    def limited_by(self) -> str:
        """The first of `limiting_factors`: where several tie, warps come
        before registers, before shared memory, before blocks per SM."""
        return self.limiting_factors[0]

    def __str__(self) -> str:
        text = f"{self.occupancy:.0%} ({self.active_warps}/{self.max_warps} warps), limited by {self.limited_by}"
        return text if self.blocks_per_sm else f"{text}: a block does not fit on an SM"


def architecture(cc: CC) -> Architecture:
    """The limits of compute capability `cc`, given as ``(8, 6)`` or ``86``."""
    key = _cc_key(cc)
    if key not in ARCHITECTURES:
        known = ", ".join(arch.name for arch in ARCHITECTURES.values())
        raise OccupancyError(f"cc={cc!r} is not a compute capability this calculator knows; use one of {known}, "
                             f"written as (8, 6) or 86", "cc")
    return ARCHITECTURES[key]


def occupancy(cc: CC, block: int, registers: int, shared_bytes: int = 0, dynamic_shared_bytes: int = 0,
              carveout: Optional[int] = None, max_dynamic_shared_bytes: Optional[int] = None) -> Occupancy:
    """The theoretical occupancy of a kernel launched in blocks of `block`
    threads on a device of compute capability `cc` (``(8, 6)`` or ``86``).

    `registers` is the kernel's registers per thread (what ptxas reports),
    `shared_bytes` its static shared memory per block and
    `dynamic_shared_bytes` the dynamic shared memory each launch asks for.
    `carveout` is the preferred shared-memory carveout
    (``cudaFuncAttributePreferredSharedMemoryCarveout``): a percentage of the
    largest shared memory per SM, rounded up to a size the SM supports; a
    block that needs more gets the smallest size that holds it (a carveout is
    a hint).  None: no preference, counted as the largest size (as the CUDA
    runtime's calculator does).  5.x and 6.x have a fixed shared memory and
    ignore it.

    `max_dynamic_shared_bytes` is the dynamic shared memory the kernel opted
    in to (``cudaFuncAttributeMaxDynamicSharedMemorySize``), up to the
    architecture's opt-in limit less `shared_bytes`.  None, the default, is
    what numba-cuda does: it never opts in, so static and dynamic shared
    memory together must fit the 48 KiB default limit.

    Raises `OccupancyError` (a ValueError) naming the argument that is out of
    range, and for a launch that would fail for its shared memory.  A result
    of 0 blocks per SM means the block cannot launch at all (too many
    registers for one block)."""
    arch = architecture(cc)
    block = _whole("block", block, 1, arch.max_threads_per_block, "a block has {low} to {high} threads")
    registers = _whole("registers", registers, 0, arch.max_registers_per_thread,
                       "a thread has {low} to {high} registers (the most ptxas gives one)")
    shared_bytes, dynamic_shared_bytes, max_dynamic_shared_bytes = _check_shared(
        arch, shared_bytes, dynamic_shared_bytes, max_dynamic_shared_bytes)
    if carveout is not None:
        carveout = _whole("carveout", carveout, 0, 100, "a carveout is {low} to {high} (percent of the largest "
                          "shared memory per SM), or None for no preference")

    warps_per_block = -(-block // arch.warp_size)
    registers_per_warp = _round_up(registers * arch.warp_size, arch.register_allocation_unit)
    shared_per_block = _round_up(shared_bytes + dynamic_shared_bytes + arch.reserved_shared_memory_per_block,
                                 arch.shared_memory_granularity)
    shared_per_sm = _shared_memory_per_sm(arch, shared_per_block, carveout)
    limits = Limits(
        warps=arch.max_warps_per_sm // warps_per_block,
        registers=_register_limit(arch, registers_per_warp, warps_per_block),
        shared_memory=shared_per_sm // shared_per_block if shared_per_block else None,
        blocks_per_sm=arch.max_blocks_per_sm,
    )
    blocks = min(limit for limit in limits.as_dict().values() if limit is not None)
    return Occupancy(arch.cc, block, registers, shared_bytes, dynamic_shared_bytes, carveout, blocks,
                     warps_per_block, arch.max_warps_per_sm, limits, registers_per_warp * warps_per_block,
                     shared_per_block, shared_per_sm, max_dynamic_shared_bytes)


def occupancy_table(cc: CC, registers: int, shared_bytes: int = 0, *,
                    dynamic_shared_bytes: Union[int, Callable[[int], int]] = 0, carveout: Optional[int] = None,
                    blocks: Sequence[int] = (128, 256, 512, 1024),
                    max_dynamic_shared_bytes: Optional[int] = None) -> Tuple[Occupancy, ...]:
    """`occupancy` at each block size of `blocks`, in their order: the
    comparison a launch configuration is chosen from.  `dynamic_shared_bytes`
    may be a function of the block size (shared memory per thread);
    `max_dynamic_shared_bytes` is the kernel's opt-in, as for `occupancy`."""
    if not blocks:
        raise OccupancyError("blocks=() names no block size; give at least one, e.g. (128, 256, 512, 1024)", "blocks")
    dynamic = dynamic_shared_bytes if callable(dynamic_shared_bytes) else (lambda _block: dynamic_shared_bytes)
    return tuple(occupancy(cc, block, registers, shared_bytes, dynamic(block), carveout, max_dynamic_shared_bytes)
                 for block in blocks)


# -- the rules ------------------------------------------------------------------


def _register_limit(arch: Architecture, registers_per_warp: int, warps_per_block: int) -> Optional[int]:
    if registers_per_warp == 0:
        return None
    blocks = _blocks_by_registers(arch, registers_per_warp, warps_per_block, arch.warp_allocation_granularity)
    # GP100 (6.0) has 2 sub-partitions, the other Pascals 4: a block that
    # would not fit a 6.1 SM is refused on 6.0 too, so that what runs on one
    # Pascal runs on all (NVIDIA's rule, in cuda_occupancy.h).
    if arch.cc == (6, 0) and blocks and not _blocks_by_registers(arch, registers_per_warp, warps_per_block, 4):
        return 0
    return blocks


def _blocks_by_registers(arch: Architecture, registers_per_warp: int, warps_per_block: int,
                         sub_partitions: int) -> int:
    # The hardware checks a block against the per-block limit as if its warps
    # were spread over every sub-partition: their count rounded up to them.
    if registers_per_warp * _round_up(warps_per_block, sub_partitions) > arch.max_registers_per_block:
        return 0
    # Each sub-partition holds the warps its share of the register file fits.
    warps_per_sub_partition = arch.registers_per_sm // sub_partitions // registers_per_warp
    return warps_per_sub_partition * sub_partitions // warps_per_block


def _shared_memory_per_sm(arch: Architecture, shared_per_block: int, carveout: Optional[int]) -> int:
    """The shared memory the SM is configured with for this kernel."""
    if not arch.shared_memory_sizes:  # 5.x, 6.x: fixed
        return arch.shared_memory_per_sm
    preferred = arch.shared_memory_per_sm if carveout is None else carveout * arch.shared_memory_per_sm // 100
    preferred = _size_at_least(arch, preferred)
    # a preference too small for one block gives way to the size that holds one
    return preferred if preferred >= shared_per_block else _size_at_least(arch, shared_per_block)


def _size_at_least(arch: Architecture, size: int) -> int:
    return next(supported for supported in arch.shared_memory_sizes if supported >= size)


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


# -- checking the arguments -----------------------------------------------------


def _cc_key(cc: CC) -> Optional[Tuple[int, int]]:
    if isinstance(cc, (tuple, list)) and len(cc) == 2 and all(_is_whole(part) for part in cc):
        return (operator.index(cc[0]), operator.index(cc[1]))
    if _is_whole(cc):
        return divmod(operator.index(cc), 10)
    return None


def _is_whole(value) -> bool:
    if isinstance(value, bool):
        return False
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def _whole(argument: str, value, low: int, high: int, rule: str) -> int:
    """`value` as an int, if it is a whole number from `low` to `high`; else
    an error naming `argument` and saying `rule` (a sentence about {low} and {high})."""
    whole = _is_whole(value)
    if not whole or not low <= operator.index(value) <= high:
        problem = "out of range" if whole else "not a whole number"
        raise OccupancyError(f"{argument}={value!r} is {problem}: {rule.format(low=low, high=high)}", argument)
    return operator.index(value)


def _check_shared(arch: Architecture, shared_bytes, dynamic_shared_bytes,
                  max_dynamic_shared_bytes) -> Tuple[int, int, Optional[int]]:
    default, optin = arch.shared_memory_per_block, arch.shared_memory_per_block_optin
    shared_bytes = _whole("shared_bytes", shared_bytes, 0, default,
                          f"a block declares {{low}} to {_bytes(default)} of static shared memory; give the rest "
                          f"as dynamic_shared_bytes")
    # no upper bound here: which one holds depends on the opt-in, checked below with the sizes named
    dynamic_shared_bytes = _whole("dynamic_shared_bytes", dynamic_shared_bytes, 0, 2**63,
                                  "dynamic shared memory is {low} or more bytes")
    if max_dynamic_shared_bytes is None:
        _check_default_limit(arch, shared_bytes, dynamic_shared_bytes)
        return shared_bytes, dynamic_shared_bytes, None
    # the driver refuses an opt-in whose static + dynamic would pass the opt-in limit
    limit = _whole("max_dynamic_shared_bytes", max_dynamic_shared_bytes, 0, optin - shared_bytes,
                   f"with shared_bytes={shared_bytes} a kernel opts in to {{low}} to {{high}} bytes of dynamic "
                   f"shared memory on {arch.name} (static and dynamic together up to {_bytes(optin)}), or give "
                   f"None for numba's default limit")
    if dynamic_shared_bytes > limit:
        raise OccupancyError(f"dynamic_shared_bytes={dynamic_shared_bytes} is more than the kernel opted in to "
                             f"(max_dynamic_shared_bytes={limit}): such a launch fails; launch with at most {limit} "
                             f"bytes, or opt in to more (up to {optin - shared_bytes} bytes on {arch.name})",
                             "dynamic_shared_bytes")
    return shared_bytes, dynamic_shared_bytes, limit


def _check_default_limit(arch: Architecture, shared_bytes: int, dynamic_shared_bytes: int) -> None:
    """numba-cuda's launch: no opt-in, so the default limit per block holds."""
    default, optin = arch.shared_memory_per_block, arch.shared_memory_per_block_optin
    total = shared_bytes + dynamic_shared_bytes
    if total <= default:
        return
    fix = f"use at most {default - shared_bytes} bytes of dynamic shared memory"
    if optin > default:
        fix += (f", or, for a kernel that opts in itself (cuFuncSetAttribute), pass the size it opted in to as "
                f"max_dynamic_shared_bytes (up to {optin - shared_bytes} bytes on {arch.name})")
    raise OccupancyError(f"shared_bytes + dynamic_shared_bytes = {shared_bytes} + {dynamic_shared_bytes} = {total} "
                         f"bytes is more than the {_bytes(default)} a block may have without opt-in, and numba-cuda "
                         f"never opts in (it does not set CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES), so "
                         f"the launch fails; {fix}", "dynamic_shared_bytes")


def _bytes(n: int) -> str:
    return f"{n} bytes = {n // KiB} KiB" if n % KiB == 0 else f"{n} bytes"
