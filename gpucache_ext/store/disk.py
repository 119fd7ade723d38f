"""The disk tier: llvm, ptx and cubin entries that survive kernel restarts.

    <directory>/v1/<stage>/<token[:2]>/<token>.entry

The token names the file; the file's header repeats the full key, which is
checked on load with the payload's checksum (see `codec`).  Anything that
does not check out (truncated, flipped bits, garbage, another key or
toolchain) is a miss, counted as ``corrupt``, deleted and rewritten by the
compile that follows; it never reaches the user as an exception.

Writes go to a temporary file in the same folder, then `os.replace`: readers
see the old entry or the new one, never a torn one, even if the writer is
killed mid-write.  A size cap (default 1 GiB) is kept by evicting the least
recently used entries (hits refresh an entry's mtime) under a file lock, so
several processes can share one directory.  If the directory cannot be
written (read-only, disk full), the tier warns once and goes on read-only:
the notebook keeps working from memory.  A failed write that concerns one
entry's path alone (a directory or other non-file in its place, a file that
may not be replaced) costs that entry only: the write is skipped, counted
(``unwritable``) and logged, and what stands there is left alone.  Only
regular files are entries: anything else under the folder is not listed,
counted, evicted or verified.

With a secret (``GPUCACHE_SECRET``) entries are signed and checked as the
shared tier's are (see `gpucache_ext.store.signing`): a folder on a cluster file
system is as open as a Redis server.  The default folder is created private
to the user (0700); a folder that other users can write to gives a
`SecurityWarning` unless entries are signed.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
import threading
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple


from .codec import FORMAT_VERSION, OK, PREVIOUS_SECRET, BadEntry, check_stored, decode, encode, header_entry
from ..keys.stagespec import PERSISTENT_STAGES
from ..errors import SecurityWarning, TierWarning
from .claims import FolderClaims
from .fsutil import write_atomically
from .signing import HEAD_BYTES, Keyring, accepted, signature_length, strip
from .tiers import DROPPED, Entry, Lookup, Tier, open_note, seal_note
from ..toolchain import sign_memo

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 1 << 30
_SUFFIX = ".entry"
_TEMP_PREFIX = ".tmp-"
# the drop log: which entries were dropped, why and when (what explains the
# misses that follow, in every process sharing the folder); its older half
# goes past this size
_DROP_LOG_BYTES = 1 << 20
_STALE_TEMP_SECONDS = 3600
# errors of the file system, whichever path met them: no write can succeed
_FOLDER_ERRNOS = frozenset(getattr(errno, name) for name in ("ENOSPC", "EDQUOT", "EROFS") if hasattr(errno, name))


def default_directory() -> Path:
    """The platform's user cache folder for gpucache_ext (platformdirs)."""
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("gpucache_ext", appauthor=False))


# GPUCACHE_DIR values that turn the disk tier off
OFF_VALUES = ("", "off", "none", "0", "false", "no")


def configured_directory(directory=None) -> Optional[Path]:
    """The disk tier's folder: `directory` if given, else ``GPUCACHE_DIR``,
    else the platform's user cache folder; None where the value turns the
    disk tier off ("off", "none", ...).  The one reading of the setting, for
    the API, the magic and the ``gpucache`` command."""
    if directory is None:
        directory = os.environ.get("GPUCACHE_DIR") or default_directory()
    if str(directory).strip().lower() in OFF_VALUES:
        return None
    return Path(directory).expanduser()


def writable_by_others(directory: Path) -> Optional[str]:
    """Why users other than this one can write entries under `directory`
    (the folder, its format folder or a stage's folder), or None.  A write
    bit counts only for those who can get to the folder: inside a folder its
    group (or everyone else) cannot enter, as the default 0700 one, subfolders
    that the umask left group-writable are still this user's alone."""
    if not hasattr(os, "geteuid"):  # (no POSIX modes to read)
        return None
    me = os.geteuid()
    root = directory / f"v{FORMAT_VERSION}"
    shut = 0  # the write bits of those a folder above shuts out (no search bit for them)
    for folder in (directory, root, *(root / stage for stage in PERSISTENT_STAGES)):
        try:
            st = folder.stat()
        except OSError:
            continue
        if st.st_uid != me and st.st_uid != 0:
            return f"{folder} belongs to user id {st.st_uid}"
        writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) & ~shut
        if writable:
            who = "everyone" if writable & stat.S_IWOTH else "its group"
            return f"{folder} is writable by {who} (mode {stat.S_IMODE(st.st_mode):o})"
        if folder in (directory, root):  # (the stage folders are inside both)
            shut |= (0 if st.st_mode & stat.S_IXGRP else stat.S_IWGRP) | \
                (0 if st.st_mode & stat.S_IXOTH else stat.S_IWOTH)
    return None


class DiskTier(Tier):
    """Entries of the llvm, ptx and cubin stages as files under one directory.

    ``keyring`` signs and checks entries (default: none; entries unsigned,
    and signed ones read unchecked).  ``private`` creates the folder, if it
    does not exist, readable by this user alone (the default folder is)."""

    name = "disk"
    stages = PERSISTENT_STAGES

    @classmethod
    def from_settings(cls, settings) -> Optional["DiskTier"]:
        """The disk tier `settings` (`registry.TierSettings`) ask for, in
        their folder (created private where it is the default one); None
        without a folder.  It reads entries signed or not (a folder is as
        private as its owner makes it), and signs with the first secret."""
        if settings.directory is None:
            return None
        directory = Path(settings.directory).expanduser()
        return cls(directory, settings.max_disk_bytes, keyring=Keyring(settings.keyring.secrets, True),
                   private=directory == default_directory(), warn=not settings.quiet)

    def __init__(self, directory, max_bytes: Optional[int] = DEFAULT_MAX_BYTES, *,
                 keyring: Optional[Keyring] = None, private: bool = False, warn: bool = True):
        if max_bytes is not None and (not isinstance(max_bytes, int) or max_bytes < 1):
            raise ValueError(f"max_bytes={max_bytes!r} is invalid; use None or a positive int")
        self.directory = Path(directory).expanduser()
        self.root = self.directory / f"v{FORMAT_VERSION}"
        self.max_bytes = max_bytes
        self._drop_log = self.root / "dropped.jsonl"
        self._drops: Optional[tuple] = None  # ((mtime, size), {(stage, token): (why, time)}) read last
        self._sign_with(keyring if keyring is not None else Keyring(allow_unsigned=True))
        self.writable = True
        self.corrupt: Counter = Counter()
        self.unwritable: Counter = Counter()  # writes skipped for an odd path (a directory where an entry goes)
        if private and not self.directory.exists():
            try:
                self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            except OSError:
                pass  # (the first write says what is wrong)
        if self.keyring.signs:  # the toolchain memo kept in the folder is signed too
            sign_memo(self.directory, self.keyring)
        # why others could plant entries here, when nothing checks them (None: they cannot)
        self.exposed = None if self.keyring.signs else writable_by_others(self.directory)
        if self.exposed and warn:
            warnings.warn(
                f"gpucache_ext: other users can write to the cache folder {self.directory} ({self.exposed}), "
                "so they could plant machine code that runs in your kernels. Set GPUCACHE_SECRET to sign "
                f"and check its entries, or make the folder yours alone: chmod 700 {self.directory}",
                SecurityWarning, stacklevel=3)
        self._sizes: Optional[Dict[str, List[int]]] = None  # stage -> [count, bytes]
        self._lock = threading.Lock()
        self._claims: Optional[FolderClaims] = None

    def __repr__(self):
        return f"<DiskTier {self.directory} max_bytes={self.max_bytes} signed={self.signed}>"

    @property
    def location(self) -> str:
        return str(self.directory)

    # -- paths -------------------------------------------------------------
    def path(self, stage: str, token: str) -> Path:
        return self.root / stage / token[:2] / f"{token}{_SUFFIX}"

    def _files(self, stage: str) -> Iterator[Path]:
        base = self.root / stage
        try:
            shards = list(os.scandir(base))
        except OSError:
            return
        for shard in shards:
            try:
                names = list(os.scandir(shard.path))
            except OSError:
                continue
            for item in names:
                if item.name.endswith(_SUFFIX) and not item.name.startswith(_TEMP_PREFIX) and _is_file(item):
                    yield Path(item.path)

    # -- Tier interface ------------------------------------------------------
    def get(self, stage: str, token: str) -> Optional[Entry]:
        return self.lookup(stage, token).entry

    def lookup(self, stage: str, token: str, *, query: bool = False) -> Lookup:
        path = self.path(stage, token)
        try:
            data = path.read_bytes()
        except OSError:  # absent, vanished, unreadable: a miss
            return Lookup(None)
        body, refused = self._unseal(stage, data, count=not query)
        if body is None:  # (left there: the compile that follows replaces it)
            return Lookup(None, refused)
        try:
            entry = decode(body, stage, token)
        except BadEntry:
            if not query:
                self.corrupt[stage] += 1
                self._remove(stage, path, "damaged")
            return Lookup(None)
        if not query:
            try:
                os.utime(path)  # least recently used is evicted first
            except OSError as exc:  # (read-only folder: its order stays as it was)
                log.debug("could not refresh %s: %s", path, exc)
        return Lookup(entry)

    def put(self, stage: str, entry: Entry) -> None:
        if not self.writable:
            return
        data = self.keyring.sign(encode(stage, entry))
        path = self.path(stage, entry.token)
        self._sizes_by_stage()  # count what was there before this write
        try:
            # a rewrite replaces the old file's bytes, it does not add to them
            replaced = write_atomically(path, data, _TEMP_PREFIX)
        except OSError as exc:
            if self._one_entry(stage, exc):
                self._skip(stage, path, exc)
            else:
                self._stop_writing(exc)
            return
        self._account(stage, 0 if replaced is not None else 1, len(data) - (replaced or 0))
        if self.max_bytes is not None and self._total_bytes() > self.max_bytes:
            self.prune(int(self.max_bytes * 0.9))

    def delete(self, stage: str, token: str) -> bool:
        return self._remove(stage, self.path(stage, token), "evicted")

    # -- claims (`gpucache_ext.store.claims`): files beside the entries ------
    keeps_claims = True

    @property
    def claims(self) -> FolderClaims:
        if self._claims is None:
            self._claims = FolderClaims(self.root / "claims" / self.claim_space)
        return self._claims

    def claim(self, stage: str, token: str, owner: str, seconds: float) -> Optional[bool]:
        return self.claims.claim(stage, token, owner, seconds) if self.writable else None

    def renew_claim(self, stage: str, token: str, owner: str, seconds: float) -> bool:
        return self.claims.renew(stage, token, owner, seconds)

    def release_claim(self, stage: str, token: str, owner: str) -> None:
        self.claims.release(stage, token, owner)

    def clear(self, stage: str) -> None:
        for path in list(self._files(stage)):
            self._remove(stage, path, "cleared")

    def _note_path(self, key: str) -> Path:
        return self.root / "notes" / key[:2] / f"{key}.json"

    def get_note(self, key: str) -> Optional[dict]:
        try:
            data = self._note_path(key).read_bytes()
        except OSError:
            return None
        return open_note(self.keyring, key, data)

    def put_note(self, key: str, note: dict) -> None:
        if not self.writable:
            return
        try:
            write_atomically(self._note_path(key), seal_note(self.keyring, key, note), _TEMP_PREFIX)
        except OSError as exc:  # (a note only saves time: the cache goes on without it)
            log.info("could not file the note %s in %s: %s", key[:12], self.directory, exc)

    def dropped(self, stage: str, token: str) -> Optional[Tuple[str, float]]:
        """Why and when the entry was dropped, from the folder's drop log:
        every process sharing the folder reads what the others dropped."""
        try:
            stat = self._drop_log.stat()
        except OSError:
            return None
        if self._drops is None or self._drops[0] != (stat.st_mtime_ns, stat.st_size):
            self._drops = ((stat.st_mtime_ns, stat.st_size), _read_drops(self._drop_log))
        return self._drops[1].get((stage, token))

    def entries(self, stage: str) -> Iterator[Entry]:
        for path in self._files(stage):
            try:
                head = read_head(path)
                if accepted(self.keyring.classify(head)):  # (what `get` would refuse is not listed)
                    yield header_entry(strip(head))
            except (OSError, BadEntry):
                continue

    def stats(self, stage: str) -> Dict[str, int]:
        count, size = self._sizes_by_stage()[stage]
        return {"entries": count, "bytes": size, "corrupt": self.corrupt[stage],
                "unwritable": self.unwritable[stage], **self._signing_stats(stage)}

    def signatures(self, stage: str) -> Dict[str, int]:
        """How this stage's entries are signed, from their first bytes (no
        signature checked: see `gpucache_ext.store.signing.Keyring.classify`)."""
        def heads():
            for path in self._files(stage):
                try:
                    with open(path, "rb") as handle:
                        yield handle.read(HEAD_BYTES)
                except OSError:
                    continue
        return self._classify(heads())

    # -- maintenance ---------------------------------------------------------
    def scan(self, stage: Optional[str] = None) -> List[Tuple[str, Path, os.stat_result]]:
        """(stage, path, stat) of every entry file, for one stage or all."""
        found = []
        for s in (self.stages if stage is None else (stage,)):
            for path in self._files(s):
                try:
                    found.append((s, path, path.stat()))
                except OSError:
                    continue
        return found

    def prune(self, max_bytes: int, progress: Optional[Callable[[int, int], None]] = None) -> Tuple[int, int]:
        """Evict least recently used entries until the tier holds at most
        `max_bytes`; returns (entries removed, bytes freed).  Takes the
        directory's lock, so concurrent prunes do not fight."""
        removed = freed = 0
        try:
            with _folder_lock(self.root, timeout=30):
                files = sorted(self.scan(), key=lambda item: item[2].st_mtime)
                total = sum(st.st_size for _, _, st in files)
                for done, (stage, path, st) in enumerate(files, 1):
                    if total <= max_bytes:
                        break
                    if self._remove(stage, path, "pruned"):
                        removed += 1
                        freed += st.st_size
                    total -= st.st_size
                    if progress:
                        progress(done, len(files))
                self._clean_temporaries()
        except OSError as exc:  # (filelock's Timeout is one)
            warnings.warn(f"gpucache_ext: could not prune the disk cache at {self.directory}: {exc}",
                          TierWarning, stacklevel=2)
        self._sizes = None
        return removed, freed

    def verify(self, fix: bool = False, progress: Optional[Callable[[int, int], None]] = None,
               toolchain_stages=PERSISTENT_STAGES, resigned: Optional[List] = None):
        """Check every entry's signature (when signed), key and checksum, and
        for `toolchain_stages` the toolchain it was built by; with `fix`,
        delete the bad ones and sign again those a previous secret signed
        (listed in `resigned` as (stage, path)).

        Returns a list of (stage, path, reason) for the bad entries."""
        bad = []
        files = self.scan()
        for done, (stage, path, _) in enumerate(files, 1):
            token = path.name[: -len(_SUFFIX)]
            try:
                outcome, body, problem = check_stored(self.keyring, path.read_bytes(), stage, token,
                                                      stage in toolchain_stages)
                if outcome == PREVIOUS_SECRET and resigned is not None:
                    if fix:
                        write_atomically(path, self.keyring.sign(body), _TEMP_PREFIX)
                    resigned.append((stage, path))  # (after the write: one that fails is not listed)
                elif outcome not in (OK, PREVIOUS_SECRET):
                    bad.append((stage, path, problem))
                    if fix:
                        self._remove(stage, path, "damaged")
            except OSError:
                pass
            if progress:
                progress(done, len(files))
        if fix:
            self._clean_temporaries(max_age=0)
        return bad

    # -- internals -----------------------------------------------------------
    def _remove(self, stage, path: Path, why: Optional[str] = None) -> bool:
        """Remove one entry file; `why` (a `DROPPED` key) goes to the drop log."""
        self._sizes_by_stage()  # count what was there before this removal
        try:
            size = path.stat().st_size
            path.unlink()
        except OSError:
            return False
        self._account(stage, -1, -size)
        if why is not None:
            self._log_drop(stage, path.name[: -len(_SUFFIX)], why)
        return True

    def _log_drop(self, stage: str, token: str, why: str) -> None:
        """Append to the drop log (one short line: appends of many processes
        do not mix); past `_DROP_LOG_BYTES` its older half goes."""
        line = json.dumps({"stage": stage, "token": token, "why": why, "time": time.time()}) + "\n"
        try:
            with open(self._drop_log, "a", encoding="utf-8") as handle:
                handle.write(line)
                large = handle.tell() > _DROP_LOG_BYTES
            if large:
                with _folder_lock(self.root, timeout=5):
                    lines = self._drop_log.read_text(encoding="utf-8").splitlines(True)
                    write_atomically(self._drop_log, "".join(lines[len(lines) // 2:]).encode(), _TEMP_PREFIX)
        except OSError as exc:  # (a read-only folder, a lock's Timeout: the miss says less, nothing else changes)
            log.debug("could not log the dropped entry %s: %s", token[:12], exc)

    def _one_entry(self, stage: str, exc: OSError) -> bool:
        """Whether a failed write concerns the entry's own path (its shard or
        file: a directory in its place, a file that may not be replaced) rather
        than the whole folder.  The stage's folder decides: when it is a folder
        this process may write to, what failed was that one path."""
        if exc.errno in _FOLDER_ERRNOS:
            return False
        folder = self.root / stage
        return folder.is_dir() and os.access(folder, os.W_OK | os.X_OK)

    def _skip(self, stage: str, path: Path, exc: OSError) -> None:
        """One entry not written: a miss for it next time, nothing else.  What
        stands in its place is left alone (a directory is not ours to delete)."""
        with self._lock:
            self.unwritable[stage] += 1
        log.warning("gpucache_ext: could not write the disk cache entry %s (%s); skipped, other entries are "
                    "still written", path, exc.strerror or exc)

    def _stop_writing(self, exc: OSError) -> None:
        self.writable = False
        warnings.warn(
            f"gpucache_ext: cannot write to the disk cache at {self.directory} ({exc.strerror or exc}); "
            "going on with the memory cache only. Free space, fix permissions or set GPUCACHE_DIR.",
            TierWarning, stacklevel=3)

    def _sizes_by_stage(self) -> Dict[str, List[int]]:
        with self._lock:
            if self._sizes is None:
                sizes = {s: [0, 0] for s in self.stages}
                for stage, _, st in self.scan():
                    sizes[stage][0] += 1
                    sizes[stage][1] += st.st_size
                self._sizes = sizes
            return self._sizes

    def _account(self, stage, count, size) -> None:
        sizes = self._sizes_by_stage()
        with self._lock:
            sizes[stage][0] = max(0, sizes[stage][0] + count)
            sizes[stage][1] = max(0, sizes[stage][1] + size)

    def _total_bytes(self) -> int:
        return sum(size for _, size in self._sizes_by_stage().values())

    def _clean_temporaries(self, max_age=_STALE_TEMP_SECONDS) -> None:
        """Remove temp files left by writers that died mid-write."""
        now = time.time()
        for stage in self.stages:
            base = self.root / stage
            for temp in base.glob(f"*/{_TEMP_PREFIX}*"):
                try:
                    if now - temp.stat().st_mtime >= max_age:
                        temp.unlink()
                except OSError:
                    continue


def _folder_lock(root: Path, timeout: float):
    """The folder's lock for what rewrites more than one file (a prune, the
    drop log's trim); its Timeout is an OSError.  filelock is imported here,
    not with the tier: a process that never prunes never loads it."""
    from filelock import FileLock

    return FileLock(str(root / ".lock"), timeout=timeout)


def _is_file(item: os.DirEntry) -> bool:
    """A regular file (or a link to one): something else named like an entry is none."""
    try:
        return item.is_file()
    except OSError:
        return False


def read_head(path: Path) -> bytes:
    """The first bytes of an entry file (any signature included): enough for its header."""
    with open(path, "rb") as handle:
        start = handle.read(65536)
        skip = signature_length(start)
        if len(start) >= skip + 44:
            end = skip + 44 + int.from_bytes(start[skip + 40:skip + 44], "big")
            if end > len(start):
                start += handle.read(end - len(start))
        return start


def _read_drops(path: Path) -> Dict[Tuple[str, str], Tuple[str, float]]:
    """The drop log as {(stage, token): (why, when)}, the latest line per
    entry; lines that do not read as one are passed over (the log only
    explains: it is never trusted with more)."""
    drops: Dict[Tuple[str, str], Tuple[str, float]] = {}
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return drops
    for line in text.splitlines():
        try:
            record = json.loads(line)
            stage, token, why, when = record["stage"], record["token"], record["why"], float(record["time"])
        except (ValueError, TypeError, KeyError):
            continue
        if isinstance(stage, str) and isinstance(token, str) and why in DROPPED:
            drops[(stage, token)] = (why, when)
    return drops
