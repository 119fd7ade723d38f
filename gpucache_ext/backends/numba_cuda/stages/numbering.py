"""The numbers numba puts in its output, derived from what is compiled.

numba numbers functions, shared arrays, record types, constants, variables
and labels from process-wide counters (or addresses, or ``hash()``), and the
numbers reach symbol names and the NVVM IR.  Inside a compile of ours each is
derived from the source identity or the content instead, so equal inputs give
byte-identical outputs in every compile and every process.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import itertools
import logging
import types as pytypes
import weakref
from typing import Any, Dict, Optional, Tuple

from ....keys import targets
from .. import numba_compat
from ....keys.config import CompileConfig
from .compiling import active, lowering_key, replace_in_numba
from .... import memos

log = logging.getLogger(__name__)


def symbol_uid(identity_digest: str) -> int:
    """The number numba puts in symbol names, derived from the source
    identity; always of 16 digits, so that a symbol's length, and the cubin's
    size and layout with it, do not move with the digest (an edit that
    changes nothing else moved a kernel's cubin bytes across targets)."""
    return _UID_BASE + int(identity_digest[:12], 16)  # (12 hex digits: below 2 ** 48 < 9 * 10 ** 15)


_UID_BASE = 10 ** 15


def _next_uid(uid: int) -> int:
    """The uid after `uid`, of the same 16 digits (wrapping within them)."""
    return _UID_BASE + (uid - _UID_BASE + 1) % (1 << 48)


def address_of(uid: int) -> str:
    """A symbol uid written as numba's dispatchers write their function's
    address in their repr (which numba puts in the mangled name of what a
    function is passed to): twelve hex digits, as a heap address has, so
    that the symbol's length is numba's and does not move with the uid."""
    return f"0x{(uid - _UID_BASE) % (1 << 48):012x}"


@contextlib.contextmanager
def stable_shared_memory_names(uid):
    """Name shared arrays after the function being lowered, not a global counter.

    numba-cuda names each ``cuda.shared.array`` ``_cudapy_smem_<N>`` from a
    process-wide counter (the names must be unique across everything linked
    together, an NVVM limitation).  Prefixing the function's symbol uid and
    counting per lowering keeps them unique and makes them the same in every
    compile and process.  Nested lowerings (device functions) get their own.
    """
    counter = itertools.count(1)
    with numba_compat.smem_ids_named(lambda prefix: f"{prefix}_{uid}_{next(counter)}"):
        yield


@contextlib.contextmanager
def numbered_afresh():
    """One typing or lowering, numbered as if it were the process's first compile.

    numba numbers what it makes from counters that live as long as the
    process, and the numbers reach the output, so a kernel's NVVM IR followed
    what the process had compiled before (with ``literal_unroll``, two compiles
    in a row differ): the variables it makes and the block labels of code it
    inlines start from 0 here (`numba_compat.numbered_afresh`), and the
    functions it compiles or inlines on its own are numbered by content
    (`numba_compat.PATCHES`).  And its helper cache (numba/cuda/core/base.py:913-946
    ``cached_internal_func``, keyed without the compile's flags or target)
    handed a kernel a helper lowered for another: here helpers are shared by
    the lowerings whose context state is the same, for the targets their
    reads hold for (`_shared_subroutine`), and kept per lowering config where
    that state cannot be read exactly (`_subroutine_cache`).  Runs under
    numba's compiler lock (the counters are process-wide).
    """
    with numba_compat.numbered_afresh(_subroutine_cache(active.config)):
        yield


# (lowering key, target) -> numba's helper cache for them
_subroutine_caches: Dict[Any, dict] = memos.memo("backends.numba_cuda.stages.numbering._subroutine_caches", {})
# a helper's library -> the target reads its compile made (replayed at each reuse)
_subroutine_reads: "weakref.WeakKeyDictionary[Any, frozenset]" = memos.state(
    "backends.numba_cuda.stages.numbering._subroutine_reads", weakref.WeakKeyDictionary(),
    "a live helper's target reads, replayed wherever numba reuses it (its own caches hold it too)")


def _subroutine_cache(config: Optional[CompileConfig]) -> dict:
    """numba's helper cache (``context.compile_internal``: int power, cmath,
    array methods) for compiles with `config`: shared by the lowerings of one
    lowering config and target only, whose helpers come out the same (each
    compiled numbered afresh: `_fresh_subroutine`), so a kernel's helpers
    never depend on what was compiled before."""
    if config is None:
        return {}
    return _subroutine_caches.setdefault((lowering_key(config), tuple(config.cc)), {})


def _fresh_subroutine(compile_no_cache):
    """numba's compile of a helper on a miss of its cache: numbered afresh
    (its text must not depend on the lowering that first needed it), and its
    target reads kept with it (`_shared_subroutine`)."""

    @functools.wraps(compile_no_cache)
    def compile_(self, *args, **kwargs):
        if active.config is None:
            return compile_no_cache(self, *args, **kwargs)
        with numbered_afresh(), targets.track() as reads:
            cres = compile_no_cache(self, *args, **kwargs)
        _subroutine_reads[cres.library] = frozenset(reads)
        return cres

    return compile_


def _shared_subroutine(compile_subroutine):
    """numba's helper lookup (``context.compile_subroutine``), inside a compile
    of ours: helpers shared by every lowering whose context they would be
    lowered under is the same (`_lowering_state`), for every target their
    compile's reads hold for (`_SharedHelpers`); a helper found reads the
    target as its compile did (or a kernel using it would seem valid for
    every target)."""

    @functools.wraps(compile_subroutine)
    def compile_(self, builder, impl, sig, locals=None, flags=None, caching=True):
        config = active.config
        if config is None:
            return compile_subroutine(self, builder, impl, sig, locals, flags, caching)
        reads = _what_a_users_helper_reads(impl)
        state = _lowering_state(self) if flags is None else None
        if state is None:  # (the per-config cache `numbered_afresh` put in place; a user's helper: none)
            cres = compile_subroutine(self, builder, impl, sig, locals, flags, caching and reads is None)
        else:
            had = "cached_internal_func" in vars(self)
            saved = vars(self).get("cached_internal_func")
            self.cached_internal_func = _SharedHelpers((state, lowering_settings(), reads), config.cc)
            try:
                cres = compile_subroutine(self, builder, impl, sig, locals, flags, caching)
            finally:
                if had:
                    self.cached_internal_func = saved
                else:
                    del self.cached_internal_func
        targets.note(_subroutine_reads.get(cres.library, ()))
        return cres

    return compile_


def _what_a_users_helper_reads(impl) -> Optional[str]:
    """numba keys a helper by its code and closure only (numba/cuda/core/base.py:924-935)
    and types it against the live globals it reads: for numba's own helpers
    those are numba's (its version is in every token), but a user's (an
    extension's lowering compiling a function of its own with
    ``context.compile_internal``) reads the user's, which change.  Its key then
    also holds what it reads, described as the extension tables' scan
    describes it (None for a helper that holds no user code)."""
    from ....sources.usercode import touches_user_code

    if not touches_user_code(impl):
        return None
    from ....sources.describe import describe_registration
    from ....keys.tokens import digest

    return digest(["user helper", describe_registration(impl)])


# What a helper's lowering inherits from the context of the lowering that asks
# for it (numba/cuda/core/base.py:875-910 ``_compile_subroutine_no_cache``
# compiles it with default flags on that context; core/compiler.py:58-78
# ``_make_subtarget`` sets fastmath, debuginfo, boundscheck and NRT only where
# the flags turn them on, so the lowering's own stay): every attribute of the
# context, by value where it is a plain value, and otherwise known to be the
# same for every lowering of the process.
_PER_LOWERING = frozenset({
    "environment", "fndesc",  # the helper's own lowering sets its own (lowering.py:73-75)
    "cached_internal_func",  # this cache
})
_PROCESS_CONSTANT = frozenset({
    "_target_data",  # the data layout of libNVVM (target.py:237-241), made on first use
    "nonconst_module_attrs",  # a cached property: cuda's special registers (target.py:251-270)
})
_PLAIN = (bool, int, float, str, type(None))


def _lowering_state(context) -> Optional[tuple]:
    """The state of numba's target context that a helper compiled under it can
    read, exactly: plain values by value, fastmath by its flags, the error
    model by its kind; every other attribute must be the process's own object
    (the typing context, the registries, the codegen).  None where something
    else differs (a numba that keeps more there): then helpers are kept per
    lowering config, as before."""
    from numba.cuda.core.callconv import ErrorModel
    from numba.cuda.core.options import FastMathOptions
    from numba.cuda.descriptor import cuda_target

    base = vars(cuda_target.target_context)
    state = []
    for name, value in vars(context).items():
        if name in _PER_LOWERING or name in _PROCESS_CONSTANT:
            continue
        if isinstance(value, _PLAIN):
            state.append((name, type(value).__name__, value))
        elif isinstance(value, FastMathOptions):
            state.append((name, "fastmath", tuple(sorted(value.flags))))
        elif isinstance(value, ErrorModel) and set(vars(value)) <= {"call_conv"}:
            state.append((name, "error model", f"{type(value).__module__}.{type(value).__qualname__}"))
        elif base.get(name, _UNSET) is not value:
            log.debug("helpers kept per lowering config: the context's %s differs (%s)", name, type(value))
            return None
    return tuple(sorted(state))


_UNSET = object()


def lowering_settings() -> tuple:
    """numba's settings that lowering reads (environment variables), as the llvm token has them."""
    from ....toolchain import numba_settings

    return tuple(sorted(numba_settings(reload=False).items()))


# (lowering state, numba's own helper key) -> [(target reads, helper's compile result)]
_shared_helpers: Dict[Any, list] = memos.memo("backends.numba_cuda.stages.numbering._shared_helpers", {})


class _SharedHelpers:
    """numba's helper cache as one lowering sees it (numba reads it with
    ``get`` and ``[key]`` and fills it with ``[key] = cres``,
    numba/cuda/core/base.py:936-943): the helpers compiled under the same
    lowering state, for any target that answers their compile's target
    questions the same way."""

    __slots__ = ("state", "cc")

    def __init__(self, state, cc):
        self.state, self.cc = state, tuple(cc)

    def get(self, key, default=None):
        for reads, cres in _shared_helpers.get((self.state, key), ()):
            if targets.holds_for(reads, self.cc):
                return cres
        return default

    def __getitem__(self, key):
        found = self.get(key, _UNSET)
        if found is _UNSET:
            raise KeyError(key)
        return found

    def __setitem__(self, key, cres):
        reads = _subroutine_reads.get(cres.library, frozenset())
        variants = _shared_helpers.setdefault((self.state, key), [])
        variants[:] = [(r, c) for r, c in variants if r != reads] + [(reads, cres)]


# uid -> (code, closure values) it numbers
_internal_uids: Dict[int, Tuple[Any, tuple]] = memos.state(
    "backends.numba_cuda.stages.numbering._internal_uids", {},
    "numbers given out in this process stay unique while what they number lives (symbol names in live code)")
# the rebound Python functions of user device proxies -> their symbol uid (from their identity)
proxied_uids: "weakref.WeakKeyDictionary[Any, int]" = memos.state(
    "backends.numba_cuda.stages.numbering.proxied_uids", weakref.WeakKeyDictionary(),
    "a live proxy's function's uid, from its identity: numba numbers what it inlines by it")


def _internal_uid(pyfunc) -> int:
    """The number of a function numba compiles or inlines on its own: a user
    device function's snapshot by its proxy's identity (numba inlines an
    ``inline="always"`` one itself), any other's from its content
    (`sources.internal_function_digest`),
    so the same in every process.  Unique as numba's counter is: a function
    whose content describes like another's but is not equal to it takes the
    next free number (then only that one follows the process's history)."""
    from ....sources import internal_function_digest

    uid = proxied_uids.get(pyfunc)
    if uid is not None:
        return uid
    uid = symbol_uid(internal_function_digest(pyfunc))
    holder = (pyfunc.__code__, tuple(_closure_contents(pyfunc)))
    while not _same(_internal_uids.setdefault(uid, holder), holder):
        uid = _next_uid(uid)
    return uid


def _closure_contents(pyfunc):
    for cell in pyfunc.__closure__ or ():
        try:
            yield cell.cell_contents
        except ValueError:
            yield _EMPTY_CELL


_EMPTY_CELL = object()


def _same(a, b) -> bool:
    try:
        return bool(a == b)
    except Exception:  # (values with elementwise ==, such as arrays)
        log.debug("%s == %s is no truth value: compared by identity", type(a).__name__, type(b).__name__)
        return a is b


def _numbered_by_content(from_function):
    """numba's FunctionIdentity.from_function, numbering by content inside a
    compile of ours (numba/cuda/core/bytecode.py:675,716 number from a
    process-wide counter; the number is in symbol names, as an ABI tag, and
    in the names of variables inlined from the function)."""

    @functools.wraps(from_function)
    def numbered(cls, pyfunc):
        func_id = from_function(cls, pyfunc)
        if active.config is not None:
            func_id.unique_id = _internal_uid(pyfunc)
            func_id.unique_name = f"{func_id.func_qualname}${func_id.unique_id}"
        return func_id

    return numbered


def _record_mangling(numba_mangling_args):
    """numba mangles a record type as its process-wide type number
    (numba/core/types/npytypes.py Record.mangling_args: ``self._code``, a
    counter of types made), which is in the symbol of every function taking
    a record.  Inside a compile of ours it is a number derived from the
    record's key (its fields, offsets, size, alignment): unique as the
    type is, and the same in every process."""

    def mangling_args(self):
        if active.config is None:
            return numba_mangling_args(self)
        key = f"{type(self).__module__}.{type(self).__qualname__}:{self.key!r}"
        return type(self).__name__, (symbol_uid(hashlib.sha256(key.encode()).hexdigest()),)

    return mangling_args


def _stable_const_bytes(insert_const_bytes):
    """numba names a constant byte string after Python's ``hash()`` of it
    (numba/cuda/core/base.py:494), which PYTHONHASHSEED changes; inside a
    compile of ours, after a digest of the bytes."""

    @functools.wraps(insert_const_bytes)
    def insert(self, mod, data, name=None):
        if name is None and active.config is not None:
            name = str(int(hashlib.sha256(bytes(data)).hexdigest()[:15], 16))
        return insert_const_bytes(self, mod, data, name)

    return insert


def _dispatcher_repr(numba_repr):
    """numba names the type of a dispatcher passed as an argument after its
    repr, with the Python function's address (numba/cuda/dispatcher.py:1416),
    in the mangled name of the function it is passed to; a dispatcher numba
    makes inside a compile of ours (a ``make_function`` closure turned into
    one) is named by its function's content number instead
    (`DeviceProxy.__repr__` for the proxies)."""

    @functools.wraps(numba_repr)
    def repr_(self):
        if active.config is None:
            return numba_repr(self)
        address = address_of(_internal_uid(self.py_func))
        return f"{type(self).__name__}(<function {self.py_func.__qualname__} at {address}>)"

    return repr_


def _afresh_inside(run_untyped_passes):
    """numba types an ``@overload(inline="always")`` implementation while it
    types the caller, and keeps the IR for later callers: numbered afresh,
    that IR and the caller's own numbering do not depend on which compile
    made it first."""

    @functools.wraps(run_untyped_passes)
    def run(self, *args, **kwargs):
        if active.config is None:
            return run_untyped_passes(self, *args, **kwargs)
        with numbered_afresh():
            return run_untyped_passes(self, *args, **kwargs)

    return run


def _inlined_by_content(inline_ir):
    """The variables numba inlines are named after the callee's numbered name
    (numba/cuda/core/inline_closurecall.py:63-74, 392): inside a compile of
    ours, after its content number, even where the callee's IR was made (and
    kept, see `_afresh_inside`) by one of numba's own compiles."""

    @functools.wraps(inline_ir)
    def inline(self, caller_ir, block, i, callee_ir, *args, **kwargs):
        func = getattr(callee_ir.func_id, "func", None)
        if active.config is not None and isinstance(func, pytypes.FunctionType):
            func_id = copy.copy(callee_ir.func_id)
            func_id.unique_id = _internal_uid(func)
            func_id.unique_name = f"{func_id.func_qualname}${func_id.unique_id}"
            callee_ir = copy.copy(callee_ir)  # (inline_ir copies its blocks itself)
            callee_ir.func_id = func_id
        return inline_ir(self, caller_ir, block, i, callee_ir, *args, **kwargs)

    return inline


replace_in_numba({
    "numba.cuda.dispatcher:CUDADispatcher.__repr__": _dispatcher_repr,
    "numba.cuda.core.bytecode:FunctionIdentity.from_function": _numbered_by_content,
    "numba.cuda.types:Record.mangling_args": _record_mangling,
    "numba.cuda.core.base:BaseContext.insert_const_bytes": _stable_const_bytes,
    "numba.cuda.core.base:BaseContext._compile_subroutine_no_cache": _fresh_subroutine,
    "numba.cuda.core.base:BaseContext.compile_subroutine": _shared_subroutine,
    "numba.cuda.core.inline_closurecall:InlineWorker.run_untyped_passes": _afresh_inside,
    "numba.cuda.core.inline_closurecall:InlineWorker.inline_ir": _inlined_by_content,
})
