"""Writing user modules the way an editor would, for tests that reload them."""

import os


def write_source(path, text) -> None:
    """Write `text` to `path` so that ``importlib.reload`` sees the change.

    The bytecode cache trusts a module whose source has the same whole-second
    mtime and size as when it was compiled, and a test's edits often land in
    one second and keep the size (``K = 3`` -> ``K = 5``); the mtime is moved
    at least 2 s past the previous version's.
    """
    previous = path.stat().st_mtime_ns if path.exists() else 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, max(stat.st_mtime_ns, previous + 2_000_000_000)))
