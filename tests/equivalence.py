"""Comparing the pipeline's output with numba-cuda's own.

numba-cuda's `compile_ptx` is the reference.  Two things differ by design and
are normalised, nothing else:

* symbol names: numba numbers functions from a process-wide counter, the
  pipeline from the source identity, and the two encode their compile flags
  differently; both sit in the mangled name's ABI tags (``B<n><chars>``),
  which are dropped (module, function name and argument types stay; in those,
  a function passed as an argument is named by its dispatcher class and
  address, which are dropped too), and the counter-numbered shared and local
  memory names become placeholders;
* the order of top-level PTX items (declarations, functions): numba links its
  libraries in an order that follows memory addresses (it differs from run to
  run), the pipeline in a canonical one; items are compared as a sorted list,
  and the function-local labels that libNVVM numbers by a function's position
  in the module (``__local_depot2``, ``$L__BB2_1``, ``// callseq 9``) lose that
  number.

Comment lines (compiler banners) are dropped.

With debug info, symbol names are also spelt out in the DWARF sections, as
``.b8`` bytes: the text those bytes spell is compared (so the names
normalise), the sections' numbers are dropped, because lengths and offsets
there follow from the names' lengths, and each section is compared as the
sorted list of its lines, because its entries follow the order of functions.
That order is numba's set order, different from run to run, and the layout
follows it: whether a reference to an entry is an offset within its unit or
an address in the section (another unit), and with it the abbreviation codes
and attribute forms between the strings; those are not compared.  Line
numbers are still compared, through the code's ``.loc`` directives.
"""

from __future__ import annotations

import contextlib
import re

from gpucache_ext.sass import without_abi_tags as _without_tags

_DEBUG_SECTION = re.compile(r"^\s*\.section\s+\.debug", re.M)
_SYMBOL = re.compile(r"_ZN[\w$]+")
_MEMORY = re.compile(r"_cudapy_[a-z]+mem_\w+")


def _items(text: str):
    """PTX as (header lines, top-level items): an item runs from a line at
    column 0 to the end of its braces or its semicolon."""
    lines = [line.rstrip() for line in text.splitlines()
             if line.strip() and not line.strip().startswith("//")]
    header, items, current, depth = [], [], [], 0
    for line in lines:
        if not current and depth == 0 and line.startswith((".version", ".target", ".address_size")):
            header.append(line)
            continue
        current.append(line)
        depth += line.count("{") - line.count("}")
        if depth == 0 and (line.endswith(";") or line.endswith("}")):
            items.append("\n".join(current))
            current = []
    if current:
        items.append("\n".join(current))
    return header, items


def _debug_section(item: str) -> str:
    """A DWARF section with its bytes as text and its numbers dropped, as the
    sorted list of its lines: its entries follow the functions' order in the
    module, which numba takes from a set (see the module's docstring)."""
    out, raw = [], bytearray()
    for line in item.splitlines():
        stripped = line.strip()
        if stripped.startswith(".b8 "):
            raw.extend(int(v) for v in stripped[4:].split(","))
            continue
        if raw:
            out.extend(_strings(raw))
            raw.clear()
        line = re.sub(r"^(\.b(?:16|32|64)) ((?:[\w.$]+\+)?)\d+$", r"\1 \2N", stripped)
        # a reference to another entry: a 4-byte offset within its unit, or an
        # 8-byte address in the section where the order put it in another unit
        out.append(".b32 N" if line == ".b64 .debug_info+N" else line)
    return "\n".join(sorted(out))


_TEXT = re.compile(rb"[\x20-\x7e]{2,}")


def _strings(raw: bytes):
    """The text a DWARF byte run spells (names, files, the producer), each
    string once per place it appears.  The bytes between them (abbreviation
    codes, attribute forms, flags) follow the layout of the units, which
    follows the functions' order: that order is numba's set order (see the
    module's docstring), so they are not compared."""
    return [match.group(0).decode("ascii") for match in _TEXT.finditer(bytes(raw))]


_POSITIONAL = re.compile(r"(__local_depot|\$L__BB|\$L__func_begin|\$L__func_end|\$L__tmp|// callseq )\d+")


def normalise_ptx(text: str) -> str:
    header, items = _items(_POSITIONAL.sub(r"\1#", text))
    items = [_debug_section(item) if _DEBUG_SECTION.search(item) else item for item in items]
    items = [_SYMBOL.sub(lambda m: _argument_types(_without_tags(m.group(0))), item) for item in items]
    items.sort(key=lambda item: _MEMORY.sub("MEM", item))
    names = {}

    def placeholder(match):
        return names.setdefault(match.group(0), f"MEM{len(names)}")

    return _MEMORY.sub(placeholder, "\n".join(header + items))


def _argument_types(symbol: str) -> str:
    """Mangled argument types that name objects: a function passed as an
    argument is typed by its dispatcher (numba's, or the pipeline's proxy for
    it) and its address (" at 0x7f..")."""
    symbol = re.sub(r"0x[0-9a-f]+", "0x#", symbol)
    return re.sub(r"\d+type_28(?:CUDADispatcher|DeviceProxy)_28", "#type_28Dispatcher_28", symbol)


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
