"""What a function's code is, as the source identity reads it: the
variables its bytecode loads (with the attribute chains read from each),
and a digest of the code itself, constants by their bytes, file and lines
only where debug information will hold them."""

from __future__ import annotations

import dis
import functools
import sys
import types as pytypes
from dataclasses import dataclass
from typing import Dict, FrozenSet, Tuple

from ..keys.tokens import digest
from .values import array_content, dtype_data


_GLOBAL_LOADS = {"LOAD_GLOBAL", "LOAD_NAME"}
_DEREF_LOADS = {"LOAD_DEREF", "LOAD_CLASSDEREF", "LOAD_FROM_DICT_OR_DEREF"}
_ATTR_LOADS = {"LOAD_ATTR", "LOAD_METHOD"}
_TRANSPARENT = {"EXTENDED_ARG", "CACHE"}

Chain = Tuple[str, ...]  # attribute names read after loading a variable; () = the value itself


@dataclass(frozen=True)
class CodeReads:
    """The variables a code object (and the code nested in it) loads, with
    the attribute chains read from each."""

    globals: Dict[str, FrozenSet[Chain]]
    derefs: Dict[str, FrozenSet[Chain]]
    imports: FrozenSet[Tuple[str, int]] = frozenset()  # (module name, level) of each import statement


def _by_code(fn):
    """`fn(code, *args)` memoised by the code object's identity (the memo holds
    it, so its id stays its own): an lru_cache would hash and compare code
    objects, bytecode and constants, tens of microseconds on a cold hit, and
    equal code objects may differ in their file name."""
    memo: Dict[tuple, tuple] = {}

    @functools.wraps(fn)
    def memoised(code, *args):
        key = (id(code), *args)
        found = memo.get(key)
        if found is None or found[0] is not code:
            if len(memo) >= 4096:
                memo.clear()
            found = memo[key] = (code, fn(code, *args))
        return found[1]

    return memoised


@_by_code
def code_reads(code) -> CodeReads:
    found = {"global": {}, "deref": {}, "import": set()}
    _collect_reads(code, found)
    return CodeReads({k: frozenset(v) for k, v in found["global"].items()},
                     {k: frozenset(v) for k, v in found["deref"].items()}, frozenset(found["import"]))


def _collect_reads(code, found):
    instructions = [i for i in dis.get_instructions(code) if i.opname not in _TRANSPARENT]
    for index, inst in enumerate(instructions):
        if inst.opname == "IMPORT_NAME":
            before = instructions[index - 2] if index >= 2 else None  # (the level: 0 absolute, else relative)
            level = before.argval if before is not None and before.opname in ("LOAD_CONST", "LOAD_SMALL_INT") else 0
            found["import"].add((inst.argval, level if isinstance(level, int) else 0))
            continue
        if inst.opname in _GLOBAL_LOADS:
            kind = "global"
        elif inst.opname in _DEREF_LOADS:
            kind = "deref"
        else:
            continue
        chain = []
        for following in instructions[index + 1:]:
            if following.opname not in _ATTR_LOADS:
                break
            chain.append(following.argval)
        found[kind].setdefault(inst.argval, set()).add(tuple(chain))
    for const in code.co_consts:
        if isinstance(const, pytypes.CodeType):
            _collect_reads(const, found)


@_by_code
def code_digest(code, with_location: bool) -> str:
    return digest(_code_value(code, with_location))


def _code_value(code, with_location):
    value = {
        "bytecode": code.co_code,
        "consts": [
            _code_value(c, with_location) if isinstance(c, pytypes.CodeType) else _const_value(c)
            for c in code.co_consts
        ],
        "names": list(code.co_names),
        "varnames": list(code.co_varnames),
        "freevars": list(code.co_freevars),
        "cellvars": list(code.co_cellvars),
        "argcounts": [code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount],
        "flags": code.co_flags,
        "name": code.co_name,
        "exceptiontable": getattr(code, "co_exceptiontable", b""),
    }
    if with_location:
        value["file"] = code.co_filename
        value["lines"] = [list(span) for span in code.co_lines()]
        value["firstlineno"] = code.co_firstlineno
    return value


def _const_value(value):
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return [type(value).__name__, value]
    if isinstance(value, complex):
        return ["complex", value.real, value.imag]
    if isinstance(value, (tuple, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, frozenset) else value
        return [type(value).__name__, [_const_value(v) for v in items]]
    if value is Ellipsis:
        return ["ellipsis"]
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, (np.generic, np.ndarray)) and not value.dtype.hasobject:
        # (generated code may hold numpy values: by their bytes, not a repr that prints every
        # float32 NaN alike and elides the middle of a large array)
        return ["numpy", dtype_data(value.dtype), list(np.shape(value)), array_content(np.asarray(value))]
    return ["repr", repr(value)]
