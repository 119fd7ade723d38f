"""numba's extension API in user code, as an input of typing.

numba keeps what code registers through its extension API in process-wide
tables, and reads them while it types and lowers any kernel:

* typing templates: ``@overload``, ``@overload_method``,
  ``@overload_attribute``, ``@intrinsic``, ``type_callable``, ``infer``,
  ``infer_global``, ``infer_getattr``, the templates
  ``make_attribute_wrapper`` makes (the typing contexts' registries);
* lowering functions: ``lower_builtin``, ``lower_cast``, ``lower_getattr``,
  ``lower_setattr``, constants (the target contexts' registries);
* ``typeof_impl`` handlers, and data models (``register_model``,
  ``models.register_default``).

None of it is a global the kernel reads, yet any of it can change what a
kernel compiles to.  So every registration that involves user code (a
function or class defined in a cell or a file outside the installed
packages, also when numba made the template around it) is described
exactly, in the order numba registered it: user functions by their full
identity (`sources.identify`: code, closures, defaults and the globals they
read), classes by their code and attributes, numba types by class and name.
The descriptions make one component that enters every kernel's typing token
(`extensions_component`): conservatively, any kernel may reach any
registration, so a change recompiles every kernel (and their later stages),
and a new process with the same registrations hits.  Registrations made by
libraries are keyed by those libraries' versions, as ever.

numba also memoises, per template and argument types, what a user
``@overload`` or ``@intrinsic`` built; those memos are emptied whenever the
registrations change (`forget_stale_builds`), and so is what the modules
above built under them and registered with `also_forget`, so that what is
compiled is what was hashed.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import types
from typing import Any, Callable, Dict, List, Optional, Tuple

from ...errors import UnsupportedKernelError
from ...sources.describe import describe_registration as describe
from ...keys.tokens import Component, digest
from ...sources.usercode import numba_code, numba_named, touches_user_code
from ... import memos

# ---------------------------------------------------------------------------
# What numba's tables hold


_TYPING_KINDS = ("functions", "attributes", "globals")
_LOWERING_KINDS = ("functions", "getattrs", "setattrs", "casts", "constants")


def _containers() -> List[Tuple[str, Any]]:
    """(label, table) for each of numba's extension tables: a registry's list
    (which only grows) or a dict of handlers (a new registration for a key
    replaces its handler)."""
    found: List[Tuple[str, Any]] = []
    for registry, prefix in _registries():
        found += [(f"{prefix} {kind}", table) for kind in (_TYPING_KINDS if prefix == "typing" else _LOWERING_KINDS)
                  if isinstance(table := getattr(registry, kind, None), list)]
    return found + _singledispatch_tables() + _model_tables()


def _registries() -> List[Tuple[Any, str]]:
    """(registry, "typing" or "lowering") for each of numba's typing and
    lowering registries, in an order of their own: those of the loaded
    modules of numba and numba-cuda by module and name, then those the CUDA
    contexts have installed from elsewhere (a user's own ``Registry``).

    Read without refreshing the contexts: a refresh loads numba's remaining
    declaration modules (fp16, bf16, the NumPy and cmath declarations...),
    hundreds of milliseconds a process where every stage is cached would
    spend for nothing, and what it adds is numba's own code.  A module no
    one has loaded holds no registration of user code; where user code
    registers (``@overload``, ``lower_builtin``, a module's ``registry``) is
    loaded, and found here, refreshed or not, in the same order."""
    from numba.cuda.descriptor import cuda_target

    global _FOUND_REGISTRIES
    contexts = ((cuda_target.typing_context, "typing"), (cuda_target.target_context, "lowering"))
    # (modules load, contexts install: a registry is added only so; the scan of the modules is
    # the cost, made again when either moved)
    key = (len(sys.modules), *(len(context._registries) for context, _ in contexts))
    if _FOUND_REGISTRIES is not None and _FOUND_REGISTRIES[0] == key:
        return _FOUND_REGISTRIES[1]
    kinds = []
    for module_name, prefix in (("numba.cuda.typing.templates", "typing"), ("numba.core.typing.templates", "typing"),
                                ("numba.cuda.core.imputils", "lowering"), ("numba.core.imputils", "lowering")):
        cls = getattr(sys.modules.get(module_name), "Registry", None)
        if isinstance(cls, type):
            kinds.append((cls, prefix))
    classes = tuple(cls for cls, _ in kinds)
    found: Dict[int, Tuple[Any, str]] = {}
    for name in sorted(name for name in list(sys.modules) if numba_named(name)):
        for value in _module_registries(name, sys.modules.get(name), classes):
            if id(value) not in found:
                found[id(value)] = (value, next(prefix for cls, prefix in kinds if isinstance(value, cls)))
    for context, prefix in contexts:
        for registry in list(context._registries):
            if id(registry) not in found:
                found[id(registry)] = (registry, prefix)
    _FOUND_REGISTRIES = (key, list(found.values()))
    return _FOUND_REGISTRIES[1]


_FOUND_REGISTRIES: Optional[Tuple[tuple, list]] = None  # (what `_registries` was keyed on, its answer)


def _module_registries(name: str, module, classes: tuple) -> list:
    """The registries `module` holds (instances of `classes`), by attribute
    name; a module is read again only where its namespace grew (a module
    that was loading when last read) or the classes asked for changed, so a
    cell that imports something costs the scan of what it loaded alone.  (A
    registry only has an effect once a context installs it: those are read
    from the contexts themselves, whatever a module holds.)"""
    namespace = getattr(module, "__dict__", None) or {}
    known = _MODULE_REGISTRIES.get(name)
    if known is not None and known[0] is module and known[1] == len(namespace) and known[2] == classes:
        return known[3]
    members = [value for _, value in sorted(((str(key), value) for key, value in list(namespace.items())
                                            if isinstance(value, classes)), key=lambda item: item[0])]
    _MODULE_REGISTRIES[name] = (module, len(namespace), classes, members)
    return members


# module name -> (the module then, its namespace's size then, the classes asked for, its registries)
_MODULE_REGISTRIES: Dict[str, Tuple[Any, int, tuple, list]] = memos.memo(
    "backends.numba_cuda.extensions._MODULE_REGISTRIES", {})


def _entries(table) -> list:
    return list(table.items()) if isinstance(table, dict) else list(table)


def _state(containers) -> tuple:
    """What tells the tables apart cheaply: each list's length, each dict's
    handlers."""
    return tuple((id(table), len(table)) if isinstance(table, list) else (id(table), tuple(map(id, table.values())))
                 for _, table in containers)


def _singledispatch_tables():
    tables = []
    for module_name in ("numba.cuda.typing.typeof", "numba.core.typing.typeof"):
        module = sys.modules.get(module_name)
        typeof_impl = getattr(module, "typeof_impl", None)
        if typeof_impl is not None:
            tables.append((f"typeof_impl ({module_name})", typeof_impl.registry))
    return tables


def _model_tables():
    tables = []
    for module_name, attribute in (("numba.cuda.models", "cuda_data_manager"),
                                   ("numba.cuda.datamodel", "default_manager"),
                                   ("numba.core.datamodel", "default_manager")):
        manager = getattr(sys.modules.get(module_name), attribute, None)
        handlers = getattr(manager, "_handlers", None)
        if isinstance(handlers, dict):
            tables.append((f"data models ({module_name}.{attribute})", handlers))
    return tables


# entry identity -> whether it touches user code (registries only grow; a
# table of handlers is keyed by its (key, handler) pair, which a new
# registration for the same key replaces)
_USER: Dict[Tuple[int, ...], bool] = memos.memo("backends.numba_cuda.extensions._USER", {})
# what the memo's ids name, kept alive so that no id is reused (dropped with it)
_KEEP: List[Any] = memos.memo("backends.numba_cuda.extensions._KEEP", [])


def _key(entry) -> Tuple[int, ...]:
    return (id(entry),) if not isinstance(entry, tuple) or len(entry) != 2 else (id(entry[0]), id(entry[1]))


def user_registrations() -> List[Tuple[str, Any]]:
    """(table, entry) for each registration that involves user code, but for
    those numba made while the cache compiled (`derived_during`)."""
    return [(label, entry) for label, entry, _, _ in _user_registrations()]


def _user_registrations() -> List[Tuple[str, Any, int, int]]:
    """(label, entry, the index of its table, how many of a library's
    registrations precede it in its table) of each user registration; what
    numba derived while the cache compiled counts as neither."""
    global _LAST
    containers = _containers()
    state = _state(containers)
    if _LAST is not None and _LAST[0] == state:  # (nothing registered since: the same answer)
        return list(_LAST[1])
    found = []
    for index, (label, table) in enumerate(containers):
        entries = _entries(table)
        users = []  # (place in the table, entry)
        for place, entry in enumerate(entries):
            key = _key(entry)
            user = _USER.get(key)
            if user is None:
                user = _USER[key] = key not in _DERIVED and touches_user_code(entry)
                _KEEP.append(entry)
            if user:
                users.append((place, entry))
        # (a library's registrations are told from numba's own between the user's first and last alone)
        libraries, since = 0, users[0][0] if users else 0
        for place, entry in users:
            libraries += sum(1 for other in entries[since:place] if _a_librarys(label, other))
            since = place + 1
            found.append((label, entry, index, libraries))
    _LAST = (state, found)
    return list(found)


def _a_librarys(label: str, entry) -> bool:
    """Whether a registration is another library's: neither the user's, nor
    numba's derived from what the tokens hold, nor numba's own (what
    implements it is numba's code: the declarations numba loads as it first
    compiles); memoised with `_USER`."""
    key = _key(entry)
    if _USER.get(key, True) or key in _DERIVED:
        return False
    known = _NUMBAS.get(key)
    if known is None:
        known = _NUMBAS[key] = _all_numbas(_implementation(label, entry), 0)
    return not known


def _implementation(label: str, entry) -> tuple:
    """What implements a registration, without what it is looked up by."""
    kind = label.split(" ")
    if kind[0] == "lowering" and isinstance(entry, tuple):
        return entry[:1]
    if isinstance(entry, tuple):
        return entry[1:]  # (a typed global's type, a handler table's handler)
    return (entry,)


def _all_numbas(parts, depth: int) -> bool:
    """Whether every function in `parts` (templates by their body less their
    key, numba function types by their templates, dispatchers and intrinsics
    by their function) is numba's code, and there is one."""
    found = False
    for part in parts:
        part = getattr(part, "__func__", part)
        inner = getattr(part, "py_func", None) or getattr(part, "_defn", None)
        if isinstance(part, types.FunctionType) or isinstance(inner, types.FunctionType):
            if not numba_code((inner if isinstance(inner, types.FunctionType) else part).__code__.co_filename):
                return False
            found = True
        elif isinstance(part, type) and depth < 3:
            body = [value for name, value in vars(part).items() if name != "key"]
            if numba_named(part.__module__):
                found = True
            elif body and not _all_numbas(body, depth + 1):
                return False
            else:
                found = found or bool(body)
        elif isinstance(getattr(part, "templates", None), (list, tuple)) and depth < 3:
            if not _all_numbas(part.templates, depth + 1):
                return False
            found = True
    return found


_NUMBAS: Dict[Tuple[int, ...], bool] = memos.memo("backends.numba_cuda.extensions._NUMBAS", {})
_LAST: Optional[Tuple[tuple, list]] = None  # the tables' `_state` and their user registrations then
# keys of the entries numba registered while the cache compiled
_DERIVED: set = memos.state("backends.numba_cuda.extensions._DERIVED", set(),
                             "which of numba's table entries its own runs made: a fact no later read can tell")


class _Watch:
    """One `derived_during` block: the tables as they were before numba's
    pipeline first ran in it (None until then)."""

    __slots__ = ("before",)

    def __init__(self):
        self.before = None


_watching = threading.local()  # per thread: the open `derived_during` blocks, innermost last


@contextlib.contextmanager
def derived_during():
    """Around a compile of the cache's: what numba registers meanwhile is not
    an input but a consequence of the registrations the tokens hold (numba
    registers a lowering for an ``@overload_attribute`` each time it makes its
    template, one for an ``@intrinsic`` per signature it types), and is left
    out of them.  Registrations made by user code between compiles count.

    Numba registers them only as its pipeline runs (typing, lowering), so
    the tables are read when it is first about to run in the block
    (`numba_runs`), not before: a compile that finds every stage cached
    reads them no more than its tokens need."""
    if not _USER:  # (no compile has looked at the tables yet: nothing user-made to tell apart)
        yield
        return
    watches = getattr(_watching, "blocks", None)
    if watches is None:
        watches = _watching.blocks = []
    watch = _Watch()
    watches.append(watch)
    try:
        yield
    finally:
        watches.remove(watch)
        if watch.before is not None:
            _derive(watch.before)


def numba_runs() -> None:
    """numba's pipeline is about to run (typing or lowering) in this thread:
    the open `derived_during` blocks that have not read numba's tables yet
    read them now."""
    watches = getattr(_watching, "blocks", None)
    if not watches or all(watch.before is not None for watch in watches):
        return
    before = {id(table): len(table) if isinstance(table, list) else dict(table) for _, table in _containers()}
    for watch in watches:
        if watch.before is None:
            watch.before = before


def _derive(before) -> None:
    """The entries added to numba's tables since `before` are derived, not user-made."""
    for _, table in _containers():
        then = before.get(id(table))
        if isinstance(table, list):
            added = table[then:] if then is not None else list(table)
        else:
            added = [(key, value) for key, value in list(table.items())
                     if then is None or then.get(key, then) is not value]
        for entry in added:
            key = _key(entry)
            if key not in _USER:
                _DERIVED.add(key)
                _USER[key] = False
                _KEEP.append(entry)


def extensions_component(environment: Optional[str] = None) -> Optional[Component]:
    """The component every typing token gets while user code has numba
    extension registrations (None without any: tokens as before).
    `environment`: the digest of the token's environment components (see
    `environment`), what numba's memos of user builds were built under too."""
    found = _user_registrations()
    if not found:
        if environment is not None:  # (what numba built while typing library code read it)
            forget_stale_builds([], environment)
        return None
    tables: Dict[int, list] = {}
    for label, entry, index, libraries in found:
        try:
            described = (describe(entry), describe(lookup_key(label, entry)), libraries)
        except UnsupportedKernelError as exc:
            raise UnsupportedKernelError(
                f"a numba extension registered in user code ({label}: {_name(entry)}) reads what the "
                f"cache cannot key: {exc}") from None
        tables.setdefault(index, [label, []])[1].append(described)
    described = [[label, without_repeats(entries)] for label, entries in tables.values()]
    registered = [(label, entry) for label, entry, _, _ in found]
    forget_stale_builds(registered, digest([described, environment]))
    return Component(digest(described), f"numba extensions in user code: {len(registered)} registrations")


def lookup_key(label: str, entry) -> Any:
    """What numba looks a registration up by in table `label`, widely enough
    that registrations that may answer the same lookup share it: a typing
    template's key (the function, or the type whose attributes it types), a
    typed global's value, a lowering's function (whatever its types: a
    generic signature matches where a specific one does), an attribute's
    name (whatever its type), and one key for all casts and all constants; a
    handler table's entry is its own key."""
    kind = label.split(" ")
    if kind[0] == "typing" and kind[1] in ("functions", "attributes"):
        return ["template key", getattr(entry, "key", entry)]
    if kind[0] == "typing" and isinstance(entry, tuple) and entry:
        return ["global", entry[0]]
    if kind[0] == "lowering" and isinstance(entry, tuple) and len(entry) > 1:
        if kind[1] in ("functions", "getattrs", "setattrs"):  # ((impl, function or attribute name, types))
            return [kind[1], entry[1]]
        return [kind[1]]
    return ["entry", entry]


def without_repeats(entries: list) -> list:
    """A table's user registrations, each as (its description, its
    `lookup_key`'s, how many of a library's registrations precede it in the
    table), less those that change no lookup: numba picks among a key's
    registrations the first that fits (typing functions and attributes) or
    the last (typed globals, lowerings), so tables that differ by such
    entries act alike, get one token, and a notebook run twice in one kernel
    hits.  Two rules, both sound for either order, where no library
    registered anything between the entries compared (a library's entry for
    the same key could be picked between them):

    * a block S directly followed by an equal block S' (a cell run again):
      P + S + S' + Q acts as P + S + Q (an entry of S' is picked only where
      its equal in S would be);
    * an entry equal to an earlier one with no registration for its key in
      between (``twice``, ``thrice``, then ``twice`` again: a notebook's
      second run): first-fit never reaches the later one before its equal,
      and last-fit picks one of the two equals either way.

    Returns the descriptions kept, in order."""
    return [entries[at][0] for at in kept_entries(entries)]


def kept_entries(entries: list) -> List[int]:
    """The places of the entries `without_repeats` keeps."""
    entries = list(enumerate(entries))
    at = 0
    while at < len(entries):
        for size in range(1, (len(entries) - at) // 2 + 1):
            if [e[0] for _, e in entries[at:at + size]] == [e[0] for _, e in entries[at + size:at + 2 * size]] \
                    and entries[at][1][2] == entries[at + 2 * size - 1][1][2]:
                del entries[at + size:at + 2 * size]
                at = 0  # (the shorter table may repeat anew, in a block that begins before)
                break
        else:
            at += 1
    kept: List[int] = []
    last_for_key: Dict[str, Tuple[Any, int]] = {}  # a key's digest -> its last entry kept, and its place
    for place, (described, key, libraries) in entries:
        key_digest = digest(key)
        if last_for_key.get(key_digest) == (described, libraries):
            continue
        last_for_key[key_digest] = (described, libraries)
        kept.append(place)
    return kept


def _name(entry) -> str:
    for part in entry if isinstance(entry, tuple) else (entry,):
        name = getattr(part, "__qualname__", None) or getattr(part, "__name__", None)
        if name:
            return name
    return type(entry).__name__


_BUILT_FOR: Optional[str] = None  # the registrations' digest numba's memos of user builds hold
_ALSO_FORGET: List[Callable[[], None]] = memos.state(
    "backends.numba_cuda.extensions._ALSO_FORGET", [],
    "what else drops builds typed under the registrations, as the modules above registered it")


def also_forget(forget: Callable[[], None]) -> None:
    """Have `forget` called whenever `forget_stale_builds` forgets numba's
    memos: what a module above this one built under the registrations (the
    stages' proxies of library device functions) registers itself here, as it
    loads, so that this module names none of them."""
    if forget not in _ALSO_FORGET:
        _ALSO_FORGET.append(forget)


def forget_stale_builds(registered, current: str) -> None:
    """numba memoises, per template and argument types, what a user
    ``@overload``, ``@overload_method``, ``@overload_attribute`` or
    ``@intrinsic`` built (the implementation and its compiled dispatcher);
    built from registrations (or environment variables, see `environment`)
    that have since changed, it is forgotten, so that the next compile
    builds from what was hashed."""
    global _BUILT_FOR
    if _BUILT_FOR == current:
        return
    for _, entry in registered:
        for part in entry if isinstance(entry, tuple) else (entry,):
            # a template, or the function type of a global (``types.Function(template)``)
            for template in (part,) if isinstance(part, type) else getattr(part, "templates", ()) or ():
                for memo in ("_impl_cache", "_compiled_overloads", "_inline_overloads", "_overload_cache"):
                    table = vars(template).get(memo) if isinstance(template, type) else None
                    if isinstance(table, dict):
                        table.clear()
    for forget in _ALSO_FORGET:
        forget()
    _BUILT_FOR = current
