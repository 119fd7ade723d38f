"""The device proxies one cache's compiles call their device functions through.

A kernel's device functions are typed from the snapshot its compile hashed,
not from the live function: each is replaced, for numba, by a
`stages.DeviceProxy` of that snapshot (see `sources.rebind`).  A proxy
belongs to one function object and one identity: two functions of one digest
(module twins) never share what either typed from its own snapshot.  The
proxies a cache made are reused by its later compiles (their numba overloads
are compiled once), the latest kept, in proportion to the typing stage's
memory tier; a forced compile makes new ones, so nothing typed or lowered
before is reused.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from typing import Callable

from ...importing import lazy_module
from ...sources.snapshot import rebind

# numba-cuda's compiler, imported by the first compile (see `gpucache_ext.pipeline.cache`)
stages = lazy_module("gpucache_ext.backends.numba_cuda.stages")


class DeviceProxies:
    """Device function object and identity -> its proxy; `lock` is the cache's,
    `limit()` how many to keep."""

    def __init__(self, lock, limit: Callable[[], int]):
        self._lock = lock
        self._limit = limit
        self._proxies: "OrderedDict[tuple, stages.DeviceProxy]" = OrderedDict()

    def get(self, dispatcher, identity, extensions=None):
        """The proxy for this device function object and identity, under the
        numba extensions (the digest of `extensions.extensions_component`,
        None without any) the kernel's typing token holds: made once, then
        reused.  A device function types against numba's extension tables
        too, so what it typed under other registrations is not reused (an
        ``@overload_method`` registered again).  The proxy holds its
        dispatcher, so the id stays its own."""
        key = _proxy_key(dispatcher, identity, extensions)
        with self._lock:
            proxy = self._proxies.get(key)
            if proxy is None or proxy.original is not dispatcher:
                proxy = self._new(dispatcher, identity, self.under(extensions), key)
            self._proxies.move_to_end(key)
            return proxy

    def under(self, extensions) -> Callable:
        """`get` for the device functions of a kernel typed under `extensions`."""
        return functools.partial(self.get, extensions=extensions)

    def fresh(self, extensions=None) -> Callable:
        """A proxy factory that makes new proxies (once per device function in
        the compile that asks), for forced compiles; they replace those kept."""
        made = {}

        def proxy_for(dispatcher, identity):
            key = _proxy_key(dispatcher, identity, extensions)
            with self._lock:
                if key not in made:
                    made[key] = self._new(dispatcher, identity, proxy_for, key)
                return made[key]

        return proxy_for

    def clear(self) -> None:
        with self._lock:
            self._proxies.clear()

    def _new(self, dispatcher, identity, proxy_for, key):
        proxy = stages.DeviceProxy(dispatcher, rebind(identity, proxy_for), identity.digest, identity.declared,
                                   options=identity.options, debug_filename=identity.debug_filename,
                                   def_line=identity.def_line)
        self._proxies[key] = proxy
        self._proxies.move_to_end(key)
        while len(self._proxies) > self._limit():
            self._proxies.popitem(last=False)
        return proxy


def _proxy_key(dispatcher, identity, extensions=None) -> tuple:
    """A device proxy's key: the function object (held by the proxy, so its id
    stays its own while the proxy is kept), the identity it was made from and
    the numba extensions it is typed under."""
    return id(dispatcher), identity.digest, extensions
