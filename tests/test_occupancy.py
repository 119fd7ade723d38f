"""gpucache_ext.occupancy: the documented behaviours, the argument checks, and
NVIDIA's own calculator as the oracle.

The oracle is ``cuda_occupancy.h`` (the nvidia-cuda-runtime wheel installs it):
tests/occupancy_oracle.cpp, compiled once per session with the system C++
compiler, runs ``cudaOccMaxActiveBlocksPerMultiprocessor`` on each case with
the device properties filled from our table, so the two sides compare the
rules on the same device, once with the header's default shared-memory limit
(a kernel that never opts in, as numba-cuda launches) and once opted in.  The
limits the header writes in its code rather than reading from the device
(blocks per SM, sub-partitions, granularities, the sizes a carveout picks
from) are compared too.  Without a C++ compiler the oracle test skips, unless
CI is set (then it fails)."""

from __future__ import annotations

import dataclasses
import os
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gpucache_ext import occupancy as occupancy_module
from gpucache_ext.occupancy import (ARCHITECTURES, LIMITS, Occupancy, OccupancyError, architecture, occupancy,
                                    occupancy_table)

from .helpers import run_python

ROOT = Path(__file__).resolve().parent.parent
ORACLE_SOURCE = Path(__file__).resolve().parent / "occupancy_oracle.cpp"
KiB = 1024
INT_MAX = 2**31 - 1
# cuda_occupancy.h's cudaOccLimitingFactor bits
FACTOR_BITS = {"warps": 0x1, "registers": 0x2, "shared memory": 0x4, "blocks per SM": 0x8}
BARRIERS_BIT = 0x10
# Jetson Thor is 10.1 in CUDA 12.x's header, 11.0 in CUDA 13's: one of them is unknown to it
THOR = {(10, 1), (11, 0)}


# -- the documented behaviours ------------------------------------------------------


def test_sm_86_at_256_threads_and_32_registers_is_fully_occupied():
    result = occupancy((8, 6), 256, 32)
    assert (result.blocks_per_sm, result.active_warps, result.max_warps) == (6, 48, 48)
    assert result.occupancy == 1.0
    assert result.limited_by == "warps"
    assert str(result) == "100% (48/48 warps), limited by warps"
    assert result.limits == occupancy_module.Limits(warps=6, registers=8, shared_memory=100, blocks_per_sm=16)


def test_registers_limit_by_the_warp_allocation():
    # 40 registers: 1280 per warp; a sub-partition's 16384 hold 12 warps, 48 per SM: 6 blocks of 8 warps
    result = occupancy((8, 0), 256, 40)
    assert str(result) == "75% (48/64 warps), limited by registers"
    assert result.registers_per_block == 1280 * 8
    # 255 registers round up to 8192 per warp: 2 warps per sub-partition, 8 per SM, one block of 256
    heavy = occupancy((8, 6), 256, 255)
    assert (heavy.blocks_per_sm, heavy.active_warps, heavy.limited_by) == (1, 8, "registers")
    assert heavy.registers_per_block == 65536


def test_a_block_with_too_many_registers_does_not_fit():
    result = occupancy((8, 6), 1024, 255)  # 32 warps x 8192 registers: 4x the 65536 a block may have
    assert result.blocks_per_sm == 0 and result.occupancy == 0.0
    assert result.limited_by == "registers" and result.limits.registers == 0
    assert str(result) == "0% (0/48 warps), limited by registers: a block does not fit on an SM"
    # the per-block check counts warps rounded up to the 4 sub-partitions: 25 warps of 80 registers
    # (2560 per warp) take 64000 registers, but count as 28 warps, 71680 registers
    assert occupancy((8, 6), 800, 80).blocks_per_sm == 0
    assert occupancy((8, 6), 768, 80).blocks_per_sm == 1
    assert occupancy((5, 3), 1024, 32).blocks_per_sm == 2  # 32768 registers per block on 5.3 (Tegra X1)
    assert occupancy((5, 3), 1024, 33).blocks_per_sm == 0


def test_shared_memory_limits_and_what_is_allocated():
    # 48 KiB of dynamic shared memory + the driver's 1 KiB: 3 blocks in 164 KiB
    result = occupancy((8, 0), 128, 32, dynamic_shared_bytes=48 * KiB)
    assert (result.blocks_per_sm, result.limited_by, result.shared_bytes_per_block) == (3, "shared memory", 49 * KiB)
    assert str(result) == "19% (12/64 warps), limited by shared memory"
    # allocated in units of 128 bytes from 8.0 (256 before), the reserved KiB included
    assert occupancy((8, 6), 128, 32, shared_bytes=1).shared_bytes_per_block == KiB + 128
    assert occupancy((7, 5), 128, 32, shared_bytes=1).shared_bytes_per_block == 256
    # without shared memory a 7.5 block sets no shared-memory limit; an 8.x block still has its reserved KiB
    assert occupancy((7, 5), 128, 32).limits.shared_memory is None
    assert occupancy((8, 6), 128, 32).limits.shared_memory == 100
    # dynamic shared memory beyond 48 KiB (opt-in): one block of 99 KiB on 8.6
    opted = occupancy((8, 6), 128, 32, shared_bytes=48 * KiB, dynamic_shared_bytes=51 * KiB,
                      max_dynamic_shared_bytes=51 * KiB)
    assert (opted.blocks_per_sm, opted.max_dynamic_shared_bytes) == (1, 51 * KiB)


def test_by_default_a_block_has_the_48_kib_numba_launches_with():
    """numba-cuda never sets CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
    48 KiB static + 2 KiB dynamic does not launch, and is not counted."""
    assert occupancy((8, 6), 128, 32, shared_bytes=48 * KiB).max_dynamic_shared_bytes is None
    assert occupancy((8, 6), 128, 32, shared_bytes=40 * KiB, dynamic_shared_bytes=8 * KiB).blocks_per_sm == 2
    with pytest.raises(OccupancyError, match=r"shared_bytes \+ dynamic_shared_bytes = 49152 \+ 2048 = 51200 bytes "
                       r"is more than the 49152 bytes = 48 KiB a block may have without opt-in, and numba-cuda never "
                       r"opts in \(it does not set CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES\), so the launch "
                       r"fails; use at most 0 bytes of dynamic shared memory, or, for a kernel that opts in itself "
                       r"\(cuFuncSetAttribute\), pass the size it opted in to as max_dynamic_shared_bytes \(up to "
                       r"52224 bytes on 8\.6\)") as raised:
        occupancy((8, 6), 128, 32, shared_bytes=48 * KiB, dynamic_shared_bytes=2 * KiB)
    assert raised.value.argument == "dynamic_shared_bytes"
    # where there is no opt-in beyond 48 KiB (before 7.0), the message offers none
    with pytest.raises(OccupancyError, match=r"use at most 8192 bytes of dynamic shared memory$"):
        occupancy((6, 1), 128, 32, shared_bytes=40 * KiB, dynamic_shared_bytes=9 * KiB)
    # the table raises too: a caller that skips such launches catches OccupancyError
    with pytest.raises(OccupancyError, match="numba-cuda never opts in"):
        occupancy_table((8, 6), 32, 48 * KiB, dynamic_shared_bytes=KiB)
    rows = occupancy_table((8, 6), 32, 48 * KiB, dynamic_shared_bytes=KiB, max_dynamic_shared_bytes=KiB)
    assert {row.max_dynamic_shared_bytes for row in rows} == {KiB}


def test_opting_in_to_the_default_size_changes_nothing():
    """A kernel that never opts in has 48 KiB less its static shared memory as
    its dynamic limit (what cudaFuncGetAttributes reports): the same answers."""
    for cc, static, dynamic in (((8, 6), 0, 48 * KiB), ((8, 0), 20 * KiB, 28 * KiB), ((7, 5), 100, 3000),
                                ((6, 1), 48 * KiB, 0), ((9, 0), 1, 0)):
        default = occupancy(cc, 256, 40, static, dynamic)
        opted = occupancy(cc, 256, 40, static, dynamic, max_dynamic_shared_bytes=48 * KiB - static)
        assert dataclasses.replace(opted, max_dynamic_shared_bytes=None) == default


def test_the_carveout_rounds_up_to_a_size_the_sm_supports():
    def config(cc, carveout, shared=10 * KiB):
        result = occupancy(cc, 128, 32, shared_bytes=shared, carveout=carveout)
        return result.shared_memory_per_sm // KiB, result.limits.shared_memory

    assert config((8, 6), None) == (100, 9)  # no preference: the largest size (11 KiB per block)
    assert config((8, 6), 50) == (64, 5)  # 50 KiB -> 64
    assert config((8, 6), 20) == (32, 2)  # 20 KiB -> 32
    assert config((8, 6), 0) == (16, 1)  # 0 cannot hold a block: the smallest size that holds one
    assert config((8, 0), 50) == (100, 9)  # 82 KiB -> 100 (8.0's sizes: ... 64, 100, 132, 164)
    assert config((7, 5), 0) == (32, 3)  # Turing's smallest is 32 KiB
    assert config((9, 0), 100) == (228, 20)
    assert config((6, 1), 0) == config((6, 1), None) == (96, 9)  # fixed shared memory: ignored


def test_ties_are_all_reported_and_the_first_named():
    result = occupancy((8, 6), 96, 32)  # 3 warps: 16 blocks by warps and by the 16-block cap
    assert result.limiting_factors == ("warps", "blocks per SM")
    assert result.limited_by == "warps"
    assert str(result) == "100% (48/48 warps), limited by warps"
    small = occupancy((8, 6), 32, 32)  # 48 by warps, 16 by the cap
    assert (small.limited_by, small.limiting_factors) == ("blocks per SM", ("blocks per SM",))
    assert str(small) == "33% (16/48 warps), limited by blocks per SM"


def test_limits_by_name_and_the_result_is_immutable():
    result = occupancy((9, 0), 512, 64, shared_bytes=4 * KiB)
    assert list(result.limits.as_dict()) == list(LIMITS)
    assert result.limits["shared memory"] == result.limits.shared_memory
    assert result.limits[result.limited_by] == result.blocks_per_sm
    with pytest.raises(KeyError, match="the limits are warps, registers, shared memory, blocks per SM"):
        result.limits["threads"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.blocks_per_sm = 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.limits.registers = 3
    assert occupancy((9, 0), 512, 64, shared_bytes=4 * KiB) == result
    assert len({result, occupancy(90, 512, 64, shared_bytes=4 * KiB)}) == 1


def test_a_compute_capability_is_a_pair_or_a_number():
    assert occupancy((12, 1), 256, 32) == occupancy(121, 256, 32) == occupancy([12, 1], 256, 32)
    assert occupancy(121, 256, 32).cc == (12, 1)
    assert architecture(100).max_warps_per_sm == 64


def test_occupancy_table_gives_each_block_size():
    rows = occupancy_table((8, 6), 64)
    assert [row.block for row in rows] == [128, 256, 512, 1024]
    assert all(isinstance(row, Occupancy) for row in rows)
    assert [row.blocks_per_sm for row in rows] == [8, 4, 2, 1]
    assert [str(row) for row in rows] == ["67% (32/48 warps), limited by registers"] * 3 + [
        "67% (32/48 warps), limited by warps"]  # 1024 threads: 1 block by warps and by registers
    assert rows[-1].limiting_factors == ("warps", "registers")
    # shared memory per thread: 4 bytes per thread
    rows = occupancy_table((8, 6), 32, dynamic_shared_bytes=lambda block: 4 * block, blocks=(64, 1024))
    assert [row.dynamic_shared_bytes for row in rows] == [256, 4096]
    with pytest.raises(OccupancyError, match="names no block size"):
        occupancy_table((8, 6), 32, blocks=())


BAD = [
    (dict(cc=(11, 5)), "cc", r"cc=\(11, 5\) is not a compute capability this calculator knows; use one of 5\.0, "
                             r"5\.2.*12\.1, written as \(8, 6\) or 86"),
    (dict(cc="8.6"), "cc", "not a compute capability"),
    (dict(block=0), "block", r"block=0 is out of range: a block has 1 to 1024 threads"),
    (dict(block=1025), "block", r"block=1025 is out of range: a block has 1 to 1024 threads"),
    (dict(block=256.0), "block", r"block=256\.0 is not a whole number"),
    (dict(registers=256), "registers", r"registers=256 is out of range: a thread has 0 to 255 registers"),
    (dict(registers=-1), "registers", "out of range"),
    (dict(registers=True), "registers", "not a whole number"),
    (dict(shared_bytes=48 * KiB + 1), "shared_bytes",
     r"a block declares 0 to 49152 bytes = 48 KiB of static shared memory; give the rest as dynamic_shared_bytes$"),
    (dict(dynamic_shared_bytes=-1), "dynamic_shared_bytes", r"dynamic_shared_bytes=-1 is out of range: dynamic "
                                                            r"shared memory is 0 or more bytes"),
    (dict(dynamic_shared_bytes=48 * KiB + 1), "dynamic_shared_bytes",
     r"= 0 \+ 49153 = 49153 bytes is more than the 49152 bytes = 48 KiB a block may have without opt-in"),
    (dict(max_dynamic_shared_bytes=99 * KiB + 1), "max_dynamic_shared_bytes",
     r"max_dynamic_shared_bytes=101377 is out of range: with shared_bytes=0 a kernel opts in to 0 to 101376 bytes "
     r"of dynamic shared memory on 8\.6 \(static and dynamic together up to 101376 bytes = 99 KiB\), or give None "
     r"for numba's default limit"),
    (dict(shared_bytes=40 * KiB, max_dynamic_shared_bytes=60 * KiB), "max_dynamic_shared_bytes",
     r"with shared_bytes=40960 a kernel opts in to 0 to 60416 bytes"),
    (dict(max_dynamic_shared_bytes=4.0), "max_dynamic_shared_bytes", "not a whole number"),
    (dict(dynamic_shared_bytes=60 * KiB, max_dynamic_shared_bytes=50 * KiB), "dynamic_shared_bytes",
     r"dynamic_shared_bytes=61440 is more than the kernel opted in to \(max_dynamic_shared_bytes=51200\): such a "
     r"launch fails; launch with at most 51200 bytes, or opt in to more \(up to 101376 bytes on 8\.6\)"),
    (dict(carveout=101), "carveout", r"carveout=101 is out of range: a carveout is 0 to 100 \(percent of the "
                                     r"largest shared memory per SM\), or None for no preference"),
    (dict(carveout=-1), "carveout", "out of range"),
    (dict(carveout=50.5), "carveout", "not a whole number"),
]


@pytest.mark.parametrize("bad, argument, message", BAD, ids=[next(iter(b[0])) + str(i) for i, b in enumerate(BAD)])
def test_invalid_arguments_are_named_with_what_is_allowed(bad, argument, message):
    arguments = {"cc": (8, 6), "block": 256, "registers": 32, **bad}
    with pytest.raises(ValueError, match=message) as raised:
        occupancy(**arguments)
    assert isinstance(raised.value, OccupancyError) and raised.value.argument == argument


def test_the_opt_in_limit_is_per_architecture():
    for arch in ARCHITECTURES.values():
        optin = arch.shared_memory_per_block_optin
        assert occupancy(arch.cc, 32, 16, dynamic_shared_bytes=optin, max_dynamic_shared_bytes=optin).blocks_per_sm >= 1
        with pytest.raises(OccupancyError, match="out of range") as raised:
            occupancy(arch.cc, 32, 16, max_dynamic_shared_bytes=optin + 1)
        assert raised.value.argument == "max_dynamic_shared_bytes"


def test_the_table_holds_together():
    assert list(ARCHITECTURES) == sorted(ARCHITECTURES)
    assert {arch.name for arch in ARCHITECTURES.values()} == {
        "5.0", "5.2", "5.3", "6.0", "6.1", "6.2", "7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0",
        "10.1", "10.3", "11.0", "12.0", "12.1"}
    for cc, arch in ARCHITECTURES.items():
        assert arch.cc == cc
        # the largest shared-memory size holds the largest block, the driver's reserve included
        assert arch.shared_memory_per_block_optin + arch.reserved_shared_memory_per_block <= arch.shared_memory_per_sm
        assert arch.reserved_shared_memory_per_block == (KiB if cc >= (8, 0) else 0)
        if arch.shared_memory_sizes:  # configurable from 7.0 on
            assert cc >= (7, 0) and arch.shared_memory_sizes[-1] == arch.shared_memory_per_sm
            assert list(arch.shared_memory_sizes) == sorted(set(arch.shared_memory_sizes))
        else:
            assert cc < (7, 0)


def test_the_module_imports_nothing_heavy():
    found = run_python("""
        import json, sys
        from gpucache_ext.occupancy import occupancy
        occupancy((8, 6), 256, 32)
        heavy = ("numba", "numba_cuda", "IPython", "ipywidgets", "ipykernel", "numpy")
        print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy)))
    """, json_line=True, timeout=60)
    assert found == []


def test_the_docs_table_is_the_modules():
    """docs/occupancy.md shows the limits table: it must say what the module holds."""
    page = (ROOT / "docs" / "occupancy.md").read_text()
    rows = re.findall(r"^\| (\d+\.\d+) \|(.*)\|$", page, re.M)
    shown = {name: [cell.strip() for cell in cells.split("|")] for name, cells in rows}
    expected = {}
    for arch in ARCHITECTURES.values():
        sizes = ", ".join(str(size // KiB) for size in arch.shared_memory_sizes) or "fixed"
        expected[arch.name] = [str(arch.max_warps_per_sm), str(arch.max_blocks_per_sm),
                               f"{arch.max_registers_per_block // KiB} K", str(arch.warp_allocation_granularity),
                               str(arch.shared_memory_per_sm // KiB), str(arch.shared_memory_per_block_optin // KiB),
                               str(arch.reserved_shared_memory_per_block // KiB),
                               str(arch.shared_memory_granularity), sizes]
    assert shown == expected


# -- the oracle: NVIDIA's cuda_occupancy.h --------------------------------------------


def require_cxx() -> str:
    """The system C++ compiler: skip where there is none, unless CI is set
    (then it must be there)."""
    for name in ("c++", "g++", "clang++"):
        if shutil.which(name):
            return shutil.which(name)
    if os.environ.get("CI"):
        pytest.fail("CI is set and there is no C++ compiler (c++, g++): install one with apt-get install -y g++")
    pytest.skip("no C++ compiler (c++, g++) to build the cuda_occupancy.h oracle (apt-get install -y g++); "
                "this test runs in CI")


def test_without_a_compiler_the_oracle_skips_unless_ci(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="this test runs in CI"):
        require_cxx()
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match="CI is set and there is no C.. compiler"):
        require_cxx()


# Where the nvidia-cuda-runtime wheel puts its headers: CUDA 12's in cuda_runtime/, CUDA 13's in cu13/
_RUNTIME_INCLUDES = ("cuda_runtime/include", "cu13/include")


def occupancy_header() -> Path:
    """cuda_occupancy.h, from the nvidia-cuda-runtime wheel (a dependency of numba-cuda's cu12 and
    cu13 extras, which gpucache_ext's extras of the same names bring)."""
    try:
        import nvidia  # the namespace package NVIDIA's wheels install into
    except ImportError:
        pytest.fail("the nvidia-cuda-runtime wheel is not installed: install gpucache_ext[cu12] or [cu13]")
    for root in nvidia.__path__:
        for folder in _RUNTIME_INCLUDES:
            header = Path(root) / folder / "cuda_occupancy.h"
            if header.is_file():
                return header
    pytest.fail(f"cuda_occupancy.h is in none of {list(nvidia.__path__)} ({', '.join(_RUNTIME_INCLUDES)}): "
                "reinstall nvidia-cuda-runtime (-cu12 for CUDA 12)")


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    """A function from cases to cuda_occupancy.h's answers (one tuple of ints each)."""
    compiler, header = require_cxx(), occupancy_header()
    binary = tmp_path_factory.mktemp("occupancy") / "occupancy_oracle"
    built = subprocess.run([compiler, "-std=c++11", "-O1", "-I", str(header.parent), str(ORACLE_SOURCE),
                            "-o", str(binary)], capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, f"{compiler} could not build {ORACLE_SOURCE.name}:\n{built.stderr}"

    def ask(cases):
        lines = "".join(oracle_line(*case) + "\n" for case in cases)
        done = subprocess.run([str(binary)], input=lines, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        answers = [tuple(map(int, line.split())) for line in done.stdout.splitlines()]
        assert len(answers) == len(cases)
        return answers

    return ask


# A case: (cc, block, registers, static, dynamic, carveout, max_dynamic): the
# arguments of `occupancy`, max_dynamic None for the default limit.
# A launch that fails for its shared memory, as both sides say it:
REFUSED = ("refused for its shared memory",)


def oracle_line(cc, block, registers, shared, dynamic, carveout, max_dynamic) -> str:
    arch = ARCHITECTURES[cc]
    device = (*cc, arch.max_threads_per_sm, arch.max_registers_per_block, arch.registers_per_sm,
              arch.shared_memory_per_block, arch.shared_memory_per_sm, arch.shared_memory_per_block_optin,
              arch.reserved_shared_memory_per_block)
    return " ".join(map(str, (*device, block, registers, shared, dynamic, -1 if carveout is None else carveout,
                              -1 if max_dynamic is None else max_dynamic)))


def ours(case) -> tuple:
    """Our answer, in the oracle's terms.  The default limit is asked for as
    users ask, by leaving max_dynamic_shared_bytes out."""
    *arguments, max_dynamic = case
    opt_in = {} if max_dynamic is None else {"max_dynamic_shared_bytes": max_dynamic}
    try:
        result = occupancy(*arguments, **opt_in)
    except OccupancyError as error:
        if error.argument != "dynamic_shared_bytes":
            raise
        return REFUSED
    factors = sum(FACTOR_BITS[name] for name in result.limiting_factors)
    limits = result.limits
    return (0, result.blocks_per_sm, factors, *(INT_MAX if limit is None else limit for limit in (
        limits.registers, limits.shared_memory, limits.warps, limits.blocks_per_sm)),
        result.registers_per_block, result.shared_bytes_per_block)


def theirs(answer) -> tuple:
    """The header's answer without its barrier limit: one barrier per block
    never allows fewer blocks than the block cap (checked here), and only ties.
    A shared-memory limit of 0 blocks is the header's word for a block over
    the per-block limit (a fitting block always finds a size that holds it):
    `REFUSED`, where `occupancy` raises."""
    status, blocks, factors, regs, smem, warps, cap, barriers, allocated_regs, allocated_smem = answer
    assert barriers >= cap, answer
    if status == 0 and smem == 0:
        assert blocks == 0, answer
        return REFUSED
    return status, blocks, factors & ~BARRIERS_BIT, regs, smem, warps, cap, allocated_regs, allocated_smem


@pytest.fixture(scope="module")
def known_ccs(oracle):
    """The compute capabilities of our table that the installed header knows."""
    answers = oracle([(cc, 128, 32, 0, 0, None, None) for cc in ARCHITECTURES])
    return [cc for cc, answer in zip(ARCHITECTURES, answers) if answer[0] == 0]


def shared_sizes(arch) -> list:
    """Shared memory per block (static + dynamic) at, just under and just past
    the sizes where an answer changes: the allocation unit, the sizes a
    carveout picks from, fractions of the largest (where the blocks that fit
    change), 48 KiB and the opt-in limit; each also less the driver's reserve."""
    unit, reserve, top = arch.shared_memory_granularity, arch.reserved_shared_memory_per_block, \
        arch.shared_memory_per_block_optin
    marks = {unit, 2 * unit, 48 * KiB, top, *arch.shared_memory_sizes}
    marks.update(arch.shared_memory_per_sm // parts for parts in (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 32))
    sizes = {0, 1}
    for mark in marks:
        sizes.update(mark - less + delta for less in (0, reserve) for delta in (-1, 0, 1))
    return sorted(size for size in sizes if 0 <= size <= top)


def split(total: int, i: int, arch) -> tuple:
    """(static, dynamic) for a total: all static, all dynamic, or half and half
    by turns (static up to 48 KiB)."""
    static = [total, 0, total // 2][i % 3]
    static = min(static, arch.shared_memory_per_block)
    return static, total - static


BLOCKS = (1, 31, 32, 33, 63, 64, 65, 96, 100, 127, 128, 129, 160, 192, 224, 255, 256, 257, 288, 320, 384, 416, 480,
          511, 512, 513, 544, 640, 672, 768, 800, 864, 992, 1000, 1023, 1024)
CARVEOUTS = (None, 0, 1, 5, 10, 20, 25, 33, 40, 50, 60, 66, 75, 90, 99, 100)


def grid(ccs) -> list:
    """The launches compared: for each compute capability, every register
    count (0 to 255) at 9 of the block sizes (others for the next count, so
    that across the architectures every pair comes up), and every
    shared-memory size of `shared_sizes` under every carveout at two shapes;
    then launches drawn at random, all inputs together.  Shared memory goes up
    to the opt-in limit: past 48 KiB the default limit refuses them."""
    cases = []
    for n, cc in enumerate(ccs):
        arch = ARCHITECTURES[cc]
        cases += [(cc, BLOCKS[(registers + n + 4 * i) % len(BLOCKS)], registers, 0, 0, None)
                  for registers in range(256) for i in range(9)]
        carveouts = CARVEOUTS if arch.shared_memory_sizes else (None, 50)  # fixed before 7.0: a check it is ignored
        for i, total in enumerate(shared_sizes(arch)):
            static, dynamic = split(total, i, arch)
            cases += [(cc, block, registers, static, dynamic, carveout)
                      for carveout in carveouts for block, registers in ((32, 16), (256, 40))]
    rng = random.Random(24)
    for _ in range(RANDOM_CASES):
        arch = ARCHITECTURES[rng.choice(ccs)]
        top = arch.shared_memory_per_block_optin
        total = rng.choice([0, rng.randrange(4 * KiB), min(top, rng.randrange(48 * KiB - 512, 48 * KiB + 512)),
                            rng.randrange(top + 1)])
        static, dynamic = split(total, rng.randrange(3), arch)
        cases.append((arch.cc, rng.randint(1, 1024), rng.randint(0, 255), static, dynamic,
                      rng.choice([None, rng.randint(0, 100)])))
    return cases


def opt_ins(cases, seed=35) -> list:
    """Each launch of `cases` with an opt-in the driver accepts (static +
    opted-in dynamic up to the opt-in limit), by turns: exactly the dynamic
    shared memory launched with, more, the most there is, less (the launch is
    refused) and any."""
    rng = random.Random(seed)
    opted = []
    for i, (cc, block, registers, static, dynamic, carveout) in enumerate(cases):
        most = ARCHITECTURES[cc].shared_memory_per_block_optin - static
        limit = [dynamic, rng.randint(dynamic, most), most, rng.randrange(dynamic) if dynamic else 0,
                 rng.randint(0, most)][i % 5]
        opted.append((cc, block, registers, static, dynamic, carveout, limit))
    return opted


RANDOM_CASES = 10_000  # per mode, on top of the grid


def cases_for(mode, ccs) -> list:
    cases = grid(ccs)
    return [case + (None,) for case in cases] if mode == "default" else opt_ins(cases)


def test_the_header_knows_every_architecture_of_the_table(known_ccs):
    unknown = set(ARCHITECTURES) - set(known_ccs)
    assert unknown <= THOR and len(unknown) <= 1, f"cuda_occupancy.h does not know {sorted(unknown)}"


@pytest.mark.parametrize("mode", ["default", "opt-in"])
def test_the_rules_agree_with_cuda_occupancy_h(oracle, known_ccs, mode):
    """By default (FUNC_SHMEM_LIMIT_DEFAULT: numba-cuda's launches) and opted
    in (FUNC_SHMEM_LIMIT_OPTIN with max_dynamic_shared_bytes), every answer
    agrees, and so does which launches are refused for their shared memory."""
    cases = cases_for(mode, known_ccs)
    answers = [theirs(answer) for answer in oracle(cases)]
    ours_ = [ours(case) for case in cases]
    refused = sum(answer == REFUSED for answer in answers)
    assert len(cases) > 50_000 and 5_000 < refused < len(cases) // 2, (len(cases), refused)  # both kinds, many
    differences = [(case, expected, got) for case, expected, got in zip(cases, answers, ours_) if expected != got]
    report = "\n".join(f"occupancy{case}: cuda_occupancy.h {expected}, ours {got}"
                       for case, expected, got in differences[:20])
    assert not differences, f"{mode}: {len(differences)} of {len(cases)} cases differ (status, blocks, factors, " \
                            f"limits by registers, shared memory, warps, blocks; registers, shared memory " \
                            f"allocated; or refused):\n{report}"


def test_the_oracle_catches_a_wrong_rule(oracle, monkeypatch):
    """A limit the header knows on its own (8.6's 16 blocks per SM), changed
    in our table, shows as differences."""
    wrong = dict(ARCHITECTURES)
    wrong[(8, 6)] = dataclasses.replace(wrong[(8, 6)], max_blocks_per_sm=32)
    monkeypatch.setattr(occupancy_module, "ARCHITECTURES", wrong)
    cases = [((8, 6), block, 16, 0, 0, None, None) for block in (32, 64, 96)]
    answers = [theirs(answer) for answer in oracle(cases)]
    assert [answer[1] for answer in answers] == [16, 16, 16]
    assert [ours(case)[1] for case in cases] == [32, 24, 16]
