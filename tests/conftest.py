"""Shared test setup.

- `gpu`-marked tests skip cleanly on machines without a GPU.
- `redis_server`: a real redis-server on loopback (tests/redis_server.py).
- `ip`: an IPython shell with the extension loaded; `gpucache_cli`: the
  ``gpucache`` command run in this process; `user_package`: a folder of user
  modules on sys.path; `change_while_typing`: an edit made mid-compile.
  (Plain helpers are in tests/helpers.py.)
- The magic's default cache keeps no disk tier during the tests (each test
  that wants one makes it in a temporary folder), so runs do not see each
  other's entries or the user's cache; the user's shared-tier settings
  (URL, secrets, prefix) are cleared too.
"""

import json
import os
import sys

import pytest

from .redis_server import redis_server  # noqa: F401  (a fixture for every test module)

os.environ["GPUCACHE_DIR"] = "off"
# the user's shared-tier settings are not the tests' (each test sets what it needs)
for _name in ("GPUCACHE_REDIS_URL", "GPUCACHE_SECRET", "GPUCACHE_SECRET_PREVIOUS", "GPUCACHE_SHARED_UNSIGNED",
              "GPUCACHE_REDIS_PREFIX", "GPUCACHE_REDIS_TTL"):
    os.environ.pop(_name, None)


def pytest_collection_finish(session):
    """numba's and IPython's long-lived objects (imported while collecting)
    leave the garbage collector's generations: full collections during the
    run then scan only what the tests make, which halves the quick loop."""
    import gc

    gc.collect()
    gc.freeze()


def _have_gpu() -> bool:
    try:
        from cuda.bindings import driver

        err, = driver.cuInit(0)[:1]
        if err != driver.CUresult.CUDA_SUCCESS:
            return False
        err, count = driver.cuDeviceGetCount()
        return err == driver.CUresult.CUDA_SUCCESS and count > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _have_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU and driver")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _no_audit_runs_on_into_the_next_test():
    """Background audits (on by default for disk and shared hits) finish
    within the test that started them."""
    yield
    from gpucache_ext.pipeline.audit import wait_for_all

    wait_for_all()


@pytest.fixture
def ip():
    """An in-process IPython shell with gpucache_ext loaded, a fresh namespace
    and a fresh (memory-only) default cache; cleaned up afterwards."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.testing.globalipapp import start_ipython

    import gpucache_ext

    start_ipython()  # once per process; later calls return None
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "gpucache_ext")
    shell.reset(new_session=False)
    gpucache_ext._default_cache = None
    yield shell
    shell.reset(new_session=False)
    shell.run_line_magic("unload_ext", "gpucache_ext")
    gpucache_ext._default_cache = None


@pytest.fixture
def gpucache_cli(capsys):
    """gpucache_cli(*args, expect=0): the ``gpucache`` command run in this
    process (`cli.main`), its exit status checked and no traceback printed;
    returns (stdout, stderr), or the JSON it printed with --json."""
    from gpucache_ext import cli

    def run(*args, expect=0):
        status = cli.main([str(a) for a in args])
        out, err = capsys.readouterr()
        assert status == expect, out + err
        assert "Traceback" not in out + err
        return json.loads(out) if "--json" in args else (out, err)
    return run


@pytest.fixture
def user_package(tmp_path, monkeypatch):
    """A folder on sys.path for user modules; modules imported from it are
    dropped from sys.modules afterwards (restoring any library they shadowed)."""
    import importlib

    monkeypatch.syspath_prepend(str(tmp_path))
    saved = dict(sys.modules)
    importlib.invalidate_caches()
    yield tmp_path
    for name in list(sys.modules):
        if name not in saved:
            del sys.modules[name]
    sys.modules.update(saved)


@pytest.fixture
def site_library(tmp_path, monkeypatch):
    """A folder named site-packages on sys.path: what is installed there is a library's code."""
    site = tmp_path / "site-packages"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    return site


@pytest.fixture
def change_while_typing(monkeypatch):
    """Make `change()` run after the next compile hashed what the kernel
    reads and before it is typed: what another thread writing at that
    moment would do."""
    from gpucache_ext import backends

    pending = []
    backend = backends.backend()
    original = backend.build

    def build(stage, plan, upstream):
        if stage == backend.chain.stages[0]:  # (the typing stage: after the tokens, before typing)
            while pending:
                pending.pop(0)()
        return original(stage, plan, upstream)

    monkeypatch.setattr(backend, "build", build)
    return pending.append


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """After each test (its fixtures gone): collect what it left, then move
    the survivors out of the collector's reach as at collection.  Without
    this every full collection (IPython runs one at each shell reset, so two
    per `ip` test) walks all that earlier tests kept alive, and the suite
    slows as it goes: the quick suite took 264 s, with this 185 s.  Garbage
    a test makes is still collected within that test."""
    import gc

    gc.collect()
    gc.freeze()
