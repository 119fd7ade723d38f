"""The shared tier against a real redis-server that the tests start on loopback
(the `redis_server` fixture: see tests/redis_server.py)."""

import os
import sys
import subprocess
import time
import warnings

import gpucache_ext

from gpucache_ext import CompileConfig, KernelCache
from gpucache_ext.store.shared import RedisTier

from . import kernels

def test_entries_are_shared_between_caches(redis_server):
    config = CompileConfig(sm=86)
    first = KernelCache(redis_url=redis_server.url, secret="team").compile(kernels.axpy, kernels.AXPY_SIG, config)
    other = KernelCache(redis_url=redis_server.url, secret="team")  # another user: empty memory
    result = other.compile(kernels.axpy, kernels.AXPY_SIG, config)
    assert [result.stages[s].tier for s in ("llvm", "ptx", "cubin")] == ["shared"] * 3
    assert result.cubin == first.cubin
    assert other.stats()["cubin"].tiers["shared"].entries == 1
    assert {row.kernel for row in other.entries(stage="cubin")} == {"tests.kernels.axpy"}


def test_a_shared_hit_fills_the_disk_and_memory_tiers(redis_server, tmp_path):
    config = CompileConfig(sm=80)
    KernelCache(redis_url=redis_server.url, secret="team").compile(kernels.copy, kernels.COPY_SIG, config)
    cache = KernelCache(directory=tmp_path / "disk", redis_url=redis_server.url, secret="team")
    assert cache.compile(kernels.copy, kernels.COPY_SIG, config).stages["cubin"].tier == "shared"
    assert cache.stats()["cubin"].tiers["disk"].entries == 1
    alone = KernelCache(directory=tmp_path / "disk", secret="team")  # the disk copy serves without Redis
    assert alone.compile(kernels.copy, kernels.COPY_SIG, config).stages["cubin"].tier == "disk"


def test_redis_stopped_mid_session_warns_once_and_local_tiers_go_on(redis_server, tmp_path):
    cache = KernelCache(directory=tmp_path, redis_url=redis_server.url, secret="team")
    cache.compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=80))
    redis_server.stop()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.monotonic()
        results = [cache.compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=sm))
                   for sm in (75, 86, 90)]
        elapsed = time.monotonic() - start
        again = cache.compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=80))
    messages = [str(w.message) for w in caught if "shared cache" in str(w.message)]
    assert len(messages) == 1 and "not answering" in messages[0]
    # what a user must see has its own category, to filter or to turn into an error
    assert [str(w.message) for w in caught if issubclass(w.category, gpucache_ext.TierWarning)] == messages
    assert again.hit and all(r.cubin for r in results)
    assert elapsed < 20  # bounded timeouts, then the tier stays out of the way
    fresh = KernelCache().compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=90))
    assert results[-1].cubin == fresh.cubin


def test_signed_entries_reject_a_wrong_or_missing_signature(redis_server):
    config = CompileConfig(sm=86)
    KernelCache(redis_url=redis_server.url, secret="team-secret").compile(kernels.copy, kernels.COPY_SIG, config)

    trusted = KernelCache(redis_url=redis_server.url, secret="team-secret")
    assert trusted.compile(kernels.copy, kernels.COPY_SIG, config).stages["cubin"].tier == "shared"

    stranger = KernelCache(redis_url=redis_server.url, secret="another-secret")
    result = stranger.compile(kernels.copy, kernels.COPY_SIG, config)
    assert not result.stages["cubin"].hit
    assert stranger.stats()["cubin"].tiers["shared"].rejected >= 1
    assert result.stages["cubin"].reasons[0] == "shared entry refused: other secret"  # the miss says why

    # an unsigned entry planted in a signed store is refused too
    other_config = CompileConfig(sm=80)
    KernelCache(redis_url=redis_server.url, allow_unsigned=True).compile(kernels.copy, kernels.COPY_SIG,
                                                                         other_config)
    checked = KernelCache(redis_url=redis_server.url, secret="team-secret")
    planted = checked.compile(kernels.copy, kernels.COPY_SIG, other_config)
    assert not planted.stages["cubin"].hit
    assert planted.stages["cubin"].reasons[0] == "shared entry refused: unsigned"
    assert checked.stats()["cubin"].tiers["shared"].rejected >= 1


def test_tampered_entry_is_refused(redis_server):
    import redis

    config = CompileConfig(sm=86)
    first = KernelCache(redis_url=redis_server.url, secret="s").compile(kernels.copy, kernels.COPY_SIG, config)
    client = redis.Redis.from_url(redis_server.url)
    key = RedisTier(redis_server.url, secret="s").key("cubin", first.stages["cubin"].token)
    data = bytearray(client.get(key))
    data[-10] ^= 0xFF  # flip bits inside the cubin
    client.set(key, bytes(data))
    result = KernelCache(redis_url=redis_server.url, secret="s").compile(kernels.copy, kernels.COPY_SIG, config)
    assert not result.stages["cubin"].hit and result.cubin == first.cubin


def test_clear_and_evict_reach_redis(redis_server):
    cache = KernelCache(redis_url=redis_server.url, secret="s")
    result = cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))
    assert cache.evict("cubin", result.stages["cubin"].token)
    assert cache.stats()["cubin"].tiers["shared"].entries == 0
    cache.clear()
    assert all(cache.stats()[s].tiers["shared"].entries == 0 for s in ("llvm", "ptx"))


def test_redis_url_from_environment(redis_server, monkeypatch):
    monkeypatch.setenv("GPUCACHE_DIR", "off")
    monkeypatch.setenv("GPUCACHE_REDIS_URL", redis_server.url)
    monkeypatch.setenv("GPUCACHE_SECRET", "x")
    cache = KernelCache.from_environment()
    assert [t.name for t in cache.tiers] == ["shared"] and cache.tiers[0].keyring.secrets == (b"x",)


MISSING_REDIS = """
import sys
sys.modules["redis"] = None  # as if redis-py were not installed: `import redis` fails
from gpucache_ext import KernelCache, GpuCacheError
from gpucache_ext.store.shared import RedisNotInstalled
cache = KernelCache.from_environment()  # no URL: no shared tier, redis-py never asked for
assert [t.name for t in cache.tiers] == [], cache.tiers
for make in (lambda: KernelCache(redis_url="redis://:hunter2@cache-host:6379/0"),
             lambda: KernelCache.from_environment(redis_url="redis://cache-host:6379/0")):
    try:
        make()
    except RedisNotInstalled as exc:
        assert isinstance(exc, GpuCacheError) and isinstance(exc, ImportError)
        assert "pip install 'gpucache_ext[redis]'" in str(exc), exc
        assert "hunter2" not in str(exc)  # a URL may hold a password: not in the message
    else:
        raise AssertionError("no error without redis-py")
print("ok")
"""


def test_a_redis_url_without_redis_py_says_how_to_install_it(tmp_path):
    """redis-py is the optional `redis` extra: needed only when a URL is set."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", MISSING_REDIS], cwd=root, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": root, "GPUCACHE_DIR": "off",
                                            "GPUCACHE_REDIS_URL": "off", "GPUCACHE_SECRET": "s"})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr


def test_redis_is_an_optional_extra_the_tests_install():
    from importlib import metadata

    from packaging.requirements import Requirement

    requirements = [Requirement(line) for line in metadata.requires("gpucache_ext")]

    def extra(name):
        return [r for r in requirements if r.marker is not None and r.marker.evaluate({"extra": name})]

    assert not any(r.name == "redis" for r in requirements if r.marker is None)  # not a requirement of all
    assert [str(r) for r in extra("redis") if r.name == "redis"] == ['redis>=5; extra == "redis"']
    assert any(r.name == "gpucache_ext" and "redis" in r.extras for r in extra("test"))


def test_a_password_in_the_url_is_never_shown():
    url = "redis://:hunter2@127.0.0.1:1/0"  # nothing listens there
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache = KernelCache(redis_url=url, secret="s")
        cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86))
        refused = KernelCache(redis_url=url)  # no secret: left out, with a warning
    messages = [str(w.message) for w in caught if "shared cache" in str(w.message)]
    assert any("not answering" in m for m in messages) and any("is not used" in m for m in messages)
    assert all("hunter2" not in m and ":***@127.0.0.1:1" in m for m in messages), messages
    shown = [info.location for info in cache.tier_info() + refused.tier_info()] + [repr(cache.tiers[0])]
    assert all("hunter2" not in text and "***" in text for text in shown), shown


def test_notes_are_shared_signed_and_bound_to_their_key(redis_server, tmp_path):
    """A tuned choice filed in one cache is found by another (the shared and
    the disk tier); a note signed with another secret, tampered with or
    copied under another key is not."""
    import redis

    note = {"config": "sm_90 max_registers=32", "block": 256}
    KernelCache(directory=tmp_path, redis_url=redis_server.url, secret="team").file_note("k1", note)
    assert KernelCache(redis_url=redis_server.url, secret="team").note("k1") == note  # the shared tier
    assert KernelCache(directory=tmp_path, secret="team").note("k1") == note  # the disk tier
    assert KernelCache(redis_url=redis_server.url, secret="other").note("k1") is None
    client = redis.Redis.from_url(redis_server.url)
    tier = RedisTier(redis_server.url, secret="team")
    client.set(tier.key("notes", "k2"), client.get(tier.key("notes", "k1")))  # copied under another key
    assert KernelCache(redis_url=redis_server.url, secret="team").note("k2") is None
    data = bytearray(client.get(tier.key("notes", "k1")))
    data[-5] ^= 0xFF
    client.set(tier.key("notes", "k1"), bytes(data))
    assert KernelCache(redis_url=redis_server.url, secret="team").note("k1") is None
