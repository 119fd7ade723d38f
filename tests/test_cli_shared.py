"""The gpucache command's shared-tier parts (stats, verify --shared) against a
real redis-server (the `redis_server` fixture) and entries from real compiles.
The command runs in this process (`cli.main`), with its settings in the
environment as a user sets them."""

import json

import pytest

from gpucache_ext import CompileConfig, KernelCache, cli

from . import kernels

redis = pytest.importorskip("redis")

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


@pytest.fixture
def gpucache(capsys):
    """gpucache(*args, expect=0): (stdout, stderr), or the JSON it printed with --json."""
    def run(*args, expect=0):
        status = cli.main([str(a) for a in args])
        out, err = capsys.readouterr()
        assert status == expect, out + err
        assert "Traceback" not in out + err
        return json.loads(out) if "--json" in args else (out, err)
    return run


def compile_copy(url, sm=86, **kwargs):
    return KernelCache(redis_url=url, **kwargs).compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=sm))


def written(result):
    """The stages a compile wrote (missed everywhere)."""
    return [stage for stage in STAGES if not result.stages[stage].hit]


def test_stats_shows_how_shared_entries_are_signed_and_what_this_reader_refuses(redis_server, use, gpucache,
                                                                                 tmp_path):
    compile_copy(redis_server.url, secret="old")
    # entries written by a cache without a secret: unsigned (llvm is shared with sm_86's)
    planted = written(compile_copy(redis_server.url, sm=80, secret="", allow_unsigned=True))
    assert "cubin" in planted

    use(GPUCACHE_SECRET="new", GPUCACHE_SECRET_PREVIOUS="old")
    report = gpucache("stats", "--json")
    assert report["directory"] is None and not report["disk"]["used"]  # GPUCACHE_DIR=off in the tests
    shared = report["shared"]
    assert shared["used"] and shared["signed"]
    assert shared["stages"]["cubin"]["signatures"] == {"current": 0, "previous": 1, "not signed": 0,
                                                       "unsigned": 1, "other secret": 0}
    assert shared["refused"] == {"unsigned": len(planted), "other secret": 0}
    assert shared["previous_secret"] == 3 and shared["entries"] == 3 + len(planted)
    text, _ = gpucache("stats")
    assert "GPUCACHE_SECRET_PREVIOUS accepted for reading" in text
    assert f"{len(planted)} entries would be refused here ({len(planted)} unsigned)" in text
    assert "3 entries signed with a previous secret: gpucache verify --shared --fix" in text

    use(GPUCACHE_SECRET="new")  # the old secret dropped: what it signed is refused
    assert gpucache("stats", "--json")["shared"]["refused"] == {"unsigned": len(planted), "other secret": 3}

    use()  # no secret, no opt-in: the shared tier is not used, and the command says how to use it
    report = gpucache("stats", "--json")
    assert not report["shared"]["used"] and "stages" not in report["shared"]
    text, _ = gpucache("stats")
    assert "is not used: no secret is set" in text and "GPUCACHE_SHARED_UNSIGNED=1" in text
    assert "GPUCACHE_SECRET" in text

    use(GPUCACHE_SHARED_UNSIGNED="1")  # opted in: read unchecked, nothing refused
    shared = gpucache("stats", "--json")["shared"]
    assert shared["used"] and not shared["signed"] and shared["refused"] == {"unsigned": 0, "other secret": 0}
    assert all(s["signatures"]["not signed"] == s["entries"] > 0 for s in shared["stages"].values())
    assert "(unsigned: GPUCACHE_SHARED_UNSIGNED=1" in gpucache("stats")[0]

    # --redis-url picks the server (here after the command), "off" none
    use(GPUCACHE_SECRET="new", GPUCACHE_REDIS_URL="off")
    assert gpucache("--dir", tmp_path, "stats", "--json")["shared"] is None
    assert gpucache("stats", "--json", "--redis-url", redis_server.url)["shared"]["entries"] == 3 + len(planted)
