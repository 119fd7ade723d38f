"""The gpucache command (also python -m gpucache_ext): look after the disk cache,
and check the shared (Redis) cache.

    gpucache stats                          entries, bytes and signatures per stage and tier
    gpucache ls [--kernel K] [--stage S] [--older-than 2d] [--newer-than 1h]
    gpucache show TOKEN [--out FILE] [--toolchain]  an entry's header and artifact
    gpucache export NAME_OR_TOKEN FILE      a kernel's fatbin, or an entry's cubin, PTX or LLVM IR, to ship it
    gpucache diff TOKEN_A TOKEN_B [--stage S]  two ptx entries' PTX, or two cubin entries' SASS, side by side
    gpucache clear [--stage S] [--yes]      delete entries (asks first)
    gpucache prune --max-bytes 500M         evict least recently used entries
    gpucache verify [--fix] [--toolchain]   check every entry: signature, key, checksum (toolchain)
    gpucache verify --recompile [--sample F]  compile entries again and compare
    gpucache verify --shared [--fix]        check every shared entry's signature, key and checksum

--dir picks the cache folder (default: GPUCACHE_DIR, else the platform's user
cache folder); --redis-url the shared cache (default: GPUCACHE_REDIS_URL; "off":
none); --json prints machine-readable output; all three may come before or
after the command.  The tiers are read with the settings every cache reads
(`gpucache_ext.store.settings`: GPUCACHE_SECRET, GPUCACHE_SECRET_PREVIOUS,
GPUCACHE_SHARED_UNSIGNED, GPUCACHE_REDIS_PREFIX); a Redis password is never
printed.  Output piped into a command that stops reading (gpucache ls | head)
ends quietly.

Reading the cache imports no numba: stats and ls read headers only; show and
verify check every entry's key and checksum, and the toolchain of llvm
entries (package versions).  The toolchain of ptx and cubin entries is
compared with --toolchain: it is read from the folder's memo (see
`toolchain`) once numba-cuda says where it finds libdevice and libcudadevrt
(importing numba, loading no CUDA library).  Without it an entry of another
toolchain still reads as intact, which it is: its token names its toolchain,
so no compile here is ever served it.  Only verify --recompile compiles.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import os
import re
import sys
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import List, Optional
from urllib.parse import urlsplit

from .store import settings
from .store.codec import (CORRUPT, OK, OTHER_TOOLCHAIN, PERSISTENT_STAGES, PREVIOUS_SECRET, BadEntry, check_stored,
                    decode, read_header)
from .store.disk import OFF_VALUES, DiskTier, configured_directory, default_directory
from .store.shared import display_url
from .store.signing import (BAD_SIGNATURE, CURRENT, NOT_SIGNED, OTHER_SECRET, PREVIOUS, UNSIGNED, Keyring,
                      Rejected, strip)
from .config import summary_fields
from .units import format_age, format_bytes
from .tokens import find_token, short_name, short_token
from .toolchain import stage_toolchain

log = logging.getLogger(__name__)

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_AGES = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
# how entries are signed, as `Keyring.classify` reads their first bytes (stats'
# columns); the last two are what this reader refuses
_SIGNATURE_KINDS = (CURRENT, PREVIOUS, NOT_SIGNED, UNSIGNED, OTHER_SECRET)
_REFUSED_KINDS = (UNSIGNED, OTHER_SECRET)
# what verify --shared finds in an entry; all but the first two are bad
_OUTCOMES = (OK, PREVIOUS_SECRET, UNSIGNED, BAD_SIGNATURE, OTHER_SECRET, CORRUPT, OTHER_TOOLCHAIN)
# the command reads whole stages at once: a longer timeout than a compile's lookups
_REDIS_TIMEOUT = 5.0


class CommandError(Exception):
    """A problem with the command's input; printed without a traceback."""


def parse_bytes(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", text.lower())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size; use e.g. 1000000, 500M or 2G")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction in (0, 1], e.g. 0.1")
    return value


def parse_age(text: str) -> float:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text.lower())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not an age; use e.g. 30m, 12h or 7d")
    return float(match.group(1)) * _AGES[match.group(2)]


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


class Progress:
    """A progress bar on stderr for long operations (only on a terminal)."""

    def __init__(self, label: str, enabled: bool):
        self.label = label
        self.enabled = enabled and sys.stderr.isatty()
        self._last = 0.0

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or (time.monotonic() - self._last < 0.1 and done < total):
            return
        self._last = time.monotonic()
        width = 30
        filled = width * done // max(total, 1)
        sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _rows(tier: DiskTier, stages, kernel=None, older=None, newer=None, progress=None):
    now = time.time()
    files = [item for item in tier.scan() if item[0] in stages]
    rows = []
    for done, (stage, path, st) in enumerate(files, 1):
        if progress:
            progress(done, len(files))
        try:
            header, _ = read_header(strip(_head(path)))
        except (OSError, BadEntry):
            continue
        if header.get("marker"):
            continue
        short = short_name(header["kernel"])
        if kernel and kernel not in (header["kernel"], short):
            continue
        age = now - float(header["created"])
        if (older is not None and age < older) or (newer is not None and age > newer):
            continue
        rows.append({"stage": stage, "token": header["token"], "kernel": header["kernel"],
                     "signature": header["signature"], "config": header["config"],
                     # an entry's size is its artifact's, as in show and the inspector
                     "bytes": int(header["size"]), "file_bytes": st.st_size,
                     "created": header["created"], "age_seconds": round(age, 1),
                     "last_used": st.st_mtime, "place": header.get("place")})
    return sorted(rows, key=lambda r: r["created"], reverse=True)


def _head(path: Path) -> bytes:
    from .store.disk import read_head

    return read_head(path)


def _toolchain_stages(args):
    """The stages whose entries' toolchain is compared: llvm's (package
    versions) always, ptx's and cubin's with --toolchain."""
    return PERSISTENT_STAGES if getattr(args, "toolchain", False) else ("llvm",)


def _read_toolchain(directory: Optional[Path], stages) -> None:
    """Learn the toolchain that entries of `stages` are checked against (`codec.decode`)
    from the cache folder's memo, as a new process compiling there learns it.

    llvm entries need package versions only.  For ptx and cubin entries this
    asks numba-cuda's own search where libdevice and libcudadevrt are (which
    imports numba, but loads no CUDA library): the memo's values are keyed by
    the files found, so the check is the one a compile there would make.  A
    part the memo does not know is probed (loading the library), and
    remembered."""
    for stage in PERSISTENT_STAGES:
        if stage in stages:
            stage_toolchain(stage, directory)


def cmd_stats(tier, args, out):
    disk = (_tier_report(tier, "unsigned: no GPUCACHE_SECRET, signatures are not checked")
            if tier is not None else {"location": None, "used": False, "note": args.disk_problem})
    shared = _shared_report(_redis_url(args))
    if args.json:
        out({"directory": str(tier.directory) if tier is not None else None,
             "stages": disk.get("stages", {}), "bytes": disk.get("bytes", 0), "disk": disk, "shared": shared})
    else:
        _print_tier("disk cache", disk, "gpucache verify", out)
        if shared is not None:
            out("")
            _print_tier("shared cache", shared, "gpucache verify --shared", out)
    return 1 if shared is not None and "error" in shared else 0


def _tier_report(tier, unsigned: str) -> dict:
    """Entries, bytes and how they are signed per stage (from each entry's
    first bytes: `Keyring.classify`; verify checks the signatures)."""
    stages = {}
    for stage in PERSISTENT_STAGES:
        counts, found = tier.stats(stage), tier.signatures(stage)
        stages[stage] = {"entries": counts["entries"], "bytes": counts["bytes"],
                         "signatures": {kind: found.get(kind, 0) for kind in _SIGNATURE_KINDS}}

    def total(kind):
        return sum(s["signatures"][kind] for s in stages.values())
    secrets = len(tier.keyring.secrets)
    signing = ("signed with GPUCACHE_SECRET" + ("; GPUCACHE_SECRET_PREVIOUS accepted for reading"
                                                 if secrets > 1 else "")) if secrets else unsigned
    return {"location": tier.location, "used": True, "signed": bool(secrets), "signing": signing,
            "stages": stages, "entries": sum(s["entries"] for s in stages.values()),
            "bytes": sum(s["bytes"] for s in stages.values()),
            "refused": {kind: total(kind) for kind in _REFUSED_KINDS}, "previous_secret": total(PREVIOUS)}


def _print_tier(label: str, report: dict, verify: str, out) -> None:
    if "error" in report:
        out(report["error"])
        return
    if not report["used"]:
        out(f"{label}: {report['note']}")
        return
    out(f"{label}: {report['location']} ({report['signing']})")
    columns = ("current", "previous", "not signed", "refused: unsigned", "other secret")
    out(f"{'stage':<7}{'entries':>9}{'size':>12}" + "".join(f"{c:>{len(c) + 2}}" for c in columns))
    rows = [(stage, s["entries"], s["bytes"], s["signatures"]) for stage, s in report["stages"].items()]
    rows.append(("total", report["entries"], report["bytes"],
                 {kind: sum(s["signatures"][kind] for s in report["stages"].values())
                  for kind in _SIGNATURE_KINDS}))
    for name, entries, size, signatures in rows:
        out(f"{name:<7}{entries:>9}{format_bytes(size):>12}"
            + "".join(f"{signatures[kind]:>{len(c) + 2}}" for kind, c in zip(_SIGNATURE_KINDS, columns)))
    refused = report["refused"]
    if sum(refused.values()):
        out(f"{_count(sum(refused.values()), 'entry', 'entries')} would be refused here ("
            + ", ".join(f"{n} {kind}" for kind, n in refused.items() if n)
            + f"): a compile here builds them again; {verify} --fix removes them")
    if report["previous_secret"]:
        out(f"{_count(report['previous_secret'], 'entry', 'entries')} signed with a previous secret: "
            f"{verify} --fix signs them again with GPUCACHE_SECRET")


def _redis_url(args) -> Optional[str]:
    """The shared cache's URL: --redis-url, else GPUCACHE_REDIS_URL; None when
    unset or off (read as `KernelCache.from_environment` reads it)."""
    url = args.redis_url if args.redis_url is not None else os.environ.get("GPUCACHE_REDIS_URL")
    if url is None or url.strip().lower() in OFF_VALUES:
        return None
    return url.strip()


def _hide(text: str, url: str) -> str:
    """`text` with `url`'s password (if any) hidden: a server's error may quote it."""
    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    return text.replace(password, "***") if password else text


def _shared_tier(url: str):
    """The shared tier as a cache here would make it (settings from the
    environment), checked to answer; raises `UnsignedSharedTier` for a tier
    without a secret and no opt-in, `CommandError` for anything else."""
    from .store.shared import RedisNotInstalled, RedisTier, UnsignedSharedTier

    try:
        tier = RedisTier(url, settings.keyring(), timeout=_REDIS_TIMEOUT)
    except UnsignedSharedTier:
        raise
    except (settings.SettingError, RedisNotInstalled) as exc:
        raise CommandError(str(exc)) from None
    except ValueError as exc:  # redis-py reads no such URL
        raise CommandError(f"{display_url(url)} is not a Redis URL ({_hide(str(exc), url)}); "
                           "use e.g. redis://cache-host:6379/0") from None
    import redis

    try:
        tier.client.ping()
    except (redis.RedisError, OSError) as exc:
        raise _NotAnswering(f"the shared cache at {tier.location} is not answering "
                            f"({_hide(str(exc), url)})") from None
    return tier


class _NotAnswering(CommandError):
    """The shared cache's server is down, unreachable or refuses this client."""


@contextlib.contextmanager
def _quiet():
    """The shared tier warns when Redis stops answering; the command says so itself."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def _stopped(tier) -> None:
    if not tier.available:  # a call failed after the first ping
        raise _NotAnswering(f"the shared cache at {tier.location} stopped answering; nothing more was "
                            "read from it, run the command again")


def _shared_report(url: Optional[str]) -> Optional[dict]:
    """stats of the shared tier at `url` (None: none configured)."""
    if url is None:
        return None
    from .store.shared import UnsignedSharedTier

    try:
        with _quiet():
            tier = _shared_tier(url)
            report = _tier_report(tier, "unsigned: GPUCACHE_SHARED_UNSIGNED=1 and no GPUCACHE_SECRET, so "
                                        "anyone who can write to the server can change your kernels")
            _stopped(tier)
    except UnsignedSharedTier:
        return {"location": display_url(url), "used": False, "signed": False,
                "note": f"{display_url(url)} is not used: no secret is set. Set GPUCACHE_SECRET (the same "
                        "for everyone who shares it) to sign and check its entries, or "
                        "GPUCACHE_SHARED_UNSIGNED=1 to use it unsigned"}
    except _NotAnswering as exc:
        return {"location": display_url(url), "used": True, "error": str(exc)}
    return report


def cmd_ls(tier, args, out):
    stages = (args.stage,) if args.stage else PERSISTENT_STAGES
    rows = _rows(tier, stages, args.kernel, args.older_than, args.newer_than,
                 Progress("reading", not args.json))
    if args.json:
        out(rows)
        return 0
    if not rows:
        out("no entries")
        return 0
    from .views.entries import kernel_labels

    configs = [summary_fields(r["config"]) for r in rows]
    # as wide as the widest config up to _CONFIG_WIDTH, and never narrower than a field
    width = max(len("config"), min(_CONFIG_WIDTH, max(len(r["config"]) for r in rows)),
                max(len(field) for fields in configs for field in fields))
    # each kernel definition by one name, told apart where two share it (axpy@cell 1a2b3c4d), never cut
    labels = kernel_labels(rows)
    names = [labels[(r["stage"], r["token"])] for r in rows]
    named = max(len("kernel"), *map(len, names))
    out(f"{'stage':<6} {'token':<12} {'kernel':<{named}} {'config':<{width}} {'size':>10} {'age':>5}  signature")
    indent = " " * (6 + 1 + 12 + 1 + named + 1)
    for r, fields, name in zip(rows, configs, names):
        first, *more = _wrap_fields(fields, width)
        out(f"{r['stage']:<6} {short_token(r['token']):<12} {name:<{named}} "
            f"{first:<{width}} {format_bytes(r['bytes']):>10} {format_age(r['age_seconds']):>5}  "
            f"{r['signature']}")
        for line in more:  # the rest of a long config, under it
            out(indent + line)
    return 0


# ls's config column: the config's fields that differ from the defaults, each
# whole (`config.summary_fields`); a config longer than this wraps onto more
# lines, between fields
_CONFIG_WIDTH = 36


def _wrap_fields(fields: List[str], width: int) -> List[str]:
    """`fields` joined by spaces into lines of at most `width` characters,
    breaking between fields only (a field longer than `width` has a line of its own)."""
    lines: List[str] = []
    for field in fields:
        if lines and len(lines[-1]) + 1 + len(field) <= width:
            lines[-1] += " " + field
        else:
            lines.append(field)
    return lines or [""]


def _find(tier: DiskTier, token: str, stage: Optional[str]):
    try:
        return find_token(token, ((stage, path.name, path) for stage, path, _ in tier.scan(stage)),
                          f" in {tier.directory}")
    except ValueError as exc:
        raise CommandError(str(exc)) from None


def cmd_show(tier, args, out):
    stage, path = _find(tier, args.token, args.stage)
    full_token = path.name[: -len(".entry")]
    data = path.read_bytes()
    header, _ = read_header(strip(data))
    compared = stage in _toolchain_stages(args)
    if compared:
        _read_toolchain(tier.directory, (stage,))
    try:
        entry = decode(tier.keyring.open(data)[0], stage, full_token, check_toolchain=compared)
        problem = None
    except Rejected as exc:
        entry, problem = None, f"signature: {exc}"
    except BadEntry as exc:
        entry, problem = None, str(exc)
    artifact = entry.artifact if entry is not None else None
    if args.out:
        if artifact is None:
            raise CommandError(f"the entry is damaged ({problem}); nothing to write")
        args.out.write_bytes(_raw(stage, artifact))
    occupancy = _occupancy(stage, header, artifact)
    if args.json:
        out({"stage": stage, "path": str(path), "header": header, "valid": problem is None,
             "problem": problem, **({"occupancy": [
                 {"block": o.block, "blocks_per_sm": o.blocks_per_sm, "active_warps": o.active_warps,
                  "max_warps": o.max_warps, "occupancy": o.occupancy, "limited_by": o.limited_by}
                 for o in occupancy[1]]} if occupancy else {})})
        return 0 if problem is None else 1
    out(f"stage     {stage}\ntoken     {full_token}\nkernel    {header['kernel']}\n"
        f"signature {header['signature']}\nconfig    {header['config']}\n"
        f"created   {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(header['created']))}\n"
        f"size      {format_bytes(header['size'])} (compile took {header['seconds'] * 1e3:.1f} ms)\n"
        f"built     {'; '.join(header['reasons']) or '-'}\n"
        f"valid     {'yes' if problem is None else 'NO: ' + problem}"
        + ("" if compared or problem else " (key and checksum; --toolchain also compares its toolchain)"))
    out("components:")
    _components(header["components"], out, "  ")
    if artifact is not None:
        out("")
        out(_text(stage, artifact, args.out))
    if occupancy:
        heading, rows = occupancy
        out("")
        out(heading)
        for row in rows:
            out(f"  {row.block:>5} threads  {row}")
    return 0 if problem is None else 1


# the block sizes `show` gives a cubin's occupancy at
_SHOWN_BLOCKS = (64, 128, 256, 512, 1024)


def _occupancy(stage, header, artifact):
    """(heading, `Occupancy` per block size) of a cubin entry, from its
    architecture and what its link log says it uses; None for other stages
    (or an architecture the calculator does not know)."""
    if stage != "cubin" or artifact is None:
        return None
    from .occupancy import OccupancyError, occupancy_table
    from .results import parse_resources

    fields = header.get("config_fields") or {}
    sm, bounds = fields.get("sm"), fields.get("launch_bounds")
    used = parse_resources(getattr(artifact, "info_log", "") or "")
    # (launch bounds: no launch of more threads a block than the first bound runs)
    blocks = tuple(b for b in _SHOWN_BLOCKS if not bounds or b <= bounds[0]) or (bounds[0],)
    try:
        rows = occupancy_table(int(sm), used["registers"], used["shared_bytes"], blocks=blocks)
    except (OccupancyError, TypeError, ValueError) as exc:
        log.info("no occupancy for sm %s: %s", sm, exc)
        return None
    return (f"theoretical occupancy on sm_{sm} ({used['registers']} registers a thread, "
            f"{format_bytes(used['shared_bytes'])} static shared memory a block; dynamic shared memory "
            "adds to it" + (f"; launch bounds allow at most {bounds[0]} threads a block" if bounds else "")
            + "; see docs/occupancy.md):", rows)


def _components(components, out, indent) -> None:
    """A header's components, one a line; a whole's parts (what a device
    function reads, typing's inputs on an llvm entry) under it, indented."""
    for name, (digest, shown, *parts) in sorted(components.items()):
        out(f"{indent}{name:<{30 - len(indent)}} {short_token(digest)}  {shown}")
        if parts and isinstance(parts[0], dict):
            _components(parts[0], out, indent + "  ")


def _raw(stage, artifact) -> bytes:
    if stage == "cubin":
        return artifact.cubin
    if stage == "fatbin":
        return artifact.fatbin
    if stage == "ptx":
        return artifact.ltoir if artifact.ltoir is not None else "\n".join(artifact.ptx).encode()
    return artifact.text.encode()


def _members_text(artifact) -> str:
    return ", ".join(f"{m.name} ({m.kind}, {format_bytes(m.nbytes)})" for m in artifact.members)


def _text(stage, artifact, written) -> str:
    if stage == "fatbin":
        note = f"written to {written}" if written else "use --out FILE to save it"
        return f"holds {_members_text(artifact)}\nfatbin: {len(artifact.fatbin)} bytes ({note})"
    if stage == "cubin":
        note = f"written to {written}" if written else "use --out FILE to save it"
        return f"{artifact.info_log}\ncubin: {len(artifact.cubin)} bytes ({note})"
    if stage == "ptx" and artifact.ltoir is not None:
        return f"LTO-IR: {len(artifact.ltoir)} bytes"
    return artifact.text if stage == "llvm" else "\n".join(artifact.ptx)


# the stages whose entries hold code to ship, most shipped first: what export
# writes of each (`_raw`), and a file name ending for it
_EXPORTED = ("fatbin", "cubin", "ptx", "llvm")
_ENDINGS = {"fatbin": "fatbin", "cubin": "cubin", "ptx": "ptx", "ltoir": "ltoir", "llvm": "ll"}
_FORMATS = {"fatbin": "fatbin", "cubin": "cubin ELF", "ptx": "PTX", "ltoir": "LTO-IR", "llvm": "LLVM IR"}
_TOKEN_LIKE = re.compile(r"[0-9a-f]{6,64}")


def _export_format(stage: str, artifact) -> str:
    """What export writes of `stage`'s `artifact`: fatbin, cubin, ptx, ltoir or llvm."""
    return "ltoir" if stage == "ptx" and artifact.ltoir is not None else stage


def cmd_export(tier, args, out):
    """Write an artifact out to ship it: a kernel's fatbin (by name), or the
    artifact of a fatbin, cubin, ptx or llvm entry (by token)."""
    destination = _export_file(args)
    wanted = args.name_or_token.strip()
    prefix = wanted.lower()
    if _TOKEN_LIKE.fullmatch(prefix) and any(path.name.startswith(prefix) for _, path, _ in tier.scan()):
        stage, path = _find(tier, prefix, None)
    else:
        stage, path = "fatbin", _fatbin_of(tier, wanted)
    token = path.name[: -len(".entry")]
    entry = _read_entry(tier, stage, path)
    if entry.is_marker:
        raise CommandError(_per_target(tier, stage, token, entry))
    kind = _export_format(stage, entry.artifact)
    if args.fatbin is not None and stage != "fatbin":
        raise CommandError(f"--fatbin FILE writes a fatbin, and {short_token(token)} is a {stage} entry "
                           f"({_FORMATS[kind]}); give the file without --fatbin: gpucache export "
                           f"{short_token(token)} {destination}")
    data = _raw(stage, entry.artifact)
    try:
        destination.write_bytes(data)
    except OSError as exc:
        raise CommandError(f"cannot write {destination}: {exc.strerror or exc}; give a file name in a "
                           "folder you can write to") from None
    if args.json:
        report = {"stage": stage, "format": kind, "token": token, "kernel": entry.kernel,
                  "signature": entry.signature, "config": entry.config, "path": str(destination),
                  "bytes": len(data)}
        if stage == "fatbin":
            report["members"] = [{"name": m.name, "kind": m.kind, "bytes": m.nbytes, "token": m.token}
                                 for m in entry.artifact.members]
        out(report)
    else:
        out(f"wrote {destination} ({format_bytes(len(data))}, {_FORMATS[kind]}): {entry.kernel} "
            f"{entry.signature} [{entry.config}]"
            + (f", {_members_text(entry.artifact)}" if stage == "fatbin" else ""))
    return 0


def _export_file(args) -> Path:
    """The file export writes: FILE, or --fatbin FILE (its form before FILE)."""
    if args.file is not None and args.fatbin is not None:
        raise CommandError(f"give the file to write once: {args.file} or --fatbin {args.fatbin}, not both")
    if args.file is None and args.fatbin is None:
        raise CommandError("give the file to write: gpucache export NAME_OR_TOKEN FILE")
    return args.file if args.file is not None else args.fatbin


def _listed(row) -> str:
    return (f"{short_token(row['token'])} {row['signature']} [{row['config']}] "
            f"{format_age(row['age_seconds'])} old")


def _fatbin_of(tier: DiskTier, wanted: str) -> Path:
    """The file of the one fatbin entry of the kernel named `wanted`; a
    CommandError that says what to give instead where there is none, or more than one."""
    rows = _rows(tier, ("fatbin",), wanted)
    if len(rows) == 1:
        return _find(tier, rows[0]["token"], "fatbin")[1]
    if rows:
        raise CommandError(f"{wanted} has {len(rows)} fatbins ({'; '.join(_listed(r) for r in rows[:8])}); "
                           f"give the token of the one to export, e.g. gpucache export "
                           f"{short_token(rows[0]['token'])} {_file_name(rows[0], 'fatbin')}")
    prefix = wanted.lower()
    if _TOKEN_LIKE.fullmatch(prefix):
        _refuse_typing(tier, prefix)
    others = _rows(tier, _EXPORTED[1:], wanted)
    if others:
        # the kernel was built for one target at a time: its entries, the cubins first
        stage = next(s for s in _EXPORTED if any(r["stage"] == s for r in others))
        found = [r for r in others if r["stage"] == stage]
        more = "" if len(found) <= 8 else f"; and {len(found) - 8} more"
        rest = sorted({r["stage"] for r in others} - {stage}, key=_EXPORTED.index)
        example = f"gpucache export {short_token(found[0]['token'])} {_file_name(found[0], stage)}"
        raise CommandError(
            f"{wanted} has no fatbin in {tier.directory} (a kernel built for several targets has one: "
            f"%%gpukernel --sm 80,86,90, or KernelCache.compile_fatbin), but it has "
            f"{_count(len(found), stage + ' entry', stage + ' entries')} ({'; '.join(map(_listed, found[:8]))}"
            f"{more}): export "
            + (f"it by its token: {example}" if len(found) == 1 else f"one by its token, e.g. {example}")
            + f"; gpucache ls --kernel {wanted} --stage {stage} lists {'it' if len(found) == 1 else 'them'}"
            + (f" (and --stage {' or '.join(rest)} its {' and '.join(rest)} entries)" if rest else ""))
    if _TOKEN_LIKE.fullmatch(prefix):
        raise CommandError(
            f"no entry with a token starting {prefix}, and no kernel named {wanted!r}, in {tier.directory}; "
            f"export takes the token of a {', '.join(_EXPORTED[:-1])} or {_EXPORTED[-1]} entry (gpucache ls "
            "lists them), or a kernel's name for its fatbin")
    raise CommandError(
        f"no fatbin of a kernel or token {wanted!r} in {tier.directory}; a kernel built for several "
        "targets has one (%%gpukernel --sm 80,86,90, or KernelCache.compile_fatbin), and gpucache ls "
        "--stage fatbin lists them; export also writes the cubin, PTX or LLVM IR of an entry given by "
        f"its token (of a {', '.join(_EXPORTED[1:-1])} or {_EXPORTED[-1]} entry: gpucache ls lists them)")


def _file_name(row, stage: str) -> str:
    """A file name for the artifact of `row`'s entry, for examples: axpy.cubin."""
    return f"{row['kernel'].rsplit('.', 1)[-1]}.{_ENDINGS[stage]}"


def _refuse_typing(tier: DiskTier, prefix: str) -> None:
    """A CommandError when `prefix` starts the token of a typing entry that an
    llvm entry on disk was built from (typing entries are never stored)."""
    built = []
    for _, path, _ in tier.scan("llvm"):
        try:
            header, _ = read_header(strip(_head(path)))
            typing = str(header["components"]["typing"][0])
        except (OSError, BadEntry, KeyError, TypeError, IndexError):
            continue
        if typing.startswith(prefix):
            built.append(header)
    if not built:
        return
    header = min(built, key=lambda h: bool(h.get("marker")))  # an llvm entry with code, where there is one
    name = short_name(header["kernel"])
    raise CommandError(
        f"{prefix} is the token of a typing entry ({header['kernel']} {header['signature']}): typing makes "
        "numba's typed IR, kept in memory only: it is not code, and there is nothing of it to export.  "
        f"Export an entry of a later stage by its token ({', '.join(_EXPORTED[:-1])} or {_EXPORTED[-1]}): "
        "the llvm entry built from it is "
        f"{short_token(header['token'])} (gpucache export {short_token(header['token'])} {name}.ll), and "
        f"gpucache ls --kernel {name} lists the others")


def _per_target(tier: DiskTier, stage: str, token: str, entry) -> str:
    """Why export refuses the marker `entry`: its code is filed per target, under these tokens."""
    from .index import variant_token
    from .targets import describe
    from .tokens import Token

    variants = [(variant_token(Token(stage, token, entry.components), reads), reads) for reads in entry.variants]
    held = [(variant, reads) for variant, reads in variants if tier.path(stage, variant.hex).exists()]
    what = (f"the {stage} entry {short_token(token)} of {entry.kernel} holds no code: building it asked about "
            f"the target, so its {_FORMATS[stage]} is filed per target")
    if not held:
        return (f"{what}, and none of those entries is in {tier.directory} now; compile the kernel for the "
                f"target you want, then export its entry (gpucache ls --kernel {entry.kernel} --stage {stage})")
    listed = "; ".join(f"{variant.short} ({describe(reads)})" for variant, reads in held)
    return (f"{what}: {listed}.  Export the one for your target by its token, e.g. gpucache export "
            f"{held[0][0].short} {entry.kernel.rsplit('.', 1)[-1]}.{_ENDINGS[stage]}")


def cmd_diff(tier, args, out):
    """Two entries side by side, by instruction: PTX of ptx entries, SASS
    (nvdisasm) of cubin entries (`gpucache_ext.queries.compare_artifacts`)."""
    from .queries import compare_artifacts

    found = [_find(tier, token, args.stage) for token in (args.token_a, args.token_b)]
    (stage, first), (other, second) = found
    if stage != other:
        raise CommandError(f"{short_token(first.name)} is a {stage} entry and {short_token(second.name)} a "
                           f"{other} one: give two entries of one stage (ptx or cubin)")
    entries = [_read_entry(tier, stage, path) for _, path in found]
    try:
        comparison = compare_artifacts(stage, *entries)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    out(comparison.as_dict() if args.json else comparison.text())
    return 0


def _read_entry(tier, stage: str, path: Path):
    """The entry in `path`, its signature, key and checksum checked; CommandError if it is damaged."""
    try:
        return decode(tier.keyring.open(path.read_bytes())[0], stage, path.name[: -len(".entry")],
                      check_toolchain=False)
    except (Rejected, BadEntry) as exc:
        raise CommandError(f"the {stage} entry {short_token(path.name)} cannot be read: {exc}") from None


def cmd_clear(tier, args, out):
    stages = (args.stage,) if args.stage else PERSISTENT_STAGES
    before = {stage: tier.stats(stage)["entries"] for stage in stages}
    count = sum(before.values())
    if count and not args.yes:
        what = f"{count} entries ({', '.join(stages)}) in {tier.directory}"
        if not sys.stdin.isatty():
            raise CommandError(f"this would delete {what}; pass --yes to confirm")
        answer = input(f"delete {what}? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            out("nothing deleted")
            return 1
    for stage in stages:
        tier.clear(stage)
    removed = sum(before.values())
    if args.json:
        out({"removed": removed, "stages": list(stages)})
    else:
        out(f"removed {removed} entries ({', '.join(stages)})")
    return 0


def cmd_prune(tier, args, out):
    removed, freed = tier.prune(args.max_bytes, Progress("pruning", not args.json))
    total = sum(tier.stats(s)["bytes"] for s in PERSISTENT_STAGES)
    if args.json:
        out({"removed": removed, "freed_bytes": freed, "bytes": total})
    else:
        out(f"removed {removed} entries, freed {format_bytes(freed)}; the cache holds {format_bytes(total)}")
    return 0


def cmd_verify(tier, args, out):
    if args.shared:
        return _verify_shared(args, out)
    files = tier.scan()
    checked = len(files)
    compared = _toolchain_stages(args)
    _read_toolchain(tier.directory, {stage for stage, _, _ in files if stage in compared})
    previous: list = []  # (stage, path) of entries a previous secret signed (re-signed with --fix)
    bad = tier.verify(fix=args.fix, progress=Progress("verifying", not args.json), toolchain_stages=compared,
                      resigned=previous)
    uncompared = sorted({stage for stage, _, _ in files} - set(compared))
    audit = _recompile_all(tier, args, out) if args.recompile else None
    if args.json:
        report = {"checked": checked, "fixed": args.fix, "toolchain_not_compared": uncompared,
                  "bad": [{"stage": s, "path": str(p), "problem": why} for s, p, why in bad],
                  "previous_secret": len(previous), "resigned": len(previous) if args.fix else 0}
        if audit is not None:
            report["recompiled"] = audit
        out(report)
    else:
        for stage, path, why in bad:
            out(f"BAD {stage} {short_token(path.name)}: {why}{' (removed)' if args.fix else ''}")
        out(f"checked {checked} entries: {len(bad)} bad" + (", removed" if args.fix and bad else "")
            + (f" (the toolchain of {' and '.join(uncompared)} entries not compared: --toolchain)"
               if uncompared else ""))
        if previous:
            out(_resigning(len(previous), args.fix, "gpucache verify"))
        if audit is not None:
            counts = audit["counts"]
            out(f"recompiled {counts['match'] + counts['mismatch']} entries: {counts['mismatch']} "
                f"differed from a fresh compile and {counts['tainted']} were built from those "
                f"(evicted); {counts['skipped']} skipped (llvm entries need the kernel's source; "
                f"others need their upstream entry); {counts['failed']} failed")
    mismatched = audit is not None and (audit["counts"]["mismatch"] or audit["counts"]["failed"])
    return 1 if (bad and not args.fix) or mismatched else 0


def _resigning(count: int, fixed: bool, verify: str) -> str:
    return (f"{_count(count, 'entry', 'entries')} signed with a previous secret: "
            + ("signed again with GPUCACHE_SECRET" if fixed
               else f"{verify} --fix signs them again with GPUCACHE_SECRET"))


def _verify_shared(args, out) -> int:
    """verify --shared: every entry under the prefix, opened as a reader here
    opens it (signature), then its key and checksum (and toolchain with
    --toolchain); --fix re-signs what a previous secret signed, keeping the
    key's expiry, and deletes the bad ones."""
    from .store.shared import UnsignedSharedTier

    if args.recompile:
        raise CommandError("--recompile compiles disk entries again; it does not work with --shared")
    url = _redis_url(args)
    if url is None:
        raise CommandError("no shared cache is configured: set GPUCACHE_REDIS_URL or give --redis-url URL")
    compared = PERSISTENT_STAGES if args.toolchain else ()
    if compared:  # (learned as a compile here learns it: from the disk folder's memo, if there is one)
        folder = configured_directory(args.dir)
        _read_toolchain(folder if folder is not None and folder.is_dir() else None, compared)
    counts = Counter({outcome: 0 for outcome in _OUTCOMES})
    bad, resigned, removed = [], 0, 0
    try:
        with _quiet():
            tier = _shared_tier(url)
            keyring = tier.keyring
            for stage in PERSISTENT_STAGES:
                start = len(tier.key(stage, ""))
                for key, data in tier.raw(stage):
                    token = key[start:]
                    outcome, body, problem = check_stored(keyring, data, stage, token, stage in compared)
                    counts[outcome] += 1
                    if outcome == PREVIOUS_SECRET and args.fix:
                        tier.replace(key, keyring.sign(body))
                        resigned += 1
                    elif outcome not in (OK, PREVIOUS_SECRET):
                        bad.append({"stage": stage, "token": token, "key": key, "outcome": outcome,
                                    "problem": problem})
                        removed += bool(args.fix and tier.delete(stage, token))
            _stopped(tier)
    except UnsignedSharedTier:
        raise CommandError(
            f"the shared cache at {display_url(url)} cannot be checked: no secret is set. Set "
            "GPUCACHE_SECRET (the secret its entries are signed with) to check signatures, keys and "
            "checksums; or GPUCACHE_SHARED_UNSIGNED=1 to check keys and checksums only") from None
    checked = sum(counts.values())
    if args.json:
        out({"tier": "shared", "location": tier.location, "checked": checked, "fixed": args.fix,
             "signatures_checked": keyring.signs, "toolchain_compared": bool(compared),
             "counts": dict(counts), "resigned": resigned, "removed": removed, "bad": bad})
    else:
        if not keyring.signs:
            out("signatures not checked: no GPUCACHE_SECRET (GPUCACHE_SHARED_UNSIGNED=1); "
                "keys and checksums only")
        for row in bad:
            out(f"BAD {row['stage']} {short_token(row['token'])}: {row['problem']}"
                f"{' (removed)' if args.fix else ''}")
        kinds = ", ".join(f"{counts[o]} {o}" for o in _OUTCOMES[2:] if counts[o])
        out(f"checked {_count(checked, 'entry', 'entries')} of the shared cache at {tier.location}: "
            f"{counts[OK]} ok, {counts[PREVIOUS_SECRET]} signed with a previous secret, "
            f"{len(bad)} bad" + (f" ({kinds})" if kinds else "") + (", removed" if args.fix and bad else "")
            + ("" if compared else " (toolchains not compared: --toolchain)"))
        if counts[PREVIOUS_SECRET]:
            out(_resigning(counts[PREVIOUS_SECRET], args.fix, "gpucache verify --shared")
                + (", keeping their expiry" if args.fix else ""))
    return 1 if bad and not args.fix else 0


def _recompile_all(tier: DiskTier, args, out) -> dict:
    """Compile sampled ptx and cubin entries again from their upstream entries (and
    assemble fatbin entries again from their members)
    and compare (see `gpucache_ext.audit.recompile_entry`); evict mismatches."""
    import random

    from .audit import recompile_entry

    files = [(stage, path) for stage, path, _ in tier.scan()]
    chosen = random.Random(args.seed).sample(files, max(1, round(len(files) * args.sample))) \
        if args.sample < 1 and files else files
    # upstream stages first: an entry built from a wrong one is wrong too
    chosen.sort(key=lambda item: PERSISTENT_STAGES.index(item[0]))
    counts = dict.fromkeys(("match", "mismatch", "tainted", "skipped", "failed"), 0)
    found, wrong = [], set()
    progress = Progress("recompiling", not args.json)
    for done, (stage, path) in enumerate(chosen, 1):
        progress(done, len(chosen))
        token = path.name[: -len(".entry")]
        entry = tier.get(stage, token)
        if entry is None or entry.is_marker:  # damaged (verify reports it) or a marker
            continue
        status, difference = recompile_entry(stage, entry, lambda s, t, cc: _upstream(tier, s, t, cc),
                                             wrong)
        counts[status] += 1
        if status in ("mismatch", "tainted", "failed"):
            found.append({"stage": stage, "token": token, "kernel": entry.kernel, "status": status,
                          "difference": difference})
            if status != "failed":
                wrong.add(token)
                tier.delete(stage, token)
            if not args.json:
                out(f"{status.upper()} {stage} {short_token(token)} {entry.kernel} [{entry.config}]"
                    f"{'' if status == 'failed' else ' (evicted)'}\n{difference}")
    return {"counts": counts, "entries": found, "sampled": len(chosen), "of": len(files)}


def _upstream(tier: DiskTier, stage: str, token: str, cc):
    """The entry of `stage` under `token`, or under its variant for target `cc`."""
    from .index import variants_for
    from .tokens import Token

    entry = tier.get(stage, token)
    if entry is None or not entry.is_marker:
        return entry
    for variant in variants_for(entry, Token(stage, token, entry.components), cc):
        found = tier.get(stage, variant.hex)
        if found is not None:
            return found
    return None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpucache", description="Look after gpucache_ext's disk cache: list, show, check, "
        "prune and clear its entries; and show and check the shared (Redis) cache's.  Entries are "
        "read with the secrets a compile here reads (GPUCACHE_SECRET, GPUCACHE_SECRET_PREVIOUS).")
    parser.add_argument("--dir", type=Path, help="cache folder (default: GPUCACHE_DIR, else "
                                                 f"{default_directory()})")
    parser.add_argument("--redis-url", metavar="URL", help="the shared cache, for stats and verify "
                        "--shared (default: GPUCACHE_REDIS_URL; off: none)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    # --dir, --redis-url and --json are also accepted after the command (their defaults stay the main parser's)
    json_after = argparse.ArgumentParser(add_help=False)
    json_after.add_argument("--dir", type=Path, default=argparse.SUPPRESS, help="cache folder")
    json_after.add_argument("--redis-url", metavar="URL", default=argparse.SUPPRESS, help="the shared cache")
    json_after.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                            help="machine-readable output")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def _stage_option(command):
        command.add_argument("--stage", choices=PERSISTENT_STAGES, help="only this stage's entries")
        # the option's name before 0.2, still accepted
        command.add_argument("--layer", dest="stage", choices=PERSISTENT_STAGES, help=argparse.SUPPRESS)

    add = functools.partial(sub.add_parser, parents=[json_after])
    add("stats", help="entries, bytes and signatures per stage and tier",
        description="Entries and bytes per stage, of the disk cache and of the shared cache when a "
        "Redis URL is set, and how they are signed: with the current secret (GPUCACHE_SECRET), a "
        "previous one (GPUCACHE_SECRET_PREVIOUS), not signed (read unchecked: no secret), and what "
        "this reader refuses (unsigned, or signed with a secret it does not hold).  Read from each "
        "entry's first bytes: verify checks the signatures themselves.  Exits 1 when the shared "
        "cache does not answer.")
    ls = add("ls", help="list entries")
    ls.add_argument("--kernel", help="only this kernel (name or qualified name)")
    _stage_option(ls)
    ls.add_argument("--older-than", type=parse_age, metavar="AGE", help="e.g. 7d")
    ls.add_argument("--newer-than", type=parse_age, metavar="AGE", help="e.g. 12h")
    show = add("show", help="an entry's header and artifact")
    show.add_argument("token", help="the token or its first 6+ hex digits")
    _stage_option(show)
    show.add_argument("--out", type=Path, help="write the artifact (IR, PTX or cubin) here")
    show.add_argument("--toolchain", action="store_true",
                      help="also compare a ptx or cubin entry's toolchain with this environment's")
    export = add("export", help="write a kernel's fatbin, or an entry's cubin, PTX or LLVM IR, to a file",
                 description="Write compiled code to a file, to ship it.  NAME_OR_TOKEN: a kernel's name, for "
                 "its fatbin (a kernel built for several targets, %%gpukernel --sm 80,86,90 or "
                 "KernelCache.compile_fatbin, has one: the cubin of each target and the PTX for newer GPUs, as "
                 "the CUDA driver loads them, cuModuleLoadData or cuda.core ObjectCode.from_fatbin); or the "
                 "token (its first 6+ hex digits, as gpucache ls shows it) of an entry of any stage that holds "
                 "code: a fatbin entry writes the fatbin, a cubin entry the cubin (an ELF file), a ptx entry its "
                 "PTX text (its LTO-IR bytes when built with lto=True), an llvm entry its LLVM IR text.  Typing "
                 "entries hold no code (and are kept in memory only): there is nothing of them to export.  "
                 "E.g. gpucache export axpy axpy.fatbin; gpucache export 8ccbf8d4b175 axpy.cubin.")
    export.add_argument("name_or_token", metavar="NAME_OR_TOKEN",
                        help="a kernel's name (its fatbin), or the token of a fatbin, cubin, ptx or llvm entry")
    export.add_argument("file", nargs="?", type=Path, metavar="FILE", help="where to write it")
    export.add_argument("--fatbin", type=Path, metavar="FILE",
                        help="where to write it, for a fatbin only (the form before FILE, still accepted)")
    diff = add("diff", help="two ptx entries' PTX, or two cubin entries' SASS, side by side",
               description="Two entries side by side, by instruction: the PTX of two ptx entries, or the "
               "SASS of two cubin entries (from nvdisasm: the nvidia-cuda-nvdisasm wheel's reads sm_75 and "
               "later).  Addresses, encodings and the per-build parts of numba's symbol names are left out.")
    diff.add_argument("token_a", help="a token or its first 6+ hex digits")
    diff.add_argument("token_b", help="another entry's, of the same stage")
    diff.add_argument("--stage", choices=("ptx", "cubin"), help="look for the tokens in this stage only")
    clear = add("clear", help="delete entries (asks first)")
    _stage_option(clear)
    clear.add_argument("--yes", "-y", action="store_true", help="delete without asking")
    prune = add("prune", help="evict least recently used entries down to a size")
    prune.add_argument("--max-bytes", type=parse_bytes, required=True, metavar="N", help="e.g. 500M")
    verify = add("verify", help="check every entry's signature, key and checksum (and toolchain)",
                 description="Check every entry's signature (with a secret), key and checksum, and the "
                 "toolchain of llvm entries; with --toolchain also that of ptx and cubin entries (imports "
                 "numba-cuda to find libdevice and libcudadevrt as a compile would, loads no CUDA library "
                 "unless the folder's memo lacks a part).  An entry of another toolchain is intact and "
                 "never served here (its token names its toolchain).  --recompile compiles.  --shared "
                 "checks the shared cache's entries instead (their toolchain only with --toolchain); "
                 "it needs GPUCACHE_SECRET, or GPUCACHE_SHARED_UNSIGNED=1 to check keys and checksums "
                 "only.  Entries signed with a previous secret (GPUCACHE_SECRET_PREVIOUS) are counted; "
                 "--fix signs them again with GPUCACHE_SECRET.")
    verify.add_argument("--toolchain", action="store_true",
                        help="also compare ptx and cubin entries' toolchain with this environment's")
    verify.add_argument("--fix", action="store_true",
                        help="remove bad entries, sign again those signed with a previous secret")
    verify.add_argument("--shared", action="store_true",
                        help="check the shared cache (GPUCACHE_REDIS_URL or --redis-url) instead")
    verify.add_argument("--recompile", action="store_true",
                        help="also compile ptx and cubin entries again from their upstream "
                             "entries (and assemble fatbins again from theirs) and compare; evict any "
                             "that differ")
    verify.add_argument("--sample", type=_fraction, default=1.0, metavar="F",
                        help="with --recompile: the fraction of entries to recompile (default 1)")
    verify.add_argument("--seed", type=int, default=None, help=argparse.SUPPRESS)
    return parser


COMMANDS = {"stats": cmd_stats, "ls": cmd_ls, "show": cmd_show, "diff": cmd_diff, "export": cmd_export,
            "clear": cmd_clear,
            "prune": cmd_prune, "verify": cmd_verify}


def _cache_folder(args) -> Path:
    """The folder to work on, read as the API and the magic read it."""
    directory = configured_directory(args.dir)
    if directory is None:
        raise CommandError(f"the disk cache is off (GPUCACHE_DIR={os.environ.get('GPUCACHE_DIR', '')!r}); "
                           "give --dir FOLDER to look at a cache folder")
    if not directory.is_dir():
        where = "--dir" if args.dir is not None else (
            "GPUCACHE_DIR" if os.environ.get("GPUCACHE_DIR") else "the default cache folder")
        raise CommandError(f"there is no cache folder at {directory} ({where}); nothing has been "
                           "cached there yet, or the path is wrong")
    return directory


def _disk_tier(args) -> Optional[DiskTier]:
    """The disk tier the command works on; None for verify --shared, and for
    stats of a shared cache where there is no disk cache (args.disk_problem)."""
    if args.command == "verify" and args.shared:
        return None
    try:
        folder = _cache_folder(args)
    except CommandError as exc:
        if args.command != "stats" or _redis_url(args) is None:
            raise
        args.disk_problem = str(exc)
        return None
    # signed entries are checked with the secrets a compile here would use
    return DiskTier(folder, max_bytes=None, keyring=Keyring(settings.secrets(), allow_unsigned=True),
                    warn=False)


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)

    def out(value):
        print(json.dumps(value, indent=2, default=str) if args.json else value)

    try:
        status = COMMANDS[args.command](_disk_tier(args), args, out)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return status
    except (CommandError, settings.SettingError) as exc:  # (a setting names its variable and the fix)
        print(f"gpucache {args.command}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader stopped (gpucache ls | head): end quietly, as Python's
        # documentation advises, with stdout pointed at /dev/null for the exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
