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

from collections import OrderedDict
from typing import Callable

from .importing import lazy_module
from .sources.snapshot import rebind

# numba-cuda's compiler, imported by the first compile (see `gpucache_ext.cache`)
stages = lazy_module("gpucache_ext.stages")


class DeviceProxies:
    """Device function object and identity -> its proxy; `lock` is the cache's,
    `limit()` how many to keep."""

    def __init__(self, lock, limit: Callable[[], int]):
        self._lock = lock
        self._limit = limit
        self._proxies: "OrderedDict[tuple, stages.DeviceProxy]" = OrderedDict()

    def get(self, dispatcher, identity):
        """The proxy for this device function object and identity: made once,
        then reused.  The proxy holds its dispatcher, so the id stays its own."""
        key = _proxy_key(dispatcher, identity)
        with self._lock:
            proxy = self._proxies.get(key)
            if proxy is None or proxy.original is not dispatcher:
                proxy = self._new(dispatcher, identity, self.get)
            self._proxies.move_to_end(key)
            return proxy

    def fresh(self) -> Callable:
        """A proxy factory that makes new proxies (once per device function in
        the compile that asks), for forced compiles."""
        made = {}

        def proxy_for(dispatcher, identity):
            key = _proxy_key(dispatcher, identity)
            with self._lock:
                if key not in made:
                    made[key] = self._new(dispatcher, identity, proxy_for)
                return made[key]

        return proxy_for

    def clear(self) -> None:
        with self._lock:
            self._proxies.clear()

    def _new(self, dispatcher, identity, proxy_for):
        proxy = stages.DeviceProxy(dispatcher, rebind(identity, proxy_for), identity.digest, identity.declared,
                                   options=identity.options, debug_filename=identity.debug_filename,
                                   def_line=identity.def_line)
        key = _proxy_key(dispatcher, identity)
        self._proxies[key] = proxy
        self._proxies.move_to_end(key)
        while len(self._proxies) > self._limit():
            self._proxies.popitem(last=False)
        return proxy


def _proxy_key(dispatcher, identity) -> tuple:
    """A device proxy's key: the function object (held by the proxy, so its id
    stays its own while the proxy is kept) and the identity it was made from."""
    return id(dispatcher), identity.digest
