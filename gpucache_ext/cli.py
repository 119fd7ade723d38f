"""The gpucache command (also python -m gpucache_ext): look after the disk cache.

    gpucache stats                          entries and bytes per stage
    gpucache ls [--kernel K] [--stage S] [--older-than 2d] [--newer-than 1h]
    gpucache show TOKEN [--out FILE] [--toolchain]  an entry's header and artifact
    gpucache clear [--stage S] [--yes]      delete entries (asks first)
    gpucache prune --max-bytes 500M         evict least recently used entries
    gpucache verify [--fix] [--toolchain]   check every entry's key and checksum (and toolchain)
    gpucache verify --recompile [--sample F]  compile entries again and compare

--dir picks the cache folder (default: GPUCACHE_DIR, else the platform's user
cache folder); --json prints machine-readable output; both may come before or
after the command.  Output piped into a command that stops reading (gpucache ls | head)
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
import functools
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import List, Optional

from . import settings
from .codec import PERSISTENT_STAGES, BadEntry, decode, read_header
from .disk import DiskTier, configured_directory, default_directory
from .signing import Keyring, Rejected, strip
from .units import format_age, format_bytes
from .tokens import short_token
from .toolchain import stage_toolchain

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_AGES = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


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
        short = header["kernel"].rsplit(".", 1)[-1]
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
                     "last_used": st.st_mtime})
    return sorted(rows, key=lambda r: r["created"], reverse=True)


def _head(path: Path) -> bytes:
    from .disk import _read_head

    return _read_head(path)


def _toolchain_stages(args):
    """The stages whose entries' toolchain is compared: llvm's (package
    versions) always, ptx's and cubin's with --toolchain."""
    return PERSISTENT_STAGES if getattr(args, "toolchain", False) else ("llvm",)


def _read_toolchain(tier: DiskTier, stages) -> None:
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
            stage_toolchain(stage, tier.directory)


def cmd_stats(tier, args, out):
    stats = {stage: tier.stats(stage) for stage in PERSISTENT_STAGES}
    if args.json:
        out({"directory": str(tier.directory), "stages": stats,
             "bytes": sum(s["bytes"] for s in stats.values())})
        return 0
    out(f"cache directory: {tier.directory}")
    out(f"{'stage':<7}{'entries':>10}{'on disk':>14}")
    for stage, s in stats.items():
        out(f"{stage:<7}{s['entries']:>10}{format_bytes(s['bytes']):>14}")
    out(f"{'total':<7}{sum(s['entries'] for s in stats.values()):>10}"
        f"{format_bytes(sum(s['bytes'] for s in stats.values())):>14}")
    return 0


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
    out(f"{'stage':<6} {'token':<12} {'kernel':<20} {'config':<24} {'size':>10} {'age':>5}  signature")
    for r in rows:
        out(f"{r['stage']:<6} {short_token(r['token']):<12} {r['kernel'].rsplit('.', 1)[-1][:20]:<20} "
            f"{r['config'][:24]:<24} {format_bytes(r['bytes']):>10} {format_age(r['age_seconds']):>5}  "
            f"{r['signature']}")
    return 0


def _find(tier: DiskTier, token: str, stage: Optional[str]):
    token = token.lower()
    if not re.fullmatch(r"[0-9a-f]{6,64}", token):
        raise CommandError(f"{token!r} is not a token; give at least 6 hex digits")
    matches = [(stage, path) for stage, path, _ in tier.scan(stage)
               if path.name.startswith(token)]
    if not matches:
        raise CommandError(f"no entry with a token starting {token} in {tier.directory}")
    if len(matches) > 1:
        listed = ", ".join(f"{stage}:{short_token(path.name)}" for stage, path in matches[:8])
        raise CommandError(f"{token} is ambiguous ({len(matches)} entries: {listed}); give more digits")
    return matches[0]


def cmd_show(tier, args, out):
    stage, path = _find(tier, args.token, args.stage)
    full_token = path.name[: -len(".entry")]
    data = path.read_bytes()
    header, _ = read_header(strip(data))
    compared = stage in _toolchain_stages(args)
    if compared:
        _read_toolchain(tier, (stage,))
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
    if args.json:
        out({"stage": stage, "path": str(path), "header": header, "valid": problem is None,
             "problem": problem})
        return 0 if problem is None else 1
    out(f"stage     {stage}\ntoken     {full_token}\nkernel    {header['kernel']}\n"
        f"signature {header['signature']}\nconfig    {header['config']}\n"
        f"created   {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(header['created']))}\n"
        f"size      {format_bytes(header['size'])} (compile took {header['seconds'] * 1e3:.1f} ms)\n"
        f"built     {'; '.join(header['reasons']) or '-'}\n"
        f"valid     {'yes' if problem is None else 'NO: ' + problem}"
        + ("" if compared or problem else " (key and checksum; --toolchain also compares its toolchain)"))
    out("components:")
    for name, (digest, shown) in sorted(header["components"].items()):
        out(f"  {name:<28} {short_token(digest)}  {shown}")
    if artifact is not None:
        out("")
        out(_text(stage, artifact, args.out))
    return 0 if problem is None else 1


def _raw(stage, artifact) -> bytes:
    if stage == "cubin":
        return artifact.cubin
    if stage == "ptx":
        return artifact.ltoir if artifact.ltoir is not None else "\n".join(artifact.ptx).encode()
    return artifact.text.encode()


def _text(stage, artifact, written) -> str:
    if stage == "cubin":
        note = f"written to {written}" if written else "use --out FILE to save it"
        return f"{artifact.info_log}\ncubin: {len(artifact.cubin)} bytes ({note})"
    if stage == "ptx" and artifact.ltoir is not None:
        return f"LTO-IR: {len(artifact.ltoir)} bytes"
    return artifact.text if stage == "llvm" else "\n".join(artifact.ptx)


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
    files = tier.scan()
    checked = len(files)
    compared = _toolchain_stages(args)
    _read_toolchain(tier, {stage for stage, _, _ in files if stage in compared})
    bad = tier.verify(fix=args.fix, progress=Progress("verifying", not args.json), toolchain_stages=compared)
    uncompared = sorted({stage for stage, _, _ in files} - set(compared))
    audit = _recompile_all(tier, args, out) if args.recompile else None
    if args.json:
        report = {"checked": checked, "fixed": args.fix, "toolchain_not_compared": uncompared,
                  "bad": [{"stage": s, "path": str(p), "problem": why} for s, p, why in bad]}
        if audit is not None:
            report["recompiled"] = audit
        out(report)
    else:
        for stage, path, why in bad:
            out(f"BAD {stage} {short_token(path.name)}: {why}{' (removed)' if args.fix else ''}")
        out(f"checked {checked} entries: {len(bad)} bad" + (", removed" if args.fix and bad else "")
            + (f" (the toolchain of {' and '.join(uncompared)} entries not compared: --toolchain)"
               if uncompared else ""))
        if audit is not None:
            counts = audit["counts"]
            out(f"recompiled {counts['match'] + counts['mismatch']} entries: {counts['mismatch']} "
                f"differed from a fresh compile and {counts['tainted']} were built from those "
                f"(evicted); {counts['skipped']} skipped (llvm entries need the kernel's source; "
                f"others need their upstream entry); {counts['failed']} failed")
    mismatched = audit is not None and (audit["counts"]["mismatch"] or audit["counts"]["failed"])
    return 1 if (bad and not args.fix) or mismatched else 0


def _recompile_all(tier: DiskTier, args, out) -> dict:
    """Compile sampled ptx and cubin entries again from their upstream entries
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
    from .cache import variants_for
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
        "prune and clear its entries.")
    parser.add_argument("--dir", type=Path, help="cache folder (default: GPUCACHE_DIR, else "
                                                 f"{default_directory()})")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    # --dir and --json are also accepted after the command (their defaults stay the main parser's)
    json_after = argparse.ArgumentParser(add_help=False)
    json_after.add_argument("--dir", type=Path, default=argparse.SUPPRESS, help="cache folder")
    json_after.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                            help="machine-readable output")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def _stage_option(command):
        command.add_argument("--stage", choices=PERSISTENT_STAGES, help="only this stage's entries")
        # the option's name before 0.2, still accepted
        command.add_argument("--layer", dest="stage", choices=PERSISTENT_STAGES, help=argparse.SUPPRESS)

    add = functools.partial(sub.add_parser, parents=[json_after])
    add("stats", help="entries and bytes per stage")
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
    clear = add("clear", help="delete entries (asks first)")
    _stage_option(clear)
    clear.add_argument("--yes", "-y", action="store_true", help="delete without asking")
    prune = add("prune", help="evict least recently used entries down to a size")
    prune.add_argument("--max-bytes", type=parse_bytes, required=True, metavar="N", help="e.g. 500M")
    verify = add("verify", help="check every entry's key and checksum (and toolchain)",
                 description="Check every entry's key and checksum, and the toolchain of llvm entries; "
                 "with --toolchain also that of ptx and cubin entries (imports numba-cuda to find "
                 "libdevice and libcudadevrt as a compile would, loads no CUDA library unless the "
                 "folder's memo lacks a part).  An entry of another toolchain is intact and never "
                 "served here (its token names its toolchain).  --recompile compiles.")
    verify.add_argument("--toolchain", action="store_true",
                        help="also compare ptx and cubin entries' toolchain with this environment's")
    verify.add_argument("--fix", action="store_true", help="remove bad entries")
    verify.add_argument("--recompile", action="store_true",
                        help="also compile ptx and cubin entries again from their upstream "
                             "entries and compare; evict any that differ")
    verify.add_argument("--sample", type=_fraction, default=1.0, metavar="F",
                        help="with --recompile: the fraction of entries to recompile (default 1)")
    verify.add_argument("--seed", type=int, default=None, help=argparse.SUPPRESS)
    return parser


COMMANDS = {"stats": cmd_stats, "ls": cmd_ls, "show": cmd_show, "clear": cmd_clear,
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


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)

    def out(value):
        print(json.dumps(value, indent=2, default=str) if args.json else value)

    try:
        # signed entries are checked with the secrets a compile here would use
        tier = DiskTier(_cache_folder(args), max_bytes=None,
                        keyring=Keyring(settings.secrets(), allow_unsigned=True), warn=False)
        status = COMMANDS[args.command](tier, args, out)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return status
    except CommandError as exc:
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
