"""Device functions inside a compile of ours.

`DeviceProxy` stands in for a ``@cuda.jit(device=True)`` function: it types
the device function once per argument types and lowers it for the kernel
being lowered.  numba's typing is handed implementation keys that resolve
when the lowering config is known (`_LazyImplKey`), and the device functions
numba reaches on its own (library helpers, ``@overload`` implementations) are
routed to proxies of their own (`_routed`).
"""

from __future__ import annotations

import functools
import weakref

from numba.cuda import typing as nbtyping
from numba.cuda import utils as nbutils
from numba.cuda.core.base import OverloadSelector
from numba.cuda.descriptor import cuda_target
from numba.cuda.dispatcher import CUDADispatcher

from ....keys import targets
from ....keys import tokens
from ....keys.config import CompileConfig
from ....errors import CompileError, UnsupportedKernelError, compile_error
from ..extensions import also_forget
from ..locks import compiler_lock
from ..options import device_options
from .compiling import active, compiling_for, lowering_key, replace_in_numba
from .llvm import lower
from .numbering import address_of, proxied_uids, symbol_uid
from .typed import run_typing
from .... import memos


class _Overload:
    """What numba's typing of a call needs from a compiled overload."""

    objectmode = False
    entry_point = None

    def __init__(self, signature):
        self.signature = signature


class DeviceProxy(CUDADispatcher):
    """Stands in for a ``@cuda.jit(device=True)`` function inside a kernel.

    Typing a call types the device function (once per argument types, and per
    target only if typing read it).  Lowering a call lowers it for the kernel
    being lowered: the active `CompileConfig` comes from `active`.
    """

    def __init__(self, original, pyfunc, identity_digest, declared=(), options_from=None, options=None,
                 debug_filename=None, def_line=None):
        # As numba: a device function is lowered with its own options, whatever
        # the calling kernel's (its identity hashes them: `device_options`), and
        # a call to one declared inline="always" is inlined in the caller's IR.
        own = dict(options) if options else device_options(original if options_from is None else options_from)
        self.debug_filename = debug_filename
        self.def_line = def_line
        options = {"device": True, "opt": True, **own}
        super().__init__(pyfunc, targetoptions=options)
        self.own_options = own
        self.original = original
        self.identity_digest = identity_digest
        if original is not None:  # (a user function's snapshot, which numba may inline: `numbering._internal_uid`)
            proxied_uids[pyfunc] = symbol_uid(identity_digest)
        # Declared signatures ((args, return type), ...), one per argument types
        # (`sources.declared_signatures`): as with numba, calls are typed against
        # them (arguments and result cast; a return type None inferred), never per call.
        self.declared = tuple(declared)
        self._typed = targets.VariantMemo()
        # Lowered device functions are registered in numba's (process-wide)
        # target context; unregister them when dropped, or when the proxy goes.
        live_keys = set()
        self._live_keys = live_keys
        self._lazy_keys = {}
        self._lowered = targets.VariantMemo(on_evict=lambda found: _unregister(live_keys, found[0]))
        weakref.finalize(self, _unregister_all, live_keys)

    def __repr__(self):
        """numba names the type of a device function passed as an argument
        after its dispatcher's repr, which is in the mangled name of the
        function it is passed to; numba's has the Python function's address
        (different in every process and compile), this one the identity's
        number in its place."""
        uid = symbol_uid(getattr(self, "identity_digest", None) or "0")
        return f"{type(self).__name__}(<function {self.py_func.__qualname__} at {address_of(uid)}>)"

    def get_call_template(self, args, kws):
        """As numba's, but with declared signatures the call is typed against
        them alone (numba compiled those and turned compiling off)."""
        if not self.declared:
            return super().get_call_template(args, kws)
        pysig, args = self.fold_argument_types(args, kws)
        signatures = [self.compile_device(declared_args).signature for declared_args, _ in self.declared]
        template = nbtyping.make_concrete_template(
            f"CallTemplate({self.py_func.__name__})", key=self.py_func.__name__, signatures=signatures)
        return template, nbutils.pysignature(self.py_func), args, {}

    def compile_device(self, args, return_type=None):
        config = active.config
        if config is None:
            raise UnsupportedKernelError(
                f"device function {self.py_func.__qualname__} was called outside a gpucache_ext compile"
            )
        args = tuple(args)
        typed = self._typed.get(args, config.cc)
        if typed is None:
            declared = dict(self.declared)
            if self.declared and args not in declared:
                from ....pipeline.results import short_signature

                raise CompileError(self.py_func.__qualname__, "typing",
                                   f"no declared signature takes {short_signature(args)}")
            typed = run_typing(self.py_func, args, config, kernel=False,
                               uid=symbol_uid(self.identity_digest),
                               qualname=self.py_func.__qualname__,
                               return_type=declared.get(args, return_type),
                               inline=self.own_options["inline"], debug_filename=self.debug_filename,
                               def_line=self.def_line)
            self._typed.put(args, typed.target_reads, typed)
        targets.note(typed.target_reads)
        if args not in self.overloads:
            self.overloads[args] = _Overload(nbtyping.signature(typed.return_type, *args))
        return self.overloads[args]

    def lowering_config(self, config: CompileConfig) -> CompileConfig:
        """The kernel's config with this device function's own lowering options."""
        own = self.own_options
        return config.replace(fastmath=own["fastmath"], debug=own["debug"], lineinfo=own["lineinfo"])

    def get_overload(self, args):
        """The implementation key for the call being lowered, for the active config."""
        config = self.lowering_config(active.config)
        args = tuple(args)
        key = (args, lowering_key(config))
        found = self._lowered.get(key, config.cc)
        if found is not None:
            impl_key, reads = found
            targets.note(reads)
            return impl_key
        self.compile_device(args)
        typed = self._typed.get(args, config.cc)
        with compiling_for(config, "lowering"), targets.track() as reads:
            try:
                cres = lower(typed, config, forceinline=self.own_options["forceinline"])
            except Exception as exc:
                raise compile_error(self.py_func.__qualname__, "llvm", exc, self.py_func) from exc
        reads = frozenset(reads) | typed.target_reads
        impl_key = _DeviceImplKey(self.py_func.__qualname__)
        cuda_target.target_context.insert_user_function(impl_key, cres.fndesc, [cres.library])
        self._live_keys.add(impl_key)
        self._lowered.put(key, reads, (impl_key, reads))
        return impl_key


class _LazyImplKey:
    """The implementation of a call typed before its lowering config is known.

    numba's @overload templates ask for the implementation while typing and
    keep it in process-wide tables keyed by argument types alone.  Typed IR is
    shared by every lowering config, so the key handed to numba stands for
    "the proxy's lowering of these arguments for whichever config lowers the
    call": `_LazySelector` resolves it then.
    """

    def __init__(self, proxy, args):
        self.proxy = proxy
        self.args = args

    def __repr__(self):
        return f"<lazily lowered {self.proxy.py_func.__qualname__}{self.args}>"


class _LazySelector(OverloadSelector):
    """numba's implementation table entry for a `_LazyImplKey`."""

    def __init__(self, lazy: _LazyImplKey):
        super().__init__()
        self.lazy = lazy

    def find(self, sig):  # never cached: the answer depends on the active config
        impl_key = self.lazy.proxy.get_overload(self.lazy.args)
        return cuda_target.target_context._defns[impl_key].find(sig)


def _lazy_key(proxy, args):
    key = proxy._lazy_keys.get(args)
    if key is None:
        key = proxy._lazy_keys[args] = _LazyImplKey(proxy, args)
        cuda_target.target_context._defns[key] = _LazySelector(key)
        proxy._live_keys.add(key)
    return key


# Device functions numba reaches on its own while a kernel compiles: library
# helpers (cuda.random), @overload and register_jitable implementations in
# libraries.  numba would compile each for the current GPU with its own flags
# and cache it by argument types; here each gets a proxy, typed for the
# kernel's target and lowered with its config, like the kernel's own device
# functions.  Library code changes only with its version (in the token).
_library_proxies: "weakref.WeakKeyDictionary[CUDADispatcher, DeviceProxy]" = memos.memo(
    "backends.numba_cuda.stages.device._library_proxies", weakref.WeakKeyDictionary())


def forget_library_proxies() -> None:
    """Drop every library device function's proxy: what they typed against
    numba's extension tables is stale once user registrations change
    (`extensions.forget_stale_builds`: a library's function calling a method
    a user's @overload_method defines)."""
    with compiler_lock():
        _library_proxies.clear()


also_forget(forget_library_proxies)


def _route(dispatcher) -> "DeviceProxy":
    from ....sources import library_identity_digest

    pyfunc = dispatcher.py_func
    digest = library_identity_digest(pyfunc)
    if digest is None:
        # user code numba compiles on its own while compiling the kernel: an @overload's
        # implementation (what built it is in every typing token: `extensions`), keyed by
        # everything it reads, as a device function is
        from ....sources import identify

        digest = tokens.digest(["user function numba compiles", pyfunc.__module__, pyfunc.__qualname__,
                                identify(pyfunc, with_location=False).digest])
    fresh = active.fresh
    with compiler_lock():
        proxy = _library_proxies.get(dispatcher)
        if proxy is None or proxy.identity_digest != digest or (
                fresh is not None and dispatcher not in fresh):
            proxy = DeviceProxy(None, pyfunc, digest, options_from=dispatcher)
            _library_proxies[dispatcher] = proxy
            if fresh is not None:
                fresh.add(dispatcher)
        return proxy


def _routed(name):
    """What makes a CUDADispatcher method that, inside a gpucache_ext compile,
    hands the call to the dispatcher's proxy (numba's own outside one)."""
    return functools.partial(_route_method, name)


def _route_method(name, original):
    @functools.wraps(original)
    def method(self, *args, **kwargs):
        if active.config is None or isinstance(self, DeviceProxy):
            return original(self, *args, **kwargs)
        proxy = _route(self)
        if name == "get_overload" and active.phase == "typing":
            proxy.compile_device(tuple(args[0]))
            return _lazy_key(proxy, tuple(args[0]))
        return getattr(proxy, name)(*args, **kwargs)

    return method


def _unregister(live_keys, impl_key):
    if impl_key in live_keys:
        live_keys.discard(impl_key)
        cuda_target.target_context.remove_user_function(impl_key)


def _unregister_all(live_keys):
    for impl_key in list(live_keys):
        _unregister(live_keys, impl_key)


class _DeviceImplKey:
    """Key of one lowered device function in numba's target context."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"<lowered device function {self.name}>"


_DISPATCHER = "numba.cuda.dispatcher:CUDADispatcher"

replace_in_numba({
    f"{_DISPATCHER}.get_call_template": _routed("get_call_template"),
    f"{_DISPATCHER}.compile_device": _routed("compile_device"),
    f"{_DISPATCHER}.get_overload": _routed("get_overload"),
})
