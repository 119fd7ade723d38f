"""Shared test setup.

- `gpu`-marked tests skip cleanly on machines without a GPU.
- `redis_server`: a real redis-server on loopback (tests/redis_server.py).
- The magic's default cache keeps no disk tier during the tests (each test
  that wants one makes it in a temporary folder), so runs do not see each
  other's entries or the user's cache; the user's shared-tier settings
  (URL, secrets, prefix) are cleared too.
"""

import os

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
    from gpucache_ext.audit import wait_for_all

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
