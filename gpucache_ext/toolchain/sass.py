"""SASS on any machine, and side-by-side diffs of two listings (SASS or PTX).

SASS comes from nvdisasm, which reads a cubin without a GPU or a driver.  The
package depends on the ``nvidia-cuda-nvdisasm`` wheel, so there is always
one; a CUDA toolkit's (through ``cuda.pathfinder``, or on PATH) is used as
well where the wheel's cannot read an architecture: nvdisasm 13 reads sm_75
and later only, nvdisasm 12 reads sm_50 and later.  A cubin's architecture
is read from its ELF header (`cubin_arch`), so a cubin nvdisasm would refuse
gets a plain message naming what would work before anything runs.

Two listings are compared by instruction: `sass_lines` drops nvdisasm's
address and encoding comments, `ptx_lines` the per-kernel parts of numba's
symbol names (see `plain_symbols`), and `side_by_side` pairs the lines up
(`difflib`) as a `SideBySide` that a text renderer (`side_by_side_text`,
for ``%gpucache diff`` and ``gpucache diff``) and the inspector's HTML
renderer both draw.

This module imports neither numba nor IPython.
"""

from __future__ import annotations

import difflib
import glob
import importlib.util
import logging
import os
import re
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Iterable, List, Optional, Sequence, Tuple
from .. import memos

log = logging.getLogger(__name__)


class SassUnavailable(RuntimeError):
    """SASS cannot be produced here (nvdisasm is missing, cannot read the
    cubin's architecture, or failed); the message says why and what to do."""


# ---------------------------------------------------------------------------
# nvdisasm: where it is, which version, which architectures it reads

_WHEEL = "the nvidia-cuda-nvdisasm wheel"
_PATHFINDER = "found by cuda.pathfinder"
_PATH = "on PATH"

# The oldest architecture each nvdisasm major version reads (CUDA 13 dropped
# sm_50 to sm_72; CUDA 12 dropped sm_35 and sm_37).
_OLDEST_SM = ((13, 75), (12, 50), (11, 35))


def oldest_sm(major: int) -> int:
    """The oldest architecture nvdisasm of CUDA `major` reads."""
    return next((sm for version, sm in _OLDEST_SM if major >= version), 30)


@dataclass(frozen=True)
class Nvdisasm:
    """One nvdisasm binary: where it is, its version, and how it was found."""

    path: str
    version: Tuple[int, int]  # (13, 5) for CUDA 13.5
    origin: str  # "the nvidia-cuda-nvdisasm wheel", "found by cuda.pathfinder", "on PATH"

    @property
    def name(self) -> str:
        """"nvdisasm 13.5"."""
        return f"nvdisasm {self.version[0]}.{self.version[1]}"

    @property
    def oldest_sm(self) -> int:
        return oldest_sm(self.version[0])

    def reads(self, arch: int) -> bool:
        return arch >= self.oldest_sm

    def describe(self) -> str:
        """"nvdisasm 13.5 (the nvidia-cuda-nvdisasm wheel)"."""
        return f"{self.name} ({self.origin})"


def _version(path: str) -> Optional[Tuple[int, int]]:
    """The CUDA release of an nvdisasm binary, from ``--version`` (None: it does not run)."""
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"release (\d+)\.(\d+)", done.stdout)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _wheel_binaries() -> List[str]:
    """nvdisasm binaries inside the installed ``nvidia`` namespace package
    (``nvidia/cu13/bin/nvdisasm``, ``nvidia/cuda_nvdisasm/bin/nvdisasm``)."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    found = []
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        for name in ("nvdisasm", "nvdisasm.exe"):
            found += sorted(glob.glob(os.path.join(location, "*", "bin", name)))
    return found


def _pathfinder_binary() -> List[str]:
    try:
        from cuda.pathfinder import find_nvidia_binary_utility

        path = find_nvidia_binary_utility("nvdisasm")
    except Exception:  # an older cuda-pathfinder, or none
        log.debug("cuda-pathfinder found no nvdisasm", exc_info=True)
        return []
    return [path] if path else []


@memos.cached("toolchain.sass.nvdisasm_tools", maxsize=1)
def nvdisasm_tools() -> Tuple[Nvdisasm, ...]:
    """Every nvdisasm found, in the order they are preferred: the wheel's
    (the newest first), then cuda.pathfinder's, then the one on PATH; each
    binary once.  Memoised: ``nvdisasm_tools.cache_clear()`` looks again."""
    tools: List[Nvdisasm] = []
    seen = set()
    wheels = [(path, _version(path)) for path in _wheel_binaries()]
    wheels.sort(key=lambda found: found[1] or (0, 0), reverse=True)
    candidates = [(path, version, _WHEEL) for path, version in wheels]
    candidates += [(path, None, _PATHFINDER) for path in _pathfinder_binary()]
    which = shutil.which("nvdisasm")
    candidates += [(which, None, _PATH)] if which else []
    for path, version, origin in candidates:
        real = os.path.realpath(path)
        if real in seen:
            continue
        seen.add(real)
        version = version or _version(path)
        if version is not None:
            tools.append(Nvdisasm(path, version, origin))
    return tuple(tools)


def find_nvdisasm() -> Optional[Nvdisasm]:
    """The preferred nvdisasm (path and version), or None where there is none."""
    tools = nvdisasm_tools()
    return tools[0] if tools else None


def nvdisasm_for(arch: int, tools: Optional[Sequence[Nvdisasm]] = None) -> Nvdisasm:
    """The first of `tools` (default: every one found) that reads `arch`;
    `SassUnavailable` says plainly why there is none and what would work."""
    tools = nvdisasm_tools() if tools is None else tuple(tools)
    if not tools:
        raise SassUnavailable("nvdisasm was not found (pip install nvidia-cuda-nvdisasm, or put a CUDA "
                              "toolkit's nvdisasm on PATH)")
    for tool in tools:
        if tool.reads(arch):
            return tool
    best = tools[0]
    older = next((version for version, sm in _OLDEST_SM if arch >= sm), None)
    fix = f", or put a CUDA {older} toolkit's nvdisasm on PATH" if older is not None else ""
    raise SassUnavailable(f"{best.describe()} cannot disassemble sm_{arch} code: it reads sm_{best.oldest_sm} "
                          f"and later. Compile for sm_{best.oldest_sm} or later to see SASS{fix}.")


# ---------------------------------------------------------------------------
# A cubin's architecture

_EM_CUDA = 190
_ELFOSABI_CUDA_V2 = 0x41  # the ELF layout of CUDA 12.8 and later for sm_100 and later


def cubin_arch(cubin: bytes) -> int:
    """The SM a cubin was built for (86 for sm_86), from its ELF header.

    NVIDIA's cubins keep it in e_flags: the low byte in the original layout
    (ELF ABI version 7, sm_90 and older), the second byte in the layout
    CUDA 12.8 brought for sm_100 and later (OS ABI 0x41, ABI version 8).
    ValueError where `cubin` is no CUDA ELF file.
    """
    if len(cubin) < 52 or cubin[:4] != b"\x7fELF":
        raise ValueError("not a cubin: it does not start as an ELF file does")
    order = "<" if cubin[5] == 1 else ">"
    machine, = struct.unpack_from(order + "H", cubin, 18)
    if machine != _EM_CUDA:
        raise ValueError(f"not a cubin: an ELF file for machine {machine}, not CUDA ({_EM_CUDA})")
    flags, = struct.unpack_from(order + "I", cubin, 48 if cubin[4] == 2 else 36)
    if cubin[7] == _ELFOSABI_CUDA_V2 or cubin[8] >= 8:
        return (flags >> 8) & 0xFF
    return flags & 0xFF


# ---------------------------------------------------------------------------
# Disassembly


@dataclass(frozen=True)
class Sass:
    """A cubin's SASS, with the architecture and the nvdisasm that read it."""

    text: str
    arch: int
    tool: Nvdisasm

    @property
    def label(self) -> str:
        """"SASS sm_86 (nvdisasm 13.5)"."""
        return f"SASS sm_{self.arch} ({self.tool.name})"


def disassembly(cubin: bytes) -> Sass:
    """The SASS of a cubin, from the first nvdisasm that reads its
    architecture (`nvdisasm_for`); `SassUnavailable` says why not."""
    try:
        arch = cubin_arch(cubin)
    except ValueError as exc:
        raise SassUnavailable(str(exc)) from None
    tool = nvdisasm_for(arch)
    with tempfile.TemporaryDirectory(prefix="gpucache-sass-") as folder:
        path = os.path.join(folder, f"kernel.sm_{arch}.cubin")
        with open(path, "wb") as file:
            file.write(cubin)
        try:
            done = subprocess.run([tool.path, "-c", path], capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.SubprocessError) as exc:
            raise SassUnavailable(f"{tool.describe()} did not run: {exc}") from None
    if done.returncode != 0:
        raise SassUnavailable(f"{tool.describe()} failed on this sm_{arch} cubin: {_first_error(done.stderr)}")
    return Sass(done.stdout, arch, tool)


def disassemble(cubin: bytes) -> str:
    """The SASS of a cubin as text (see `disassembly`)."""
    return disassembly(cubin).text


def _first_error(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "warning" not in line.split(":", 1)[0]]
    return (errors or lines or ["no message"])[0]


# ---------------------------------------------------------------------------
# Listings as lines to compare

_SYMBOL = re.compile(r"_ZN[\w$]+")
# numba's shared and local array names carry the function's symbol uid
# (`stages.numbering.stable_shared_memory_names`): _cudapy_smem_<uid>_<n>
_MEMORY_UID = re.compile(r"(_cudapy_[a-z]+mem)_\d+_")
_ADDRESS = re.compile(r"/\*[0-9a-f]{4,}\*/")
_ENCODING = re.compile(r"/\*\s*0x[0-9a-f]+\s*\*/")
_SPACES = re.compile(r"\s+")


def without_abi_tags(symbol: str) -> str:
    """A numba mangled name without its ABI tags: ``_ZN`` then length-prefixed
    parts up to ``E``, tags written ``B<length><chars>``.  The tags hold what
    differs between two builds of one kernel and is no code: the symbol uid
    (`stages.symbol_uid`, from the source identity) and a summary of the
    lowering flags."""
    out, i = ["_ZN"], 3
    while i < len(symbol) and symbol[i] != "E":
        tag = symbol[i] == "B"
        digits = re.match(r"\d+", symbol[i + tag:])
        if digits is None:
            return symbol  # not numba's mangling
        end = i + tag + len(digits.group()) + int(digits.group())
        if not tag:
            out.append(symbol[i:end])
        i = end
    return "".join(out) + symbol[i:]


def plain_symbols(text: str) -> str:
    """`text` with numba's symbol names without their ABI tags and the uid
    left out of its shared and local array names, so that two builds of a
    kernel (another config, another version of its source) read alike."""
    text = _SYMBOL.sub(lambda match: without_abi_tags(match.group(0)), text)
    return _MEMORY_UID.sub(r"\1_", text)


def _lines(text: str) -> List[str]:
    lines = (_SPACES.sub(" ", line).strip() for line in plain_symbols(text).splitlines())
    return [line for line in lines if line]


def sass_lines(text: str) -> List[str]:
    """SASS as one line per instruction, label or directive: without
    nvdisasm's ``/*0040*/`` addresses and ``/* 0x... */`` encodings, numba's
    symbol names plain (`plain_symbols`), spaces collapsed, blank lines dropped."""
    return _lines(_ENCODING.sub("", _ADDRESS.sub("", text)))


def ptx_lines(text: str) -> List[str]:
    """PTX as lines to compare: numba's symbol names plain (`plain_symbols`),
    spaces collapsed, blank lines dropped."""
    return _lines(text)


# ---------------------------------------------------------------------------
# Side by side

SAME, CHANGED, LEFT_ONLY, RIGHT_ONLY = "same", "changed", "left only", "right only"


@dataclass(frozen=True)
class DiffRow:
    """One row of a side-by-side diff; a line number is None where that side has no line."""

    left_no: Optional[int]
    left: str
    right_no: Optional[int]
    right: str
    kind: str  # "same", "changed", "left only", "right only"


@dataclass(frozen=True)
class SideBySide:
    """Two listings side by side: the hunks that differ, each with up to
    `context` unchanged lines around it, and how many lines differ."""

    left_label: str
    right_label: str
    hunks: Tuple[Tuple[DiffRow, ...], ...]
    left_lines: int  # the listings' lengths, as compared
    right_lines: int
    added: int  # lines only the right has
    removed: int  # lines only the left has
    changed: int  # lines paired with a different line

    @property
    def rows(self) -> Tuple[DiffRow, ...]:
        return tuple(row for hunk in self.hunks for row in hunk)

    @property
    def identical(self) -> bool:
        return not (self.added or self.removed or self.changed)

    def summary(self) -> str:
        """"3 lines changed, 1 removed, 2 added (of 120 and 121)", or "identical (120 lines)"."""
        if self.identical:
            return f"identical ({self.left_lines} lines)"
        return (f"{self.changed} line{'s' if self.changed != 1 else ''} changed, {self.removed} removed, "
                f"{self.added} added (of {self.left_lines} and {self.right_lines})")


def _rows(tag: str, left: Sequence[str], i1: int, i2: int, right: Sequence[str], j1: int,
          j2: int) -> Iterable[DiffRow]:
    if tag == "equal":
        for offset in range(i2 - i1):
            yield DiffRow(i1 + offset + 1, left[i1 + offset], j1 + offset + 1, right[j1 + offset], SAME)
        return
    for offset in range(max(i2 - i1, j2 - j1)):
        i, j = i1 + offset, j1 + offset
        has_left, has_right = i < i2, j < j2
        kind = CHANGED if has_left and has_right else LEFT_ONLY if has_left else RIGHT_ONLY
        yield DiffRow(i + 1 if has_left else None, left[i] if has_left else "",
                      j + 1 if has_right else None, right[j] if has_right else "", kind)


def side_by_side(a_text: str, b_text: str, a_label: str, b_label: str, context: int = 3,
                 kind: str = "sass") -> SideBySide:
    """Compare two listings line by line: `kind` "sass" (`sass_lines`),
    "ptx" (`ptx_lines`) or "text" (as they are)."""
    split = {"sass": sass_lines, "ptx": ptx_lines, "text": str.splitlines}.get(kind)
    if split is None:
        raise ValueError(f"kind={kind!r}: use 'sass', 'ptx' or 'text'")
    left, right = split(a_text), split(b_text)
    matcher = difflib.SequenceMatcher(None, left, right, autojunk=False)
    hunks = tuple(tuple(row for opcode in group for row in _rows(opcode[0], left, *opcode[1:3], right,
                                                                  *opcode[3:5]))
                  for group in matcher.get_grouped_opcodes(context))
    counts = {CHANGED: 0, LEFT_ONLY: 0, RIGHT_ONLY: 0, SAME: 0}
    for hunk in hunks:
        for row in hunk:
            counts[row.kind] += 1
    return SideBySide(a_label, b_label, hunks, len(left), len(right), counts[RIGHT_ONLY], counts[LEFT_ONLY],
                      counts[CHANGED])


_MARK = {SAME: " ", CHANGED: "|", LEFT_ONLY: "<", RIGHT_ONLY: ">"}


def side_by_side_text(diff: SideBySide, width: int = 160) -> str:
    """A side-by-side diff as text, as ``diff -y`` draws it: `` `` same,
    ``|`` changed, ``<`` left only, ``>`` right only; hunks apart by ``...``;
    lines longer than a column are cut with ``~``."""
    column = max(20, (width - 3) // 2 - 6)

    def cell(number, text):
        shown = text if len(text) <= column else text[:column - 1] + "~"
        return f"{number if number is not None else '':>5} {shown:<{column}}"

    lines = [f"--- {diff.left_label}", f"+++ {diff.right_label}"]
    for index, hunk in enumerate(diff.hunks):
        if index:
            lines.append("...")
        lines += [f"{cell(row.left_no, row.left)} {_MARK[row.kind]} {cell(row.right_no, row.right)}".rstrip()
                  for row in hunk]
    lines.append(diff.summary())
    return "\n".join(lines)
