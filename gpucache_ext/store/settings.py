"""The shared tier's settings, read in one place for every way a cache is
built: `KernelCache(...)`, `KernelCache.from_environment`, the magic and the
``gpucache`` command.  A value passed explicitly wins; None reads the
environment:

=============================  ==============================================
``GPUCACHE_SECRET``            signs every entry the disk and shared tiers write,
                               and is required on every entry they read
``GPUCACHE_SECRET_PREVIOUS``   a retired secret still accepted for reading
                               (rotation: ``gpucache verify --fix`` signs its
                               entries again with ``GPUCACHE_SECRET``)
``GPUCACHE_SHARED_UNSIGNED``   ``1``: use a shared tier without a secret
                               (anyone who can write to the server can then
                               change your kernels); otherwise such a tier is
                               not used, with a warning
``GPUCACHE_REDIS_PREFIX``      the first part of every key (default
                               ``gpucache``): one per team or project on a
                               shared server
``GPUCACHE_REDIS_TTL``         expire shared entries after this long
                               (``3600``, ``12h``, ``7d``; default: never,
                               Redis evicts)
``GPUCACHE_WAIT``              the longest a process waits for another
                               process's build of an entry it misses
                               (seconds, ``90s``, ``5m``; default 120; ``0``:
                               never wait, build at once)
``GPUCACHE_CLAIM_SECONDS``     how long a claim on a build lives unless its
                               builder renews it (default 10): a builder that
                               dies frees its entries within this time
=============================  ==============================================
"""

from __future__ import annotations

import os
import re
from typing import Mapping, Optional, Sequence, Tuple, Union

from ..errors import GpuCacheError
from .claims import CLAIM_SECONDS as DEFAULT_CLAIM_SECONDS, WAIT_SECONDS
from .signing import Keyring, Secret

SECRET = "GPUCACHE_SECRET"
SECRET_PREVIOUS = "GPUCACHE_SECRET_PREVIOUS"
SHARED_UNSIGNED = "GPUCACHE_SHARED_UNSIGNED"
REDIS_PREFIX = "GPUCACHE_REDIS_PREFIX"
REDIS_TTL = "GPUCACHE_REDIS_TTL"
WAIT = "GPUCACHE_WAIT"
CLAIM_SECONDS = "GPUCACHE_CLAIM_SECONDS"
DEFAULT_PREFIX = "gpucache"

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")
_PREFIX_RE = re.compile(r"[A-Za-z0-9_.:/@+-]{1,200}")
_AGES = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class SettingError(GpuCacheError, ValueError):
    """A setting (an environment variable or an argument) has a value it does not accept."""


SecretArgument = Union[None, Secret, Sequence[Secret]]


def _env(env: Optional[Mapping[str, str]]) -> Mapping[str, str]:
    return os.environ if env is None else env


def secrets(given: SecretArgument = None, env: Optional[Mapping[str, str]] = None) -> Tuple[Secret, ...]:
    """The secrets, the one that signs first: `given` (a secret, or several
    for rotation; ``""`` or ``()``: none, whatever the environment says), else
    ``GPUCACHE_SECRET`` and ``GPUCACHE_SECRET_PREVIOUS``."""
    if given is None:
        env = _env(env)
        if env.get(SECRET_PREVIOUS) and not env.get(SECRET):
            raise SettingError(f"{SECRET_PREVIOUS} is set but {SECRET} is not: {SECRET_PREVIOUS} is only "
                               f"read with, never signed with; set {SECRET} to the secret that signs "
                               f"(the new one, during a rotation)")
        return tuple(s for s in (env.get(SECRET), env.get(SECRET_PREVIOUS)) if s)
    if isinstance(given, (str, bytes, bytearray)):
        return (given,) if given else ()
    return tuple(s for s in given if s)


def allow_unsigned(given: Optional[bool] = None, env: Optional[Mapping[str, str]] = None) -> bool:
    """`given`, else ``GPUCACHE_SHARED_UNSIGNED`` (1/true/yes, or 0/false/no)."""
    if given is not None:
        return bool(given)
    value = _env(env).get(SHARED_UNSIGNED, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise SettingError(f"{SHARED_UNSIGNED}={value!r} is invalid; use 1 to use a shared tier without a "
                       "secret, or 0 (the default) to require one")


def keyring(given: SecretArgument = None, unsigned: Optional[bool] = None,
            env: Optional[Mapping[str, str]] = None) -> Keyring:
    """The `Keyring` these settings give."""
    return Keyring(secrets(given, env), allow_unsigned(unsigned, env))


def redis_prefix(given: Optional[str] = None, env: Optional[Mapping[str, str]] = None) -> str:
    """`given`, else ``GPUCACHE_REDIS_PREFIX``, else ``gpucache``; checked."""
    where = "redis_prefix"
    if given is None:
        given, where = _env(env).get(REDIS_PREFIX) or DEFAULT_PREFIX, REDIS_PREFIX
    if not isinstance(given, str) or not _PREFIX_RE.fullmatch(given):
        raise SettingError(f"{where}={given!r} is invalid: use letters, digits and - _ . : / @ + "
                           "(no spaces or wildcards), e.g. 'team-a'; keys read <prefix>:v1:<stage>:<token>")
    return given


def redis_ttl(given: Union[None, int, float, str] = None, env: Optional[Mapping[str, str]] = None) -> Optional[int]:
    """Seconds before a shared entry expires: `given`, else ``GPUCACHE_REDIS_TTL``
    (``3600``, ``90m``, ``12h``, ``7d``; empty, ``0`` or ``off``: never)."""
    where = "redis_ttl"
    if given is None:
        given, where = _env(env).get(REDIS_TTL, ""), REDIS_TTL
    seconds = _seconds(given, where, 0.0, "3600 or 7d",
                       "give seconds or an age: 3600, 90m, 12h or 7d (empty or 0: entries never expire)")
    return max(1, int(round(seconds))) if seconds else None


def _seconds(given, where: str, empty: float, example: str, text_hint: str) -> float:
    """`given` (a number, or text: ``90``, ``90s``, ``5m``, ``12h``, ``7d``) as
    seconds, checked: `empty` for an empty text, 0 for ``off``."""
    if isinstance(given, bool):
        raise SettingError(f"{where}={given!r} is invalid; give seconds, e.g. {example}")
    if isinstance(given, (int, float)):
        seconds = float(given)
    else:
        text = str(given).strip().lower()
        if text == "":
            return empty
        if text in ("off", "none", "never"):
            return 0.0
        match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smhdw]?)", text)
        if not match:
            raise SettingError(f"{where}={given!r} is invalid; {text_hint}")
        seconds = float(match.group(1)) * _AGES[match.group(2)]
    if not seconds >= 0:
        raise SettingError(f"{where}={given!r} is invalid; give a positive number of seconds")
    return seconds


def wait_seconds(given: Union[None, int, float, str] = None, env: Optional[Mapping[str, str]] = None) -> float:
    """The longest a process waits for another's build of an entry: `given`,
    else ``GPUCACHE_WAIT``, else 120 s; 0 (or ``off``): never wait."""
    if given is None:
        given, where = _env(env).get(WAIT, ""), WAIT
    else:
        where = "wait"
    return _seconds(given, where, WAIT_SECONDS, "120", "give seconds, e.g. 120 (or 90s, 5m; 0: never wait)")


def claim_seconds(given: Union[None, int, float, str] = None, env: Optional[Mapping[str, str]] = None) -> float:
    """How long a claim lives unless renewed: `given`, else
    ``GPUCACHE_CLAIM_SECONDS``, else 10 s; at least 0.1 s."""
    where, value = ("claim_seconds", given) if given is not None else \
        (CLAIM_SECONDS, _env(env).get(CLAIM_SECONDS, ""))
    seconds = _seconds(value, where, DEFAULT_CLAIM_SECONDS, "10", "give seconds, e.g. 10")
    if seconds < 0.1:
        raise SettingError(f"{where}={value!r} is invalid; a claim lives at least 0.1 s (default 10)")
    return seconds
