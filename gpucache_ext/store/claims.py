"""Single flight across processes: one process builds an entry every tier misses.

Processes that start together (a job's ranks, a team's notebooks, a test
matrix) all miss the same entries at once.  Before building an entry of a
persistent stage, a process *claims* it in the widest persistent tier that
keeps claims (the shared Redis tier, else the disk folder); the one that gets
the claim builds, files the entry in every tier, then releases the claim; the
others wait for the entry, not for the claim, and read it from that tier as a
hit ("built by another process, waited 180 ms").

Never stuck, never wrong:

- A claim lives for `claim_seconds` unless its builder renews it (a thread
  renews it every third of that while the build runs): a builder that dies
  (SIGKILL) frees it within that time, and a waiter claims it and builds.  On
  Redis the server expires it (``SET NX PX``: no client clock is read); on a
  folder a waiter judges a claim stale when its file has not changed for
  longer than that by the waiter's own clock (so clocks that differ between
  machines do not matter), and at once when its builder is a process of this
  machine that is gone.
- A waiter waits at most `wait_seconds` (``GPUCACHE_WAIT``; 0: never wait),
  then builds itself.  A tier that stops answering (Redis killed or stalled)
  is a tier with no claims: the process builds alone.
- A claim is no entry: what a waiter reads is an entry, checked as every
  read is (its signature), so a forged claim can delay a build, never
  change what is read.  Claims are kept per signing secret, so two jobs with
  different secrets on one server do not wait for each other.
- An entry built twice in a race (a claim broken while its builder still
  lives) is fine: both builds give the same entry.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

__all__ = ["CLAIM_SECONDS", "WAIT_SECONDS", "Claim", "Renewal", "FolderClaims", "new_owner"]

CLAIM_SECONDS = 10.0  # how long a claim lives unless renewed
WAIT_SECONDS = 120.0  # the longest a process waits for another's build (GPUCACHE_WAIT)
_HOST = socket.gethostname()


def new_owner() -> str:
    """An owner no other claim has: this machine, this process, and a random part."""
    return f"{_HOST}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


@dataclass
class Claim:
    """What claiming an entry came to: built here under a claim (`renewal`),
    found after waiting for another process's build (`entry`, from `tier`),
    or built here without a claim (no tier keeps claims, waiting is off, or
    the wait ran out: `gave_up`).  `waited`: seconds spent waiting."""

    entry: Any = None  # the entry another process built
    token: Any = None  # its effective token (a variant's, for a target that reads)
    tier: Optional[str] = None  # where it was found
    waited: float = 0.0
    gave_up: bool = False  # waited `wait_seconds` for a build that did not come
    renewal: Optional["Renewal"] = None
    claimed_in: Optional[str] = None  # the tier the claim is kept in


class Renewal:
    """A held claim, renewed in a daemon thread every third of its life until
    `release` (after the entry is filed, or the build failed)."""

    def __init__(self, tier, stage: str, token: str, owner: str, seconds: float):
        self.tier, self.stage, self.token, self.owner, self.seconds = tier, stage, token, owner, seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name="gpucache-claim", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        while not self._stop.wait(self.seconds / 3):
            if not self.tier.renew_claim(self.stage, self.token, self.owner, self.seconds):
                return  # (lost: broken as stale, or the tier is gone; the build goes on)

    def release(self) -> None:
        self._stop.set()
        self.tier.release_claim(self.stage, self.token, self.owner)


class FolderClaims:
    """Claims as files in a folder shared by processes (one node's, or a
    cluster file system's): ``<folder>/<stage>/<token>.claim``, created
    exclusively (``O_EXCL``, which network file systems keep where flock
    is unreliable), holding its owner, machine and process, rewritten at
    every renewal."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self._seen = {}  # (stage, token) -> (what the file held, when this process first saw it so)
        self._lock = threading.Lock()

    def path(self, stage: str, token: str) -> Path:
        return self.folder / stage / f"{token}.claim"

    def _body(self, owner: str, renewals: int) -> bytes:
        return json.dumps({"owner": owner, "host": _HOST, "pid": os.getpid(), "renewals": renewals}).encode()

    def claim(self, stage: str, token: str, owner: str, seconds: float) -> Optional[bool]:
        """True: claimed; False: another process holds it (or did, and it is
        not stale yet); None: claims cannot be kept here (the folder)."""
        path = self.path(stage, token)
        for _ in range(2):
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                handle = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if not self._stale(stage, token, path, seconds):
                    return False
                self._break(path)
                continue
            except OSError:
                return None
            try:
                os.write(handle, self._body(owner, 0))
            finally:
                os.close(handle)
            return True
        return False

    def _stale(self, stage: str, token: str, path: Path, seconds: float) -> bool:
        try:
            held = path.read_bytes()
        except OSError:
            return True  # (gone meanwhile: claim it)
        try:
            found = json.loads(held)
            if found.get("host") == _HOST and not _alive(int(found.get("pid", 0))):
                return True  # its builder, a process of this machine, is gone
        except (ValueError, TypeError, AttributeError):
            pass  # (a builder that died between creating and writing it: judged by time)
        now = time.monotonic()
        with self._lock:
            before = self._seen.get((stage, token))
            if before is None or before[0] != held:
                self._seen[(stage, token)] = (held, now)
                while len(self._seen) > 4096:
                    self._seen.pop(next(iter(self._seen)))
                return False
            return now - before[1] > seconds * 1.5  # unchanged for longer than it lives: its builder is gone

    def _break(self, path: Path) -> None:
        broken = path.with_name(f"{path.name}.broken-{uuid.uuid4().hex[:8]}")
        try:
            os.rename(path, broken)  # (atomic: of two breakers, one moves it)
            broken.unlink()
        except OSError:
            pass

    def renew(self, stage: str, token: str, owner: str, seconds: float) -> bool:
        path = self.path(stage, token)
        try:
            found = json.loads(path.read_bytes())
            if found.get("owner") != owner:
                return False
            temp = path.with_name(f"{path.name}.{uuid.uuid4().hex[:8]}.tmp")
            temp.write_bytes(self._body(owner, int(found.get("renewals", 0)) + 1))
            os.replace(temp, path)
            return True
        except (OSError, ValueError, AttributeError):
            return False

    def release(self, stage: str, token: str, owner: str) -> None:
        path = self.path(stage, token)
        try:
            if json.loads(path.read_bytes()).get("owner") == owner:
                path.unlink()
        except (OSError, ValueError, AttributeError):
            pass

    def held(self, stage: str, token: str) -> bool:
        return self.path(stage, token).exists()


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # (another user's process: alive)
        return True
    return True
