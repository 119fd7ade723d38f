"""The shared tier: entries in Redis, for a team or a cluster.

Enabled with ``GPUCACHE_REDIS_URL`` (or ``KernelCache(redis_url=...)``).  It
stores the same bytes as the disk tier under ``<prefix>:v1:<stage>:<token>``
(``GPUCACHE_REDIS_PREFIX``, default ``gpucache``: one prefix per team or
project on a shared server).

Machine code from the store runs on the reader's GPU, so the tier is signed
by default: with ``GPUCACHE_SECRET`` set, entries are signed (HMAC-SHA256,
see `gpucache_ext.store.signing`) and unsigned, tampered or foreign entries are
refused, counted by reason, and compiled again.  Without a secret the tier
is not made (`UnsignedSharedTier`; a `KernelCache` warns and goes on
without it) unless the user opts in (``allow_unsigned=True`` or
``GPUCACHE_SHARED_UNSIGNED=1``).

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
from typing import Dict, Iterator, Optional, Tuple

from urllib.parse import urlsplit, urlunsplit

from . import settings
from .codec import FORMAT_VERSION, BadEntry, decode, encode, header_entry
from ..keys.stagespec import PERSISTENT_STAGES
from ..errors import GpuCacheError, TierWarning
from .signing import HEAD_BYTES, Keyring, Rejected
from .tiers import Entry, Lookup, Tier, TierRefused, open_note, seal_note

_LIST_LIMIT = 10_000
_DOWN = object()  # what a call to a server that does not answer gives
# a claim is renewed, or released, by its owner alone (checked on the server, at once)
_RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0"
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


class RedisNotInstalled(GpuCacheError, ImportError):
    """A shared tier was asked for (a Redis URL) but redis-py is not installed."""


class UnsignedSharedTier(TierRefused):
    """A shared tier without a secret, and no opt-in to use it unsigned."""


def unsigned_message(url: str) -> str:
    return (f"gpucache_ext: the shared cache at {display_url(url)} is not used: no secret is set "
            "(GPUCACHE_SECRET), and without one anyone who can write to that Redis server could plant "
            "machine code that runs in your kernels. Set GPUCACHE_SECRET (the same value for everyone "
            "who shares the cache) to sign and check its entries; or, to use it unsigned anyway, "
            "GPUCACHE_SHARED_UNSIGNED=1 (allow_unsigned=True).")


def display_url(url: str) -> str:
    """`url` with any password hidden, for messages and reports."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        host = parts.hostname or ""
        if parts.port is not None:
            host = f"{host}:{parts.port}"
        user = f"{parts.username}:***@" if parts.username else ":***@"
        return urlunsplit((parts.scheme, user + host, parts.path, parts.query, parts.fragment))
    except ValueError:
        return "<a Redis URL>"


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

    @classmethod
    def from_settings(cls, settings) -> Optional["RedisTier"]:
        """The shared tier `settings` (`registry.TierSettings`) ask for, at
        their URL; None without one.  Raises `UnsignedSharedTier` where the
        keyring has no secret and unsigned entries are not allowed."""
        if not settings.redis_url:
            return None
        timeout = {} if settings.timeout is None else {"timeout": settings.timeout}
        return cls(settings.redis_url, settings.keyring, prefix=settings.redis_prefix, ttl=settings.redis_ttl,
                   **timeout)

    def __init__(self, url: str, keyring: Optional[Keyring] = None, *, secret=None,
                 allow_unsigned: Optional[bool] = None, prefix: Optional[str] = None,
                 ttl=None, timeout: float = 0.5, retry_after: float = 30.0):
        """`keyring` (else `secret` and `allow_unsigned`), `prefix` and `ttl`
        as `gpucache_ext.store.settings` reads them (None: from the environment).
        Raises `UnsignedSharedTier` for a tier with no secret and no opt-in."""
        self.prefix = settings.redis_prefix(prefix)
        self.ttl = settings.redis_ttl(ttl)
        self._sign_with(keyring if keyring is not None else settings.keyring(secret, allow_unsigned))
        if not self.keyring.signs and not self.keyring.allow_unsigned:
            raise UnsignedSharedTier(unsigned_message(url), "shared", display_url(url),
                                     "no secret (set GPUCACHE_SECRET, or GPUCACHE_SHARED_UNSIGNED=1 to use it "
                                     "unsigned)")
        redis = _import_redis()

        self.url = url
        self.client = redis.Redis.from_url(url, socket_timeout=timeout,
                                           socket_connect_timeout=timeout, retry_on_timeout=False)
        self.retry_after = retry_after
        self.corrupt: Counter = Counter()
        self._down_until = 0.0
        self._warned = False
        self._errors = (redis.RedisError, OSError)

    def __repr__(self):
        return f"<RedisTier {display_url(self.url)} prefix={self.prefix!r} signed={self.signed}>"

    @property
    def location(self) -> str:
        return f"{display_url(self.url)} prefix {self.prefix}"

    def key(self, stage: str, token: str) -> str:
        return f"{self._pattern(stage)}{token}"

    def _pattern(self, stage: str) -> str:
        return f"{self.prefix}:v{FORMAT_VERSION}:{stage}:"

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
                    f"gpucache_ext: the shared cache at {display_url(self.url)} is not answering ({exc}); going on "
                    f"with the local tiers and trying again every {self.retry_after:g} s",
                    TierWarning, stacklevel=3)
            return default

    # -- Tier interface ------------------------------------------------------
    def get(self, stage: str, token: str) -> Optional[Entry]:
        return self.lookup(stage, token).entry

    def lookup(self, stage: str, token: str, *, query: bool = False) -> Lookup:
        data = self._call(lambda: self.client.get(self.key(stage, token)))
        if data is None:
            return Lookup(None)
        body, refused = self._unseal(stage, data, count=not query)
        if body is None:
            return Lookup(None, refused)
        try:
            return Lookup(decode(body, stage, token))
        except BadEntry:
            if not query:
                self.corrupt[stage] += 1
            return Lookup(None)

    def put(self, stage: str, entry: Entry) -> None:
        data = self.keyring.sign(encode(stage, entry))
        self._call(lambda: self.client.set(self.key(stage, entry.token), data, ex=self.ttl))

    def delete(self, stage: str, token: str) -> bool:
        return bool(self._call(lambda: self.client.delete(self.key(stage, token)), 0))

    # -- claims (`gpucache_ext.store.claims`): keys the server expires ------
    keeps_claims = True

    def claim_key(self, stage: str, token: str) -> str:
        return f"{self.prefix}:v{FORMAT_VERSION}:claim:{self.claim_space}:{stage}:{token}"

    def claim(self, stage: str, token: str, owner: str, seconds: float) -> Optional[bool]:
        result = self._call(lambda: self.client.set(self.claim_key(stage, token), owner, nx=True,
                                                    px=max(1, int(seconds * 1000))), _DOWN)
        return None if result is _DOWN else bool(result)

    def renew_claim(self, stage: str, token: str, owner: str, seconds: float) -> bool:
        return bool(self._call(lambda: self.client.eval(_RENEW, 1, self.claim_key(stage, token), owner,
                                                        max(1, int(seconds * 1000))), 0))

    def release_claim(self, stage: str, token: str, owner: str) -> None:
        self._call(lambda: self.client.eval(_RELEASE, 1, self.claim_key(stage, token), owner))

    def get_note(self, key: str) -> Optional[dict]:
        return open_note(self.keyring, key, self._call(lambda: self.client.get(self.key("notes", key))))

    def put_note(self, key: str, note: dict) -> None:
        data = seal_note(self.keyring, key, note)
        self._call(lambda: self.client.set(self.key("notes", key), data, ex=self.ttl))

    def clear(self, stage: str) -> None:
        def clear_all():
            batch = []
            for key in self.client.scan_iter(match=f"{self._pattern(stage)}*", count=500):
                batch.append(key)
                if len(batch) >= 500:
                    self.client.delete(*batch)
                    batch.clear()
            if batch:
                self.client.delete(*batch)
        self._call(clear_all)

    def _keys(self, stage: str, limit: Optional[int] = _LIST_LIMIT):
        """The stage's keys: the first `limit` (a listing for the inspector), or all."""
        def scan():
            keys = []
            for key in self.client.scan_iter(match=f"{self._pattern(stage)}*", count=500):
                keys.append(key)
                if limit is not None and len(keys) >= limit:
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
                yield header_entry(self.keyring.open(data)[0])
            except (Rejected, BadEntry):
                continue

    def stats(self, stage: str) -> Dict[str, int]:
        keys = self._keys(stage)

        def sizes():
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.strlen(key)
            return pipe.execute()
        lengths = self._call(sizes, []) if keys else []
        return {"entries": len(lengths), "bytes": int(sum(lengths)), "corrupt": self.corrupt[stage],
                **self._signing_stats(stage)}

    def signatures(self, stage: str) -> Dict[str, int]:
        """How this stage's entries are signed, from their first bytes (no
        signature checked: see `gpucache_ext.store.signing.Keyring.classify`)."""
        keys = self._keys(stage, limit=None)

        def heads():
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.getrange(key, 0, HEAD_BYTES - 1)
            return pipe.execute()
        return self._classify(self._call(heads, []) if keys else [])

    def raw(self, stage: str) -> Iterator[Tuple[str, bytes]]:
        """(key, stored bytes) of every entry of `stage`, for verify."""
        keys = self._keys(stage, limit=None)
        for start in range(0, len(keys), 200):
            batch = keys[start:start + 200]
            values = self._call(lambda batch=batch: self.client.mget(batch), [])
            for key, data in zip(batch, values):
                if data is not None:
                    yield key.decode() if isinstance(key, bytes) else key, data

    def replace(self, key: str, data: bytes) -> None:
        """Store `data` under `key`, keeping the key's expiry (verify's re-signing)."""
        self._call(lambda: self.client.set(key, data, keepttl=True))
