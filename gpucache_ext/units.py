"""The units every number a user reads is shown in: seconds as ms/s, bytes
as B/KiB/MiB/GiB, ages as s/m/h/d.  The cell report, the inspector, ``%gpucache
stats`` and the ``gpucache`` command all format through here."""

from __future__ import annotations


def format_seconds(s: float) -> str:
    """A duration for people: 0.04 ms, 351 ms, 12.3 s."""
    s = float(s or 0.0)
    if s == 0:
        return "0 ms"
    if s < 0.01:
        return f"{s * 1e3:.2f} ms"
    if s < 10:
        return f"{s * 1e3:.0f} ms"
    return f"{s:.1f} s"


def format_bytes(n: float) -> str:
    """A size for people, in powers of 1024: 512 B, 8.7 KiB, 1.2 GiB."""
    n = float(n or 0)
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def format_age(seconds: float) -> str:
    """An age for people: 45s, 3m, 5h, 2d."""
    age = max(0.0, float(seconds or 0.0))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if age >= size:
            return f"{age / size:.0f}{unit}"
    return f"{age:.0f}s"


def entries_phrase(count: int) -> str:
    """"1 entry", "3 entries"."""
    return f"{count} entr{'y' if count == 1 else 'ies'}"
