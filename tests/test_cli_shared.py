"""The gpucache command's shared-tier parts (stats, verify --shared) against a
real redis-server (the `redis_server` fixture) and entries from real compiles.
The command runs in this process (`cli.main`, the `gpucache_cli` fixture of
conftest.py), with its settings in the environment as a user sets them."""

from pathlib import Path

import pytest

from gpucache_ext import CompileConfig, KernelCache
from gpucache_ext.store.shared import RedisTier
from gpucache_ext.store.signing import Keyring

from . import kernels
from .helpers import gpucache

redis = pytest.importorskip("redis")

ROOT = Path(__file__).resolve().parent.parent
STAGES = ("llvm", "ptx", "cubin")
SETTINGS = ("GPUCACHE_SECRET", "GPUCACHE_SECRET_PREVIOUS", "GPUCACHE_SHARED_UNSIGNED", "GPUCACHE_REDIS_URL")


@pytest.fixture
def use(monkeypatch, redis_server):
    """use(**env): the settings the next command runs with (the shared cache
    is the test's server unless GPUCACHE_REDIS_URL says otherwise)."""
    def setenv(**env):
        for name in SETTINGS:
            monkeypatch.delenv(name, raising=False)
        for name, value in {"GPUCACHE_REDIS_URL": redis_server.url, **env}.items():
            monkeypatch.setenv(name, value)
    return setenv


def compile_copy(url, sm=86, **kwargs):
    return KernelCache(redis_url=url, **kwargs).compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=sm))


def written(result):
    """The stages a compile wrote (missed everywhere)."""
    return [stage for stage in STAGES if not result.stages[stage].hit]


def test_stats_shows_how_shared_entries_are_signed_and_what_this_reader_refuses(redis_server, use, gpucache_cli,
                                                                                 tmp_path):
    compile_copy(redis_server.url, secret="old")
    # entries written by a cache without a secret: unsigned (llvm is shared with sm_86's)
    planted = written(compile_copy(redis_server.url, sm=80, secret="", allow_unsigned=True))
    assert "cubin" in planted

    use(GPUCACHE_SECRET="new", GPUCACHE_SECRET_PREVIOUS="old")
    report = gpucache_cli("stats", "--json")
    assert report["directory"] is None and not report["disk"]["used"]  # GPUCACHE_DIR=off in the tests
    shared = report["shared"]
    assert shared["used"] and shared["signed"]
    assert shared["stages"]["cubin"]["signatures"] == {"current": 0, "previous": 1, "not signed": 0,
                                                       "unsigned": 1, "other secret": 0}
    assert shared["refused"] == {"unsigned": len(planted), "other secret": 0}
    assert shared["previous_secret"] == 3 and shared["entries"] == 3 + len(planted)
    text, _ = gpucache_cli("stats")
    assert "GPUCACHE_SECRET_PREVIOUS accepted for reading" in text
    assert f"{len(planted)} entries would be refused here ({len(planted)} unsigned)" in text
    assert "3 entries signed with a previous secret: gpucache verify --shared --fix" in text

    use(GPUCACHE_SECRET="new")  # the old secret dropped: what it signed is refused
    assert gpucache_cli("stats", "--json")["shared"]["refused"] == {"unsigned": len(planted), "other secret": 3}

    use()  # no secret, no opt-in: the shared tier is not used, and the command says how to use it
    report = gpucache_cli("stats", "--json")
    assert not report["shared"]["used"] and "stages" not in report["shared"]
    text, _ = gpucache_cli("stats")
    assert "is not used: no secret is set" in text and "GPUCACHE_SHARED_UNSIGNED=1" in text
    assert "GPUCACHE_SECRET" in text

    use(GPUCACHE_SHARED_UNSIGNED="1")  # opted in: read unchecked, nothing refused
    shared = gpucache_cli("stats", "--json")["shared"]
    assert shared["used"] and not shared["signed"] and shared["refused"] == {"unsigned": 0, "other secret": 0}
    assert all(s["signatures"]["not signed"] == s["entries"] > 0 for name, s in shared["stages"].items()
               if name != "fatbin")  # (no fatbin was built)
    assert "(unsigned: GPUCACHE_SHARED_UNSIGNED=1" in gpucache_cli("stats")[0]

    # --redis-url picks the server (here after the command), "off" none
    use(GPUCACHE_SECRET="new", GPUCACHE_REDIS_URL="off")
    assert gpucache_cli("--dir", tmp_path, "stats", "--json")["shared"] is None
    assert gpucache_cli("stats", "--json", "--redis-url", redis_server.url)["shared"]["entries"] == 3 + len(planted)


def test_verify_shared_signs_again_after_a_rotation_and_a_new_only_reader_hits(redis_server, use, gpucache_cli):
    first = compile_copy(redis_server.url, secret="old", redis_ttl=3600)
    client = redis.Redis.from_url(redis_server.url)
    keys = client.keys("gpucache:v1:*")
    assert len(keys) == 3

    use(GPUCACHE_SECRET="new", GPUCACHE_SECRET_PREVIOUS="old")
    report = gpucache_cli("--json", "verify", "--shared")
    assert report["counts"]["previous secret"] == 3 and report["counts"]["ok"] == 0
    assert report["resigned"] == 0 and report["bad"] == [] and report["signatures_checked"]
    use(GPUCACHE_SECRET="new")  # without --fix nothing changed: only-new readers still refuse them
    assert gpucache_cli("stats", "--json")["shared"]["refused"]["other secret"] == 3

    use(GPUCACHE_SECRET="new", GPUCACHE_SECRET_PREVIOUS="old")
    text, _ = gpucache_cli("verify", "--shared", "--fix")
    assert "3 signed with a previous secret" in text and "signed again with GPUCACHE_SECRET" in text
    assert all(0 < client.ttl(key) <= 3600 for key in keys)  # their expiry kept

    use(GPUCACHE_SECRET="new")
    report = gpucache_cli("verify", "--shared", "--json")
    assert report["counts"]["ok"] == 3 and report["checked"] == 3
    result = compile_copy(redis_server.url, secret="new")
    assert [result.stages[s].tier for s in STAGES] == ["shared"] * 3 and result.cubin == first.cubin


def test_verify_shared_fix_removes_unsigned_tampered_foreign_and_corrupt_entries(redis_server, use, gpucache_cli):
    url = redis_server.url
    good = compile_copy(url, secret="s")
    planted = compile_copy(url, sm=80, secret="", allow_unsigned=True)
    tier = RedisTier(url, secret="s")
    client = redis.Redis.from_url(url)
    unsigned = {tier.key(stage, planted.stages[stage].token) for stage in written(planted)}
    tampered = tier.key("cubin", good.stages["cubin"].token)
    data = bytearray(client.get(tampered))
    data[-10] ^= 0xFF  # inside the cubin
    client.set(tampered, bytes(data))
    foreign = tier.key("ptx", "ab" * 32)
    client.set(foreign, Keyring(["another team"]).sign(b"machine code"))
    corrupt = tier.key("llvm", "cd" * 32)  # signed with the team's secret, but no entry
    client.set(corrupt, Keyring(["s"]).sign(b"not an entry"))

    use(GPUCACHE_SECRET="s")
    report = gpucache_cli("--json", "verify", "--shared", expect=1)
    assert {k: n for k, n in report["counts"].items() if n} == {
        "ok": 2, "unsigned": len(unsigned), "bad signature": 1, "other secret": 1, "corrupt": 1}
    assert {row["key"]: row["outcome"] for row in report["bad"]} == {
        **dict.fromkeys(unsigned, "unsigned"), tampered: "bad signature", foreign: "other secret",
        corrupt: "corrupt"}
    text, _ = gpucache_cli("verify", "--shared", expect=1)
    assert f"BAD cubin {good.stages['cubin'].short_token}: signature: bad signature" in text
    assert f"{len(unsigned) + 3} bad" in text

    fixed = gpucache_cli("--json", "verify", "--shared", "--fix")
    assert fixed["removed"] == len(unsigned) + 3
    assert not any(client.exists(key) for key in (*unsigned, tampered, foreign, corrupt))
    assert all(client.exists(tier.key(s, good.stages[s].token)) for s in ("llvm", "ptx"))
    after = gpucache_cli("--json", "verify", "--shared")
    assert after["checked"] == 2 and after["bad"] == []


def test_verify_shared_needs_a_secret_or_the_opt_in(redis_server, use, gpucache_cli, monkeypatch):
    good = compile_copy(redis_server.url, secret="s")
    client = redis.Redis.from_url(redis_server.url)
    key = RedisTier(redis_server.url, secret="s").key("cubin", good.stages["cubin"].token)
    data = bytearray(client.get(key))
    data[-10] ^= 0xFF
    client.set(key, bytes(data))

    use()
    _, err = gpucache_cli("verify", "--shared", expect=2)
    assert "no secret is set" in err and "GPUCACHE_SECRET" in err and "GPUCACHE_SHARED_UNSIGNED=1" in err

    use(GPUCACHE_SHARED_UNSIGNED="1")  # no secret: signatures unchecked, the checksum still catches it
    text, _ = gpucache_cli("verify", "--shared", expect=1)
    assert "signatures not checked" in text and "keys and checksums only" in text
    report = gpucache_cli("verify", "--shared", "--json", expect=1)
    assert not report["signatures_checked"] and report["counts"]["corrupt"] == 1 and report["counts"]["ok"] == 2
    assert "checksum" in report["bad"][0]["problem"]

    use(GPUCACHE_SECRET="s", GPUCACHE_REDIS_URL="off")
    assert "GPUCACHE_REDIS_URL" in gpucache_cli("verify", "--shared", expect=2)[1]


def test_a_password_is_never_printed_and_a_server_down_is_one_line(redis_server, use, gpucache_cli):
    client = redis.Redis.from_url(redis_server.url)
    client.config_set("requirepass", "hunter2")
    url = f"redis://:hunter2@127.0.0.1:{redis_server.port}/0"
    compile_copy(url, secret="s")

    use(GPUCACHE_SECRET="s", GPUCACHE_REDIS_URL=url)
    text, err = gpucache_cli("stats")
    assert f"redis://:***@127.0.0.1:{redis_server.port}/0" in text and "hunter2" not in text + err
    assert gpucache_cli("--json", "verify", "--shared")["counts"]["ok"] == 3

    wrong = url.replace("hunter2", "letmein")
    use(GPUCACHE_SECRET="s", GPUCACHE_REDIS_URL=wrong)
    text, err = gpucache_cli("stats", expect=1)
    assert "letmein" not in text + err and text.splitlines()[-1].startswith("the shared cache at redis://:***@")

    redis_server.stop()
    env = {"PYTHONPATH": str(ROOT), "GPUCACHE_SECRET": "s", "GPUCACHE_REDIS_URL": url}
    for args, expect, stream in ((["stats"], 1, "stdout"), (["verify", "--shared"], 2, "stderr")):
        done = gpucache(*args, expect=expect, env=env)  # a new process: nothing of this one's connections
        shown = [line for line in getattr(done, stream).splitlines() if str(redis_server.port) in line]
        assert len(shown) == 1 and "is not answering" in shown[0] and "redis://:***@" in shown[0]
        assert "hunter2" not in done.stdout + done.stderr and "Traceback" not in done.stderr
