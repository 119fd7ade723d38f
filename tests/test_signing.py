"""Signing and the shared tier's settings, without a server: `Keyring` and
`gpucache_ext.store.settings` (the tiers' use of them is tested against real
servers and folders in test_security)."""

import hashlib
import hmac

import pytest

from gpucache_ext.store import settings
from gpucache_ext.store.signing import (BAD_SIGNATURE, CURRENT, NOT_SIGNED, OTHER_SECRET, PREVIOUS, UNSIGNED, Keyring,
                                  Rejected, key_id, strip)

ENTRY = b"GPUCACHE" + bytes(range(256)) * 4


def _refusal(keyring, data):
    with pytest.raises(Rejected) as caught:
        keyring.open(data)
    return caught.value.reason


def test_a_signed_entry_opens_with_its_secret_and_no_other():
    signed = Keyring(["team"]).sign(ENTRY)
    assert signed != ENTRY and signed.endswith(ENTRY)
    assert Keyring(["team"]).open(signed) == (ENTRY, CURRENT)
    assert _refusal(Keyring(["other"]), signed) == OTHER_SECRET
    assert _refusal(Keyring(["team"]), ENTRY) == UNSIGNED


def test_every_changed_byte_of_a_signed_entry_is_a_bad_signature():
    keyring = Keyring([b"team"])
    signed = keyring.sign(ENTRY)
    start = len(signed) - len(ENTRY) - 32  # the MAC, then the entry
    for position in range(start, len(signed), 97):
        damaged = bytearray(signed)
        damaged[position] ^= 0x01
        assert _refusal(keyring, bytes(damaged)) == BAD_SIGNATURE, position
    assert _refusal(keyring, signed[:-1]) == BAD_SIGNATURE


def test_rotation_reads_the_previous_secret_and_signs_with_the_first():
    old = Keyring(["old"]).sign(ENTRY)
    rotated = Keyring(["new", "old"])
    assert rotated.open(old) == (ENTRY, PREVIOUS)
    assert rotated.classify(old) == PREVIOUS
    fresh = rotated.sign(ENTRY)
    assert Keyring(["new"]).open(fresh) == (ENTRY, CURRENT)
    assert _refusal(Keyring(["old"]), fresh) == OTHER_SECRET
    assert rotated.classify(fresh) == CURRENT


def test_entries_signed_by_the_earlier_format_are_still_read():
    mac = hmac.new(b"team", ENTRY, hashlib.sha256).digest()
    old_format = b"GPUCSIG1" + mac + ENTRY
    assert Keyring(["team"]).open(old_format) == (ENTRY, PREVIOUS)  # (verify --fix signs it anew)
    assert _refusal(Keyring(["other"]), old_format) == OTHER_SECRET
    assert strip(old_format) == ENTRY


def test_without_a_secret_entries_are_refused_unless_unsigned_use_is_allowed():
    signed = Keyring(["team"]).sign(ENTRY)
    assert _refusal(Keyring(), ENTRY) == UNSIGNED
    assert _refusal(Keyring(), signed) == UNSIGNED
    opted_in = Keyring(allow_unsigned=True)
    assert opted_in.sign(ENTRY) == ENTRY
    assert opted_in.open(ENTRY) == (ENTRY, NOT_SIGNED)
    assert opted_in.open(signed) == (ENTRY, NOT_SIGNED)  # (nothing to check it with)
    # a secret overrides the opt-in: signatures are then always required
    assert _refusal(Keyring(["team"], allow_unsigned=True), ENTRY) == UNSIGNED


def test_the_key_id_names_a_secret_without_revealing_it():
    assert key_id(b"team") == key_id(b"team") != key_id(b"team2")
    assert b"team" not in Keyring(["team"]).sign(ENTRY)[:48]
    with pytest.raises(TypeError, match="str or bytes"):
        Keyring([123])


def test_secrets_come_from_the_environment_unless_given():
    env = {"GPUCACHE_SECRET": "new", "GPUCACHE_SECRET_PREVIOUS": "old"}
    assert settings.secrets(None, env) == ("new", "old")
    assert settings.secrets("given", env) == ("given",)
    assert settings.secrets(["a", "b"], env) == ("a", "b")
    assert settings.secrets("", env) == () and settings.secrets((), env) == ()  # explicitly none
    assert settings.secrets(None, {}) == ()
    with pytest.raises(settings.SettingError, match="GPUCACHE_SECRET_PREVIOUS is set but GPUCACHE_SECRET is not"):
        settings.secrets(None, {"GPUCACHE_SECRET_PREVIOUS": "old"})  # a rotation half done: refused
    assert settings.keyring(None, None, env).secrets == (b"new", b"old")


@pytest.mark.parametrize("value, expected", [("1", True), ("yes", True), ("", False), ("0", False)])
def test_the_unsigned_opt_in_reads_yes_and_no(value, expected):
    assert settings.allow_unsigned(None, {"GPUCACHE_SHARED_UNSIGNED": value}) is expected


def test_bad_settings_name_the_variable_and_the_fix():
    with pytest.raises(settings.SettingError, match="GPUCACHE_SHARED_UNSIGNED='maybe'.*use 1"):
        settings.allow_unsigned(None, {"GPUCACHE_SHARED_UNSIGNED": "maybe"})
    with pytest.raises(settings.SettingError, match=r"GPUCACHE_REDIS_PREFIX='team \*'.*no spaces or wildcards"):
        settings.redis_prefix(None, {"GPUCACHE_REDIS_PREFIX": "team *"})
    with pytest.raises(settings.SettingError, match="redis_prefix='a b'"):
        settings.redis_prefix("a b")
    with pytest.raises(settings.SettingError, match="GPUCACHE_REDIS_TTL='soon'.*7d"):
        settings.redis_ttl(None, {"GPUCACHE_REDIS_TTL": "soon"})
    with pytest.raises(settings.SettingError, match="positive"):
        settings.redis_ttl(-5)


def test_prefix_and_ttl_defaults_and_units():
    assert settings.redis_prefix(None, {}) == "gpucache"
    assert settings.redis_prefix(None, {"GPUCACHE_REDIS_PREFIX": "team-a"}) == "team-a"
    assert settings.redis_ttl(None, {}) is None
    assert settings.redis_ttl(None, {"GPUCACHE_REDIS_TTL": "off"}) is None
    assert settings.redis_ttl(None, {"GPUCACHE_REDIS_TTL": "3600"}) == 3600
    assert settings.redis_ttl(None, {"GPUCACHE_REDIS_TTL": "12h"}) == 12 * 3600
    assert settings.redis_ttl("7d") == 7 * 86400 and settings.redis_ttl(90) == 90
