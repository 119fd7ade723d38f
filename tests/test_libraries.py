"""Library or user code, and the key of an installed library (gpucache_ext.sources.libraries).

The installed packages here are real: a ``site-packages`` folder in tmp_path
with ``.dist-info`` folders (METADATA, RECORD with pip's hashes) for a
namespace package shared by two distributions, put on ``sys.path`` the way a
virtualenv's is.  Versions are bumped as pip does it (the old metadata folder
removed, a new one written), files are edited in place, modules reloaded.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from gpucache_ext.sources import libraries
from gpucache_ext.sources.libraries import class_version, file_origin, library_version, module_files

from .files import write_source

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

A_INIT = '__version__ = "1.0"\nK = 1\n'
B_INIT = '__version__ = "1.0"\nK = 2\n'
NSPKG = {"nspkg-a": {"nspkg/a/__init__.py": A_INIT}, "nspkg-b": {"nspkg/b/__init__.py": B_INIT}}


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _dist_info(site, name, version):
    return site / f"{name.replace('-', '_')}-{version}.dist-info"


def install(site, name, version, files):
    """Write the files and a dist-info as pip does (RECORD: path,hash,size)."""
    for rel, text in files.items():
        write_source(site / rel, text)
    info = _dist_info(site, name, version)
    info.mkdir()
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nA long description.\n"
    (info / "METADATA").write_text(metadata)
    rows = [f"{rel},{_record_hash(text.encode())},{len(text.encode())}" for rel, text in files.items()]
    rows.append(f"{info.name}/METADATA,{_record_hash(metadata.encode())},{len(metadata)}")
    rows.append(f"{info.name}/RECORD,,")
    (info / "RECORD").write_text("\n".join(rows) + "\n")


def bump_metadata(site, name, old, new, files):
    """A new version whose files are the same bytes: only the dist-info changes
    (removed, written again under the new name), the module files are left alone."""
    shutil.rmtree(_dist_info(site, name, old))
    info = _dist_info(site, name, new)
    install(site / "unused", name, new, files)  # to build the dist-info, then move it in place
    shutil.move(str(_dist_info(site / "unused", name, new)), str(info))
    shutil.rmtree(site / "unused")


def reinstall(site, name, old, new, files):
    """pip's upgrade: the old files and dist-info removed, the new ones written."""
    for rel in files:
        (site / rel).unlink()
    shutil.rmtree(_dist_info(site, name, old))
    install(site, name, new, files)


def drop_modules(prefix):
    for name in [n for n in sys.modules if n == prefix or n.startswith(prefix + ".")]:
        del sys.modules[name]


@pytest.fixture
def site_folder(tmp_path, monkeypatch):
    """A site-packages folder holding nspkg-a 1.0 and nspkg-b 1.0, on sys.path.
    No bytecode is written: a reinstall within one second, same size, would
    otherwise reload the old version's .pyc."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    site = tmp_path / "site-packages"
    site.mkdir()
    for name, files in NSPKG.items():
        install(site, name, "1.0", files)
    sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    yield site
    sys.path.remove(str(site))
    drop_modules("nspkg")
    drop_modules("solo")
    importlib.invalidate_caches()


def import_nspkg():
    import nspkg.a
    import nspkg.b

    return nspkg, nspkg.a, nspkg.b


def keys():
    nspkg, a, b = import_nspkg()
    return {m.__name__: library_version(m) for m in (nspkg, a, b)}


# ---------------------------------------------------------------------------
# Library or user code


def test_an_installed_module_is_keyed_by_the_distribution_that_owns_its_file(site_folder):
    nspkg, a, b = import_nspkg()
    assert file_origin(a.__file__) == "installed"
    assert library_version(a) == "nspkg-a 1.0"
    assert library_version(b) == "nspkg-b 1.0"
    # the namespace package itself: every distribution with a file in it
    assert library_version(nspkg) == "nspkg-a 1.0; nspkg-b 1.0"
    assert module_files(nspkg) == (str(site_folder / "nspkg"),)


def test_user_code_the_standard_library_and_builtins(tmp_path):
    write_source(tmp_path / "sched.py", "K = 3\n")  # beside the notebook, named like the standard library's
    sys.path.insert(0, str(tmp_path))
    drop_modules("sched")
    try:
        import sched

        assert sched.__file__ == str(tmp_path / "sched.py")
        assert library_version(sched) is None
        assert file_origin(sched.__file__) is None
    finally:
        sys.path.remove(str(tmp_path))
        drop_modules("sched")
    import math
    import os.path

    assert library_version(os.path) == "stdlib"
    assert library_version(math) == "stdlib"
    assert library_version(sys) == "stdlib"  # built in: no file
    assert file_origin("<cell>") is None
    assert class_version(int) == "stdlib"
    assert class_version(type("Local", (), {"__module__": "__main__"})) is None
    assert class_version(pytest.fixture) is not None  # a library function


def test_a_folder_added_to_sys_path_after_a_lookup_is_seen(tmp_path):
    site = tmp_path / "site-packages"
    install(site, "solo", "2.0", {"solo/__init__.py": "K = 1\n"})
    path = str(site / "solo" / "__init__.py")
    assert file_origin(path) is None  # not on sys.path yet: user code, as far as anyone knows
    sys.path.append(str(site))
    try:
        assert file_origin(path) == "installed"
        import solo

        assert library_version(solo) == "solo 2.0"
    finally:
        sys.path.remove(str(site))
        drop_modules("solo")
    assert file_origin(path) is None


# ---------------------------------------------------------------------------
# Versions that change


def test_a_version_bump_of_the_second_distribution_of_a_namespace_is_seen(site_folder):
    before = keys()
    folder_mtime = site_folder.stat().st_mtime_ns
    bump_metadata(site_folder, "nspkg-b", "1.0", "1.1", NSPKG["nspkg-b"])
    # as if within the folder's mtime granularity: the old owner being gone must be enough
    os.utime(site_folder, ns=(folder_mtime, folder_mtime))
    after = keys()
    assert after["nspkg.b"] == "nspkg-b 1.1 (__version__ 1.0)"  # the module was not reloaded: says 1.0
    assert after["nspkg"] == "nspkg-a 1.0; nspkg-b 1.1"
    assert after["nspkg.a"] == before["nspkg.a"]  # the other distribution's key does not move


def test_a_reinstall_under_a_new_version_is_seen(site_folder):
    keys()
    reinstall(site_folder, "nspkg-b", "1.0", "2.0", {"nspkg/b/__init__.py": B_INIT.replace("1.0", "2.0")})
    importlib.reload(sys.modules["nspkg.b"])
    assert keys()["nspkg.b"] == "nspkg-b 2.0"


def test_a_reloaded_module_whose_version_changed_changes_its_key(site_folder):
    _, _, b = import_nspkg()
    assert library_version(b) == "nspkg-b 1.0"
    write_source(site_folder / "nspkg/b/__init__.py", B_INIT.replace("1.0", "1.1"))  # no reinstall
    importlib.reload(b)
    key = library_version(b)
    assert key.startswith("nspkg-b 1.0 edited nspkg/b/__init__.py@") and key.endswith("(__version__ 1.1)")


def test_version_attribute_is_not_trusted_over_the_metadata(site_folder):
    _, _, b = import_nspkg()
    b.__version__ = "9.9"
    assert library_version(b) == "nspkg-b 1.0 (__version__ 9.9)"
    b.__version__ = "1.0"
    assert library_version(b) == "nspkg-b 1.0"


def test_an_installed_file_edited_under_the_same_version_changes_the_key(site_folder):
    _, a, _ = import_nspkg()
    original = library_version(a)
    write_source(site_folder / "nspkg/a/__init__.py", A_INIT.replace("K = 1", "K = 7"))
    edited = library_version(a)
    assert edited != original and edited.startswith("nspkg-a 1.0 edited nspkg/a/__init__.py@")
    # the key is the content, not the stat: the same bytes written again (new mtime) key as installed
    write_source(site_folder / "nspkg/a/__init__.py", A_INIT)
    assert library_version(a) == original


def test_a_package_no_record_lists_is_keyed_by_its_content(site_folder):
    write_source(site_folder / "solo" / "__init__.py", "K = 1\n")  # copied in by hand: no dist-info
    import solo

    first = library_version(solo)
    assert first.startswith("installed edited solo/__init__.py@")
    write_source(site_folder / "solo" / "__init__.py", "K = 2\n")
    assert library_version(solo) != first


# ---------------------------------------------------------------------------
# Across processes


CHILD = """
import json, sys
sys.path.insert(0, sys.argv[1])
import nspkg.a, nspkg.b
from gpucache_ext.sources.libraries import library_version
print(json.dumps({m.__name__: library_version(m) for m in (nspkg, nspkg.a, nspkg.b)}))
"""


def child_keys(site):
    out = subprocess.run([sys.executable, "-B", "-c", CHILD, str(site)], cwd=ROOT, capture_output=True, text=True,
                         check=True, timeout=120)
    return json.loads(out.stdout)


def test_unchanged_modules_key_the_same_in_a_fresh_process(site_folder):
    assert child_keys(site_folder) == keys()
    bump_metadata(site_folder, "nspkg-b", "1.0", "1.1", NSPKG["nspkg-b"])
    importlib.reload(sys.modules["nspkg.b"])
    child = child_keys(site_folder)
    assert child == keys()
    assert child["nspkg"] == "nspkg-a 1.0; nspkg-b 1.1"


# ---------------------------------------------------------------------------
# Cost


def test_a_repeated_lookup_stays_cheap():
    """Two stat calls and a few dict lookups (about 7 us here, where one
    os.stat costs 2.6 us); the first lookup in a process reads the site
    folder's RECORD files (about 10 ms)."""
    import time

    import numpy

    library_version(numpy)
    calls = 2000
    start = time.perf_counter()
    for _ in range(calls):
        library_version(numpy)
    per_call = (time.perf_counter() - start) / calls
    assert per_call < 200e-6, per_call  # generous: the machine is shared
    assert libraries._owned_memo  # memoised, not resolved again
