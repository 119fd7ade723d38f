"""The shared tier: entries in Redis, for a team or a cluster.

Enabled with ``GPUCACHE_REDIS_URL`` (or ``KernelCache(redis_url=...)``).  It
stores the same bytes as the disk tier under ``gpucache:v1:<stage>:<token>``.
With ``GPUCACHE_SECRET`` set, entries are signed (HMAC-SHA256) and unsigned or
badly signed entries are rejected, so whoever can write to the store cannot
plant code in other users' kernels.

Every call has a short timeout.  When Redis is down or slow the tier warns
once, stays out of the way for a while (``retry_after`` seconds), then tries
again; the memory and disk tiers go on working meanwhile.  Eviction is left to
Redis (``maxmemory-policy allkeys-lru``); ``ttl`` optionally expires entries.

redis-py is an optional dependency (``pip install 'gpucache_ext[redis]'``),
imported only when a shared tier is made; without it, configuring a Redis URL
raises `RedisNotInstalled`, which says so.
"""

from __future__ import annotations

import time
import warnings
from collections import Counter
from typing import Dict, Iterator, Optional

from .codec import PERSISTENT_STAGES, BadEntry, decode, encode, header_entry, sign, verify
from .errors import GpuCacheError
from .tiers import Entry, Tier

_LIST_LIMIT = 10_000


class RedisNotInstalled(GpuCacheError, ImportError):
    """A shared tier was asked for (a Redis URL) but redis-py is not installed."""


def _import_redis():
    try:
        import redis
    except ImportError as exc:
        # (the URL is left out: it may hold a password)
        raise RedisNotInstalled(
            "gpucache_ext: a shared Redis cache is configured (GPUCACHE_REDIS_URL, the magic's "
            "redis_url or KernelCache(redis_url=...)) but the redis package is not installed: "
            "pip install 'gpucache_ext[redis]'; or leave the URL unset (GPUCACHE_REDIS_URL=off) "
            "to go on without the shared tier") from exc
    return redis


class RedisTier(Tier):
    """Entries of the llvm, ptx and cubin stages in a Redis server."""

    name = "shared"
    stages = PERSISTENT_STAGES

    def __init__(self, url: str, secret: Optional[str] = None, timeout: float = 0.5,
                 prefix: str = "gpucache:v1", ttl: Optional[int] = None, retry_after: float = 30.0):
        redis = _import_redis()

        self.url = url
        self.client = redis.Redis.from_url(url, socket_timeout=timeout,
                                           socket_connect_timeout=timeout, retry_on_timeout=False)
        self.secret = secret.encode() if isinstance(secret, str) else secret
        self.prefix = prefix
        self.ttl = ttl
        self.retry_after = retry_after
        self.corrupt: Counter = Counter()
        self.rejected: Counter = Counter()
        self._down_until = 0.0
        self._warned = False
        self._errors = (redis.RedisError, OSError)

    def __repr__(self):
        return f"<RedisTier {self.url} signed={bool(self.secret)}>"

    def key(self, stage: str, token: str) -> str:
        return f"{self.prefix}:{stage}:{token}"

    @property
    def available(self) -> bool:
        return time.monotonic() >= self._down_until

    def _call(self, action, default=None):
        if not self.available:
            return default
        try:
            return action()
        except self._errors as exc:
            self._down_until = time.monotonic() + self.retry_after
            if not self._warned:
                self._warned = True
                warnings.warn(
                    f"gpucache_ext: the shared cache at {self.url} is not answering ({exc}); going on "
                    f"with the local tiers and trying again every {self.retry_after:g} s",
                    RuntimeWarning, stacklevel=3)
            return default

    # -- Tier interface ------------------------------------------------------
    def get(self, stage: str, token: str) -> Optional[Entry]:
        data = self._call(lambda: self.client.get(self.key(stage, token)))
        if data is None:
            return None
        try:
            body = verify(data, self.secret)
        except BadEntry:
            self.rejected[stage] += 1
            return None
        try:
            return decode(body, stage, token)
        except BadEntry:
            self.corrupt[stage] += 1
            return None

    def put(self, stage: str, entry: Entry) -> None:
        data = sign(encode(stage, entry), self.secret)
        self._call(lambda: self.client.set(self.key(stage, entry.token), data, ex=self.ttl))

    def delete(self, stage: str, token: str) -> bool:
        return bool(self._call(lambda: self.client.delete(self.key(stage, token)), 0))

    def clear(self, stage: str) -> None:
        def clear_all():
            batch = []
            for key in self.client.scan_iter(match=f"{self.prefix}:{stage}:*", count=500):
                batch.append(key)
                if len(batch) >= 500:
                    self.client.delete(*batch)
                    batch.clear()
            if batch:
                self.client.delete(*batch)
        self._call(clear_all)

    def _keys(self, stage: str):
        def scan():
            keys = []
            for key in self.client.scan_iter(match=f"{self.prefix}:{stage}:*", count=500):
                keys.append(key)
                if len(keys) >= _LIST_LIMIT:
                    break
            return keys
        return self._call(scan, [])

    def entries(self, stage: str) -> Iterator[Entry]:
        keys = self._keys(stage)
        values = self._call(lambda: self.client.mget(keys), []) if keys else []
        for data in values:
            if data is None:
                continue
            try:
                yield header_entry(verify(data, self.secret))
            except BadEntry:
                continue

    def stats(self, stage: str) -> Dict[str, int]:
        keys = self._keys(stage)

        def sizes():
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.strlen(key)
            return pipe.execute()
        lengths = self._call(sizes, []) if keys else []
        return {"entries": len(lengths), "bytes": int(sum(lengths)),
                "corrupt": self.corrupt[stage], "rejected": self.rejected[stage]}
