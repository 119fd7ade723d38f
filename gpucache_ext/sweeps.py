"""Sweeps: a config field given several values, every combination compiled.

``%%gpukernel --max-registers 32,64,none --fastmath off,on`` compiles each
kernel of the cell once per combination (its *variants*), sharing what the
stages have in common: typing and llvm once per fastmath value, ptx once per
target and fastmath value, a cubin per register cap.  The first combination
(each flag's first value) is the one bound; `Kernel.use` binds another.
What a variant reports is current: after a global or a device function it
reads changed, `Kernel.variants` and `Kernel.use` compile its stale results
again (through the cache), and the report's variants table and the
inspector mark rows built from an earlier state (``EARLIER``, with what changed).
``--sm 80,86,90`` stays what it is: the targets every variant is built for.
``--block 128,256,512`` names the block sizes whose occupancy the report
shows (nothing is compiled per block size: numba picks none at compile time).

This module parses the values (a `ValueError` names the flag, the value and
what is allowed: the magic shows it as a `UsageError`) and makes the
combinations; it imports nothing of IPython.
"""

from __future__ import annotations

import itertools
from typing import Callable, Dict, List, Sequence, Tuple

from .keys.config import FLAG_OF, MAX_THREADS_PER_BLOCK, SWEPT, CompileConfig, parse_list


def _block(item: str) -> int:
    try:
        value = int(item)
    except ValueError:
        raise ValueError("is no number of threads") from None
    if not 1 <= value <= MAX_THREADS_PER_BLOCK:
        raise ValueError(f"is out of range: a block has 1 to {MAX_THREADS_PER_BLOCK} threads")
    return value


def _bytes(item: str) -> int:
    units = {"": 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024}
    number = item.rstrip("kKiIbB")
    unit = item[len(number):].lower()
    try:
        value = int(number) * units[unit]
    except (ValueError, KeyError):
        raise ValueError("is no size in bytes (4096, or 4K)") from None
    if not 0 <= value <= 256 * 1024:
        raise ValueError("is out of range: a block has at most 256 KiB of shared memory on any GPU")
    return value


# what a flag lists that is no config field (the config fields' flags are declared with them: `config.Flag`)
_PARSERS: Dict[str, Tuple[Callable[[str], object], str]] = {
    "block": (_block, "--block 128,256,512"),
    "dynamic_shared": (_bytes, "--dynamic-shared 4K"),
}


def parse_values(field: str, text: str) -> tuple:
    """The values of `field` (a sweepable config field, "block" or
    "dynamic_shared") written as a flag takes them: one, or several joined by
    commas.  A `ValueError` names the flag, the value and what is allowed."""
    if field in FLAG_OF:
        return FLAG_OF[field].values(text)
    parse, example = _PARSERS[field]
    return parse_list(text, parse, "--" + field.replace("_", "-"), example)


def combinations(base: CompileConfig, values: Dict[str, Sequence]) -> List[CompileConfig]:
    """`base` with each combination of `values` ({field: its values}), the
    first values first: [base with every field's first value, ...].  A field
    with one value is the same in every combination."""
    fields = [field for field in SWEPT if field in values]
    return [base.replace(**dict(zip(fields, chosen)))
            for chosen in itertools.product(*(tuple(values[field]) for field in fields))]

