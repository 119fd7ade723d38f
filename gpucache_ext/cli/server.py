"""The shared (Redis) tier as the commands reach it: its URL, the tier checked
to answer, and its warnings left to the command to say."""

from __future__ import annotations

import contextlib
import os
import warnings
from typing import Optional
from urllib.parse import urlsplit

from ..store import settings
from ..store.disk import OFF_VALUES
from ..store.shared import display_url
from .output import CommandError

# the command reads whole stages at once: a longer timeout than a compile's lookups
_REDIS_TIMEOUT = 5.0


def redis_url(args) -> Optional[str]:
    """The shared cache's URL: --redis-url, else GPUCACHE_REDIS_URL; None when
    unset or off (read as `KernelCache.from_environment` reads it)."""
    url = args.redis_url if args.redis_url is not None else os.environ.get("GPUCACHE_REDIS_URL")
    if url is None or url.strip().lower() in OFF_VALUES:
        return None
    return url.strip()


def _hide(text: str, url: str) -> str:
    """`text` with `url`'s password (if any) hidden: a server's error may quote it."""
    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    return text.replace(password, "***") if password else text


def shared_tier(url: str):
    """The shared tier as a cache here would make it (settings from the
    environment), checked to answer; raises `UnsignedSharedTier` for a tier
    without a secret and no opt-in, `CommandError` for anything else."""
    from ..store.registry import shared_settings, tier_kind
    from ..store.shared import RedisNotInstalled, UnsignedSharedTier

    try:
        tier = tier_kind("shared").from_settings(shared_settings(url, timeout=_REDIS_TIMEOUT, quiet=True))
    except UnsignedSharedTier:
        raise
    except (settings.SettingError, RedisNotInstalled) as exc:
        raise CommandError(str(exc)) from None
    except ValueError as exc:  # redis-py reads no such URL
        raise CommandError(f"{display_url(url)} is not a Redis URL ({_hide(str(exc), url)}); "
                           "use e.g. redis://cache-host:6379/0") from None
    import redis

    try:
        tier.client.ping()
    except (redis.RedisError, OSError) as exc:
        raise NotAnswering(f"the shared cache at {tier.location} is not answering "
                           f"({_hide(str(exc), url)})") from None
    return tier


class NotAnswering(CommandError):
    """The shared cache's server is down, unreachable or refuses this client."""


@contextlib.contextmanager
def quiet():
    """The shared tier warns when Redis stops answering; the command says so itself."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def check_answering(tier) -> None:
    if not tier.available:  # a call failed after the first ping
        raise NotAnswering(f"the shared cache at {tier.location} stopped answering; nothing more was "
                           "read from it, run the command again")
