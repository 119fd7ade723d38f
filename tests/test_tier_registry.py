"""Tiers from one registry (`gpucache_ext.store.registry`): the built-in disk
and shared tiers by name, and a user's own tier class named "module:Class",
made by the one factory the cache and the CLI share.  Real compiles."""

import sys
import warnings

import pytest

from gpucache_ext import CompileConfig, KernelCache
from gpucache_ext.errors import SecurityWarning
from gpucache_ext.store.registry import (DEFAULT_TIERS, TierSettings, build_tiers, register_tier, tier_kind,
                                         tier_names)
from gpucache_ext.store.signing import Keyring
from gpucache_ext.store.tiers import Tier

from .helpers import notebook_namespace, run_cell

# an object store as a user writes one: entries as bytes (the project's codec, signed as the settings say)
USER_TIER = '''
from gpucache_ext.keys.stagespec import PERSISTENT_STAGES
from gpucache_ext.store.codec import decode, encode
from gpucache_ext.store.tiers import Tier

BUCKET = {}
MADE = []


class BucketTier(Tier):
    name = "bucket"
    stages = PERSISTENT_STAGES

    @classmethod
    def from_settings(cls, settings):
        MADE.append(settings)
        return cls(settings.keyring)

    def __init__(self, keyring):
        self._sign_with(keyring)

    def get(self, stage, token):
        data = BUCKET.get((stage, token))
        if data is None:
            return None
        body, refused = self._unseal(stage, data)
        return None if refused else decode(body, stage, token)

    def put(self, stage, entry):
        BUCKET[(stage, entry.token)] = self.keyring.sign(encode(stage, entry))

    def delete(self, stage, token):
        return BUCKET.pop((stage, token), None) is not None

    def clear(self, stage):
        for key in [key for key in BUCKET if key[0] == stage]:
            del BUCKET[key]

    def entries(self, stage):
        return [self.get(stage, token) for s, token in list(BUCKET) if s == stage]

    def stats(self, stage):
        found = [data for (s, _), data in BUCKET.items() if s == stage]
        return {"entries": len(found), "bytes": sum(map(len, found))}
'''


@pytest.fixture
def user_tiers(tmp_path, monkeypatch):
    (tmp_path / "usertiers.py").write_text(USER_TIER)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("usertiers", None)


KERNEL = """
def scale(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = 3 * x[i]
"""


def test_a_users_tier_named_module_class_keeps_entries_a_new_cache_reads(user_tiers):
    ns = notebook_namespace()
    run_cell(ns, KERNEL)
    sig, config = "void(float32[:], float32[:])", CompileConfig(sm=86)
    first = KernelCache(tiers=["usertiers:BucketTier"], audit=False, secret="s3cret")
    built = first.compile(ns["scale"], sig, config)
    import usertiers

    assert {stage for stage, _ in usertiers.BUCKET} == {"llvm", "ptx", "cubin"}
    assert [t.name for t in first.tiers] == ["bucket"] and usertiers.MADE[0].keyring.signs
    second = KernelCache(tiers=["usertiers:BucketTier"], audit=False, secret="s3cret")  # (a new session)
    again = second.compile(ns["scale"], sig, config)
    assert {s: (d.outcome.value, d.tier) for s, d in again.stages.items() if s != "typing"} == {
        s: ("hit", "bucket") for s in ("llvm", "ptx", "cubin")}
    assert again.cubin == built.cubin
    # signed with the settings' secret: another secret's cache refuses them, and builds its own
    other = KernelCache(tiers=["usertiers:BucketTier"], audit=False, secret="another")
    assert other.compile(ns["scale"], sig, config).stages["cubin"].outcome.value == "miss"


@pytest.mark.parametrize("name, says", [
    ("nosuch", "tier 'nosuch' is unknown; use one of disk, shared"),
    ("no_module_here:Tier", "ModuleNotFoundError"),
    ("os.path:join", "is no Tier class with a from_settings(settings) classmethod"),
    ("gpucache_ext.store.tiers:Tier", "is no Tier class with a from_settings(settings) classmethod"),
])
def test_a_tier_that_cannot_be_made_is_refused_with_what_to_name(name, says):
    with pytest.raises(ValueError) as caught:
        KernelCache(tiers=[name])
    assert says in str(caught.value)


def test_the_built_in_tiers_are_made_by_the_same_factory(tmp_path, monkeypatch):
    monkeypatch.delenv("GPUCACHE_SECRET", raising=False)
    monkeypatch.delenv("GPUCACHE_SHARED_UNSIGNED", raising=False)
    assert tier_names(None) == DEFAULT_TIERS == tier_names(" ") and tier_names("disk, x:Y") == ("disk", "x:Y")
    unsigned = TierSettings(keyring=Keyring(), directory=tmp_path, redis_url="redis://127.0.0.1:1/0")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tiers, refused = build_tiers(DEFAULT_TIERS, unsigned)
    assert [t.name for t in tiers] == ["disk"] and tiers[0].directory == tmp_path
    assert [(r.name, r.used) for r in refused] == [("shared", False)] and "GPUCACHE_SECRET" in refused[0].note
    assert [w.category for w in caught] == [SecurityWarning]
    assert build_tiers(DEFAULT_TIERS, TierSettings(keyring=Keyring())) == ([], [])  # (nothing configured)


def test_a_tier_registered_by_name_needs_a_factory(user_tiers):
    import usertiers

    with pytest.raises(TypeError, match="from_settings"):
        register_tier("plain", type("Plain", (Tier,), {}))
    register_tier("bucket", usertiers.BucketTier)
    assert tier_kind("bucket") is usertiers.BucketTier


def test_the_environment_names_the_tiers(user_tiers, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUCACHE_DIR", str(tmp_path / "folder"))
    monkeypatch.setenv("GPUCACHE_SECRET", "s3cret")
    monkeypatch.setenv("GPUCACHE_TIERS", "usertiers:BucketTier, disk")
    assert [t.name for t in KernelCache.from_environment(audit=False).tiers] == ["disk", "bucket"]
    monkeypatch.setenv("GPUCACHE_TIERS", "usertiers:BucketTier")  # (no disk tier: the folder is left alone)
    assert [t.name for t in KernelCache.from_environment(audit=False).tiers] == ["bucket"]
    monkeypatch.delenv("GPUCACHE_TIERS")
    assert [t.name for t in KernelCache.from_environment(audit=False).tiers] == ["disk"]
