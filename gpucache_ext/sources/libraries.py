"""Which code is a library, and the key of a library's code.

This module owns two decisions the source identity (`sources`) relies on:

* **Library or user code**, by where a file lives, never by a module's name:
  the standard library's folder, an installed-package folder (the site
  folders, and every ``sys.path`` entry named ``site-packages`` or
  ``dist-packages``), or anywhere else (user code: a ``sched.py`` beside the
  notebook, an editable install, ``__main__``).  Built-in modules are the
  standard library's.
* **The key of an installed module**: the distribution that owns its file (the
  one whose RECORD lists it; for a namespace package's folder, every
  distribution with a file in it), that distribution's name and version read
  from its metadata, and, when the file's bytes differ from the hash its
  RECORD gives (an install edited in place), the file's content digest.  The
  key holds no path, mtime or inode, so an unedited install is keyed the same
  on every machine and in every process; a module's own ``__version__`` is
  added when it disagrees with the metadata (it may change on a reload
  without a reinstall), never trusted over it.

What is looked up is memoised by the ``os.stat`` identity (size, mtime in ns,
inode) of the files the answer came from (the module's file and each owning
distribution's metadata file), so a reinstall, a version bump or the reload of
an edited file is seen, while a repeated lookup costs two ``stat`` calls.  The
file -> distribution index is built once per site folder (and again when that
folder changes), reading the RECORD files of the distributions that have a
file under the module's top-level name only.  The standard library is keyed
by Python's version, which the typing toolchain holds.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata
import importlib.util
import os
import pathlib
import posixpath
import re
import site
import sys
import sysconfig
from typing import Dict, FrozenSet, List, NamedTuple, Optional, Tuple
from .. import memos
from ..importing import installed

__all__ = ["class_version", "file_origin", "library_version", "module_files"]

StatId = Optional[Tuple[int, int, int]]  # None: the path does not exist (or cannot be read)
Watched = Tuple[Tuple[str, StatId], ...]


def _stat_id(path: str) -> StatId:
    """What changes when a file is rewritten, replaced or renamed away."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_size, st.st_mtime_ns, st.st_ino


def _unchanged(watched: Watched) -> bool:
    for path, stat in watched:
        if _stat_id(path) != stat:
            return False
    return True


# ---------------------------------------------------------------------------
# Library or user code: by folder


class _Folders(NamedTuple):
    """The folders that make code a library, for one value of ``sys.path``, and
    the answers that depend on them (dropped with them when ``sys.path`` changes)."""

    path: Tuple[str, ...]
    packages: Tuple[str, ...]  # installed-package folders, real paths ending in a separator, longest first
    stdlib: Tuple[str, ...]
    origins: Dict[str, Tuple[Optional[str], Optional[str]]]  # file -> (origin, its site folder)
    files_origins: Dict[Tuple[str, ...], Optional[str]]


_current: Optional[_Folders] = None


def _folders() -> _Folders:
    global _current
    key = tuple(sys.path)
    folders = _current
    if folders is None or folders.path != key:  # a site folder added with site.addsitedir or sys.path
        folders = _current = _compute_folders(key)
    return folders


def _compute_folders(path: Tuple[str, ...]) -> _Folders:
    paths = sysconfig.get_paths()
    packages = {paths[k] for k in ("purelib", "platlib") if k in paths}
    packages |= {p for p in path if os.path.basename(p.rstrip(os.sep)) in ("site-packages", "dist-packages")}
    try:
        packages |= set(site.getsitepackages()) | {site.getusersitepackages()}
    except AttributeError:  # pragma: no cover - virtualenv's old site module
        pass
    stdlib = {paths[k] for k in ("stdlib", "platstdlib") if k in paths}

    def norm(folders):
        real = {os.path.realpath(f) + os.sep for f in folders if f}
        return tuple(sorted(real, key=lambda f: (-len(f), f)))

    return _Folders(path, norm(packages), norm(stdlib), {}, {})


def _locate(path: str) -> Tuple[Optional[str], Optional[str]]:
    """(origin, site folder) of a source file, memoised for this ``sys.path``."""
    folders = _folders()
    found = folders.origins.get(path)
    if found is None:
        found = folders.origins[path] = _origin(path, folders)
    return found


def _origin(path: str, folders: _Folders) -> Tuple[Optional[str], Optional[str]]:
    if not os.path.isabs(path):  # "<cell>", "<string>": code typed by the user
        return None, None
    real = os.path.realpath(path)
    for folder in folders.packages:  # checked first: site-packages may lie inside the stdlib folder
        if real.startswith(folder):  # longest first: a site folder inside another is its own
            return "installed", folder
    if real.startswith(folders.stdlib):
        return "stdlib", None
    return None, None


def file_origin(path: str) -> Optional[str]:
    """'installed', 'stdlib' or None (user code) for a source file."""
    return _locate(path)[0]


def module_files(module) -> Tuple[str, ...]:
    """The module's file and its package folders (``__path__``), as strings."""
    # the module's dict, not getattr: a module __getattr__ (PEP 562) is not asked for them
    names = getattr(module, "__dict__", None)
    if not isinstance(names, dict):
        names = {"__file__": getattr(module, "__file__", None), "__path__": getattr(module, "__path__", None)}
    files = [names.get("__file__")] + list(names.get("__path__") or [])
    return tuple(f for f in files if isinstance(f, str))


def _files_origin(files: Tuple[str, ...]) -> Optional[str]:
    """'stdlib', 'installed' or None (user code) for the files of one module:
    a module with one file outside the library folders is the user's."""
    memo = _folders().files_origins
    if files not in memo:
        origins = {file_origin(f) for f in files}
        memo[files] = None if None in origins else "stdlib" if origins == {"stdlib"} else "installed"
    return memo[files]


def _is_builtin(module) -> bool:
    spec = getattr(module, "__spec__", None)
    return getattr(module, "__name__", "") in sys.builtin_module_names or \
        spec is not None and getattr(spec, "origin", None) in ("built-in", "frozen")


# ---------------------------------------------------------------------------
# The key of a library


def library_version(module) -> Optional[str]:
    """A version string when `module` is a library, None when it is user code.

    A module is a library when it is built in, or when its files live in the
    standard library's folder or in an installed-package folder; where it
    lives decides, not its name.  The standard library gives "stdlib" (keyed by
    Python's version, in the typing toolchain); an installed module gives
    "<distribution> <version>" of the distribution(s) owning its files, plus
    what the metadata cannot vouch for (an edited file, a ``__version__`` that
    disagrees with it)."""
    files = module_files(module)
    if not files:
        return "stdlib" if _is_builtin(module) else None
    origin = _files_origin(files)
    if origin != "installed":
        return origin
    owned = _owned(files)
    version = getattr(module, "__version__", None)
    if isinstance(version, str) and version not in owned.versions:
        # read live: a reload may change it with no reinstall (and no metadata change)
        return f"{owned.key} (__version__ {version})"
    return owned.key


def class_version(cls) -> Optional[str]:
    """The version of the library that defines `cls` (a class or function), or
    None for user code.  ``__main__`` is always the user's, wherever its file
    lies (under pytest or ``python -m`` it is a library's script)."""
    name = getattr(cls, "__module__", None) or ""
    if name == "__main__":
        return None
    module = sys.modules.get(name)
    if module is None:
        return "stdlib" if name == "builtins" else None
    return library_version(module)


class _Owned(NamedTuple):
    key: str
    versions: FrozenSet[str]  # the owning distributions' versions, for the __version__ check
    watched: Watched  # what the key was read from, with its stat identity then


_owned_memo: Dict[Tuple[str, ...], _Owned] = memos.memo("libraries._owned_memo", {})


def _owned(files: Tuple[str, ...]) -> _Owned:
    owned = _owned_memo.get(files)
    if owned is None or not _unchanged(owned.watched):
        owned = _owned_memo[files] = _resolve(files)
    return owned


def _resolve(files: Tuple[str, ...]) -> _Owned:
    """Who owns these files, and the key that follows.  Every stat identity is
    taken before the bytes it stands for are read: a change in between then
    only costs another lookup, never a stale answer."""
    plain = tuple(f for f in files if not os.path.isdir(f))
    # a regular package is watched through its __init__ (a distribution adding
    # to it rewrites it); a namespace package, which has none, through its folders
    watched = [(f, _stat_id(f)) for f in (plain or files)]
    owners, edits, where = _owners(files, plain)
    if any(not os.path.isdir(dist) for dist in owners):
        # renamed or removed within the site folder's mtime granularity: read the RECORDs again
        for site_folder, _ in where:
            _Index.forget(site_folder)
        owners, edits, where = _owners(files, plain)
    if not owners:
        return _unowned(where, edits, watched)
    names = []
    for dist in sorted(owners):
        metadata = _metadata_file(dist) or dist
        watched.append((metadata, _stat_id(metadata)))
        names.append(_name_version(metadata, dist))
    return _key(names, edits, watched)


def _owners(files: Tuple[str, ...], plain: Tuple[str, ...]):
    """(owning metadata folders, edited files, [(site folder, path in it)])."""
    owners, edits, where = set(), [], []
    # a regular package is owned as its __init__ is; only a namespace package
    # (no file of its own) is owned by what its folders hold
    for path in plain or files:
        site_folder = _locate(path)[1]
        if site_folder is None:  # a standard-library file among installed ones: Python's version keys it
            continue
        real = os.path.realpath(path)
        rel = os.path.relpath(real, site_folder).replace(os.sep, "/")
        index = _Index.get(site_folder)
        if path in plain:
            found = index.file_owners(rel)
            owners.update(dist for dist, _ in found)
            edit = _edit(real, rel, [recorded for _, recorded in found])
            edits += [edit] if edit else []
        else:
            owners.update(index.folder_owners(rel))
        where.append((site_folder, rel))
    return owners, edits, where


def _key(names: List[Tuple[str, str]], edits: List[str], watched) -> _Owned:
    key = "; ".join(sorted({f"{name} {version}".strip() for name, version in names}))
    if edits:
        key += " edited " + " ".join(sorted(edits))
    return _Owned(key, frozenset(version for _, version in names), tuple(watched))


def _unowned(where: List[Tuple[str, str]], edits: List[str], watched) -> _Owned:
    """No RECORD lists the files (an egg, a hand-copied package, a system
    package manager's): the distributions that name the top-level package,
    all of them (a namespace may have several), watched through the site
    folder, which an install or removal changes."""
    folders = tuple((site_folder, _stat_id(site_folder)) for site_folder, _ in where)
    watched += folders
    by_top = _top_distributions(folders)
    names = []
    for _, rel in where:
        for dist in by_top.get(rel.split("/")[0].split(".")[0], ()):
            try:
                names.append((dist, importlib.metadata.version(dist)))
            except (importlib.metadata.PackageNotFoundError, ValueError):
                continue
    return _key(names or [("installed", "")], edits, watched)


_top_memo: Dict[tuple, Dict[str, List[str]]] = memos.memo("libraries._top_memo", {})


def _top_distributions(site_folders: Watched) -> Dict[str, List[str]]:
    """importlib.metadata's top-level name -> distributions, read again when
    ``sys.path`` or a site folder changes (it reads every distribution's files)."""
    key = (_folders().path, site_folders)
    if key not in _top_memo:
        _top_memo.clear()
        _top_memo[key] = importlib.metadata.packages_distributions()
    return _top_memo[key]


# ---------------------------------------------------------------------------
# Installed files: their distribution, their recorded hash, their digest


_digests: Dict[str, Tuple[StatId, str, str]] = memos.memo("libraries._digests", {})


def _digest(path: str) -> Optional[Tuple[str, str]]:
    """(hex, RECORD form) of the file's SHA-256, memoised by its stat identity."""
    stat = _stat_id(path)
    cached = _digests.get(path)
    if cached is not None and cached[0] == stat:
        return cached[1], cached[2]
    hasher = hashlib.sha256()
    try:
        with open(path, "rb") as f:  # (hashlib.file_digest is 3.11+; this project supports 3.10)
            for block in iter(lambda: f.read(1 << 20), b""):
                hasher.update(block)
    except OSError:
        return None
    raw = hasher.digest()
    recorded = "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    _digests[path] = (stat, raw.hex(), recorded)
    return raw.hex(), recorded


def _edit(real: str, rel: str, recorded: List[str]) -> Optional[str]:
    """None when the file is what its RECORD says was installed, else its
    path in the site folder and digest (the same on every machine)."""
    digest = _digest(real)
    if digest is None or digest[1] in recorded:
        return None
    return f"{rel}@{digest[0][:32]}"


def _metadata_file(dist: str) -> Optional[str]:
    for name in ("METADATA", "PKG-INFO"):
        path = os.path.join(dist, name)
        if os.path.isfile(path):
            return path
    return None


def _name_version(metadata: Optional[str], dist: str) -> Tuple[str, str]:
    """Name and Version from the metadata's headers (read up to the blank line
    that starts the long description, which can be large)."""
    headers: Dict[str, str] = {}
    try:
        with open(metadata or "", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    break
                key, sep, value = line.partition(":")
                if sep and key in ("Name", "Version"):
                    headers.setdefault(key, value.strip())
    except OSError:
        pass
    return headers.get("Name") or os.path.basename(dist).split("-")[0], headers.get("Version", "unknown")


def _mentions(text: str, top: str) -> bool:
    """Whether a RECORD may have a row under `top` (one quick scan: only those
    are parsed).  Rows are "path,hash,size", the path quoted when it holds a comma."""
    if '"' in text:  # rare: let the csv reader decide
        return True
    if text.startswith((top + "/", top + ",")):
        return True
    needle = "\n" + top
    at = text.find(needle)
    while at != -1:
        if text[at + len(needle):at + len(needle) + 1] in ("/", ","):
            return True
        at = text.find(needle, at + 1)
    return False


def _normalised(name: str) -> str:
    """A project or folder name as packaging normalises it (PEP 503), with _."""
    return re.sub(r"[-_.]+", "_", name).lower()


def _recorded_hash(text: str, rel: str) -> Optional[str]:
    """The hash a RECORD gives `rel` ("" for none), None when it does not list
    it: one search for the row, not a parse (a RECORD can hold thousands)."""
    prefix = rel + ","
    if text.startswith(prefix):
        start = 0
    else:
        found = text.find("\n" + prefix)
        if found == -1:
            return None
        start = found + 1
    end = text.find("\n", start)
    fields = text[start:end if end != -1 else len(text)].split(",")
    return fields[1].strip() if len(fields) > 1 else ""


class _Index:
    """Installed file -> owning distributions, for one site folder.

    A file is looked up first in the RECORD of the distributions named like
    its top-level folder (``numpy/...`` in ``numpy-2.4.6.dist-info``: one
    file read and one search, the case of nearly every module); otherwise,
    and for a namespace package's folders, every RECORD is read (about 7 ms
    for 130 distributions here, once) and parsed for that top-level name
    only.  Rebuilt when the site folder changes (an install or removal
    renames, adds or drops a metadata folder), or when an owner it names is
    gone (a change within the folder's mtime granularity: `_resolve` forgets
    the index)."""

    _indexes: Dict[str, "_Index"] = {}

    def __init__(self, folder: str):
        self.folder = folder
        self.stat = _stat_id(folder)
        self.folders = self._metadata_folders()
        self._records: Dict[str, str] = {}  # metadata folder -> RECORD text, read when needed
        self._all_read = False
        self.tops: Dict[str, Dict[str, List[Tuple[str, str]]]] = {}  # top -> rel -> [(dist, hash)]

    @property
    def records(self) -> Dict[str, str]:
        """Every distribution's RECORD text (read once, on first need)."""
        if not self._all_read:
            for dist in self.folders:
                self._record_of(dist)
            self._all_read = True
        return {dist: text for dist, text in self._records.items() if text}

    def _record_of(self, dist: str) -> str:
        text = self._records.get(dist)
        if text is None:
            text = self._records[dist] = self._record(dist)
        return text

    def _named_like(self, top: str) -> List[str]:
        """The metadata folders whose project name is the top-level folder's."""
        wanted = _normalised(top)
        return [dist for dist in self.folders
                if _normalised(os.path.basename(dist).rsplit(".", 1)[0].split("-")[0]) == wanted]

    @classmethod
    def get(cls, folder: str) -> "_Index":
        index = cls._indexes.get(folder)
        if index is None or index.stat != _stat_id(folder):
            index = cls._indexes[folder] = cls(folder)
        return index

    @classmethod
    def forget(cls, folder: str) -> None:
        cls._indexes.pop(folder, None)

    def _metadata_folders(self) -> List[str]:
        try:
            names = sorted(os.listdir(self.folder))
        except OSError:
            return []
        return [os.path.join(self.folder, n) for n in names if n.endswith((".dist-info", ".egg-info"))]

    @staticmethod
    def _record(dist: str) -> str:
        """RECORD's text; an egg-info's file list in RECORD's form."""
        try:
            with open(os.path.join(dist, "RECORD"), encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            pass
        if not os.path.isdir(dist):
            return ""
        files = importlib.metadata.PathDistribution(pathlib.Path(dist)).files or []
        return "".join(f'"{p.as_posix()}",,\n' for p in files)

    def _entries(self, top: str) -> Dict[str, List[Tuple[str, str]]]:
        found = self.tops.get(top)
        if found is not None:
            return found
        found = {}
        for dist in [d for d, text in self.records.items() if _mentions(text, top)]:
            for row in csv.reader(self.records[dist].splitlines()):
                if not row:
                    continue
                rel = row[0] if "./" not in row[0] and "//" not in row[0] else posixpath.normpath(row[0])
                if rel.split("/")[0] == top:
                    found.setdefault(rel, []).append((dist, row[1] if len(row) > 1 else ""))
        self.tops[top] = found
        return found

    def file_owners(self, rel: str) -> List[Tuple[str, str]]:
        """[(metadata folder, recorded hash)] of the distributions listing the file."""
        top = rel.split("/")[0]
        if top not in self.tops:
            for dist in self._named_like(top):
                text = self._record_of(dist)
                recorded = None if '"' in text else _recorded_hash(text, rel)
                if recorded is not None:
                    return [(dist, recorded)]
        return self._entries(top).get(rel, [])

    def folder_owners(self, rel: str) -> FrozenSet[str]:
        """The distributions with a file inside the folder (a namespace package may have several)."""
        prefix = rel + "/"
        entries = self._entries(rel.split("/")[0])
        return frozenset(dist for path, owners in entries.items() if path.startswith(prefix) for dist, _ in owners)


# ---------------------------------------------------------------------------
# Who calls


def library_caller(frame) -> Optional[str]:
    """The module of library code whose call is running in `frame`, or None
    when the caller is the user's (a cell, a module of theirs).  numba,
    numba-cuda and gpucache_ext count as libraries wherever they are
    installed (an editable checkout too).  Standard-library frames (a
    ``functools`` wrapper) are passed over to the code that called them.

    ``cuda.jit`` standing in for a cell asks this: numba-cuda calls
    ``cuda.jit`` itself to build the kernels of CUDA ufuncs (`vectorize`,
    `guvectorize`) and of ``cuda.reduce``, and an installed library may too."""
    own = _own_folders()
    while frame is not None:
        filename = frame.f_code.co_filename
        if not os.path.isabs(filename):  # "<cell>", "<string>": typed by the user
            return None
        origin = file_origin(filename)
        if origin == "stdlib":
            frame = frame.f_back
            continue
        if origin == "installed" or os.path.realpath(filename).startswith(own):
            return frame.f_globals.get("__name__") or filename
        return None
    return None


def is_library_file(filename: str) -> bool:
    """Whether a source file is a library's (installed, the standard library's,
    numba's, numba-cuda's or gpucache_ext's), not the user's."""
    if not os.path.isabs(filename):
        return False
    return file_origin(filename) is not None or os.path.realpath(filename).startswith(_own_folders())


def _own_folders() -> Tuple[str, ...]:
    global _OWN
    if _OWN is None:
        here = os.path.dirname(os.path.abspath(__file__))
        folders = {here}
        for package in ("numba", "numba_cuda", "numba_cuda_mlir"):  # (those installed)
            spec = importlib.util.find_spec(package) if installed(package) else None
            if spec is not None and spec.submodule_search_locations:
                folders |= set(spec.submodule_search_locations)
        _OWN = tuple(os.path.realpath(f) + os.sep for f in folders)
    return _OWN


_OWN: Optional[Tuple[str, ...]] = None
