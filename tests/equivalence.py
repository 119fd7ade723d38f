"""Comparing the pipeline's output with numba-cuda's own.

numba-cuda's `compile_ptx` is the reference.  Two things differ by design and
are normalised, nothing else:

* symbol names: numba numbers functions from a process-wide counter, the
  pipeline from the source identity, and the two encode their compile flags
  differently; both sit in the mangled name's ABI tags (``B<n><chars>``),
  which are dropped (module, function name and argument types stay; in those,
  a function passed as an argument is named by its dispatcher class and
  address, a record type by numba's process-wide type number, both dropped
  too), and the counter-numbered shared and local memory names and the
  constant byte strings numba names after Python's ``hash()`` become
  placeholders;
* the order of top-level PTX items (declarations, functions): numba links its
  libraries in an order that follows memory addresses (it differs from run to
  run), the pipeline in a canonical one; items are compared as a sorted list,
  and the function-local labels that libNVVM numbers by a function's position
  in the module (``__local_depot2``, ``$L__BB2_1``, ``// callseq 9``) lose that
  number.

Comment lines (compiler banners) are dropped.

So "equivalent" is up to module order and numbering, and that is as close
as numba's output can be compared: numba's own is not the same from one
process to the next.  Its module order follows addresses; its helpers,
record types and inlined variables are numbered from counters that follow
what the process compiled before; constant byte strings are named after
``hash()`` (PYTHONHASHSEED); and its helper cache hands a kernel a helper
lowered for an earlier kernel with other flags (lineinfo, fastmath), as do
the device functions it compiled once, so the reference is taken as a fresh
process compiles it (`forget_numbas_compiles`; the corpus also accepts a
fresh process that imported the module, whose device functions declared
with signatures compiled helpers at import).

The pipeline's output is byte-identical (NVVM IR, PTX, cubin) in every
compile and process, whatever the history, hash seed or address layout
(tests/test_determinism.py), except where numba's numbering reaches it from
outside a compile of ours or from an object with no content to number by:

* a helper whose closure holds a value with no process-independent
  description (`sources.describe.describe_value` falls back to identity), or one that
  describes like another without being equal to it (`backends.numba_cuda.stages.numbering._internal_uid`);
* an ``@overload(inline="always")`` implementation whose IR numba's own
  compile made and kept first: its variables made by ``mk_unique_var`` keep
  that compile's numbers (the callee's name is renumbered:
  `backends.numba_cuda.stages.numbering._inlined_by_content`);
* a function type numba's own compile made first for a dispatcher passed as
  an argument (its name, with an address, stays the type's);
* numba-cuda's polymorphic-variable debug info (``CUDA_DEBUG_POLY``, off with
  this toolchain) names a discriminator after ``id()``, and
  ``UndefinedFunctionType`` counts its instances.

Inputs that differ make outputs differ, as they should: a device array's
pointer, and the padding bytes numpy leaves uninitialised in an aligned
record array (numba bakes them; the token hashes them).

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

from gpucache_ext.toolchain.sass import without_abi_tags as _without_tags

_DEBUG_SECTION = re.compile(r"^\s*\.section\s+\.debug", re.M)
_SYMBOL = re.compile(r"_ZN[\w$]+")
# counter-numbered shared/local memory, and constant byte strings numba names
# after Python's hash() of them (PYTHONHASHSEED; the pipeline: a digest)
_MEMORY = re.compile(r"_cudapy_[a-z]+mem_\w+|_\$_bytes_\$_(?:_\$_)?\d+")


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
    it) and its address (" at 0x7f..", the proxy: its identity's number); a
    record type by a number (numba's: from a process-wide counter of types,
    the pipeline's: from the record's fields)."""
    symbol = re.sub(r"0x[0-9a-f]+", "0x#", symbol)
    symbol = re.sub(r"6RecordILi\d+E", "6RecordILi#E", symbol)
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


def numbas_helpers() -> dict:
    """numba's process-wide helper cache (``cached_internal_func``: int power,
    cmath, fp16 shims), keyed without the compile's flags: a kernel compiled
    with lineinfo or fastmath after one without reuses helpers lowered
    without them, so numba's output follows the process's history (the
    pipeline's does not: `backends.numba_cuda.stages.numbering._subroutine_cache`)."""
    from numba.cuda.descriptor import cuda_target

    return cuda_target.target_context.cached_internal_func


def forget_numbas_compiles(func, helpers=None):
    """Set numba's helper cache back to `helpers` (empty: as a fresh process
    starts; what a module's import compiled: as a fresh process that imported
    it), and empty the compiled overloads of the lazy device functions
    `func` reaches (through globals and closures), so numba's next compile of
    `func` is the one such a process makes: numba compiles each device
    function once per process, with the helpers and flags of that time."""
    import types as pytypes

    from numba.cuda.dispatcher import CUDADispatcher

    numbas_helpers().clear()
    numbas_helpers().update(helpers or {})
    seen, todo = set(), [getattr(func, "py_func", func)]
    while todo:
        pyfunc = todo.pop()
        if not isinstance(pyfunc, pytypes.FunctionType) or id(pyfunc) in seen:
            continue
        seen.add(id(pyfunc))
        for value in _reached(pyfunc):
            if isinstance(value, CUDADispatcher) and value.targetoptions.get("device"):
                if value._can_compile:  # (one declared with signatures cannot compile again)
                    value.overloads.clear()
                todo.append(value.py_func)


def _reached(pyfunc):
    """The values a function's code names: globals (nested code included) and closure cells."""
    import types as pytypes

    codes, names = [pyfunc.__code__], set()
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes.extend(c for c in code.co_consts if isinstance(c, pytypes.CodeType))
    values = [pyfunc.__globals__[name] for name in names if name in pyfunc.__globals__]
    for cell in pyfunc.__closure__ or ():
        try:
            values.append(cell.cell_contents)
        except ValueError:
            pass
    return values


def numba_ptx(func, sig, cc=(8, 6), **options) -> str:
    """numba-cuda's own PTX for `func`, as a fresh process compiles it."""
    from numba import cuda

    forget_numbas_compiles(func)
    with stand_in_gpu(cc):
        ptx, _ = cuda.compile_ptx(func, sig, cc=cc, **options)
    return ptx
