"""The gpucache command (also python -m gpucache_ext): look after the disk cache,
and check the shared (Redis) cache.

    gpucache stats                          entries, bytes and signatures per stage and tier
    gpucache ls [--kernel K] [--stage S] [--older-than 2d] [--newer-than 1h]
    gpucache show TOKEN [--out FILE] [--toolchain]  an entry's header and artifact
    gpucache explain NAME [--sm N ...]      how a kernel's newest build went: each stage hit or built, and why
    gpucache export NAME_OR_TOKEN FILE      a kernel's fatbin, or an entry's cubin, PTX or LLVM IR, to ship it
    gpucache diff TOKEN_A TOKEN_B [--stage S]  two ptx entries' PTX, or two cubin entries' SASS, side by side
    gpucache clear [--stage S] [--yes]      delete entries (asks first)
    gpucache prune --max-bytes 500M         evict least recently used entries
    gpucache verify [--fix] [--toolchain]   check every entry: signature, key, checksum (toolchain)
    gpucache verify --recompile [--sample F]  compile entries again and compare
    gpucache verify --shared [--fix]        check every shared entry's signature, key and checksum
    gpucache warm NOTEBOOK_OR_MODULE --sm 80,86 [FLAGS]  build its kernels into the cache ahead of a job

--dir picks the cache folder (default: GPUCACHE_DIR, else the platform's user
cache folder); --redis-url the shared cache, for stats, explain and verify
--shared (default: GPUCACHE_REDIS_URL; "off": none); --json prints
machine-readable output; all three may come before or after the command.
The tiers are read with the settings every cache reads
(`gpucache_ext.store.settings`: GPUCACHE_SECRET, GPUCACHE_SECRET_PREVIOUS,
GPUCACHE_SHARED_UNSIGNED, GPUCACHE_REDIS_PREFIX); a Redis password is never
printed.  Output piped into a command that stops reading (gpucache ls | head)
ends quietly.

Reading the cache imports no numba: stats, ls and explain read headers only; show and
verify check every entry's key and checksum, and the toolchain of llvm
entries (package versions).  The toolchain of ptx and cubin entries is
compared with --toolchain: it is read from the folder's memo (see
`toolchain`) once numba-cuda says where it finds libdevice and libcudadevrt
(importing numba, loading no CUDA library).  Without it an entry of another
toolchain still reads as intact, which it is: its token names its toolchain,
so no compile here is ever served it.  Only verify --recompile compiles.

The package: `parser` (the command line), one module per group of commands
(`stats`; `listing`: ls, show and diff; `explain`; `export`; `cleanup`: clear and prune;
`verify`; `warm`), what they share (`output`, `entries`: reading the disk tier's
entries; `server`: reaching the shared tier), and `main` here.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import List, Optional

from ..keys.config import with_consts
from ..store import settings
from ..store.disk import DiskTier, configured_directory
from ..store.registry import TierSettings, tier_kind
from ..store.signing import Keyring
from .cleanup import cmd_clear, cmd_prune
from .explain import cmd_explain
from .export import cmd_export
from .listing import cmd_diff, cmd_ls, cmd_show
from .output import CommandError
from .parser import build_parser
from .server import redis_url
from .stats import cmd_stats
from .verify import cmd_verify
from .warm import cmd_warm

__all__ = ["COMMANDS", "CommandError", "build_parser", "main"]

COMMANDS = {"stats": cmd_stats, "ls": cmd_ls, "show": cmd_show, "explain": cmd_explain, "diff": cmd_diff,
            "export": cmd_export, "clear": cmd_clear,
            "prune": cmd_prune, "verify": cmd_verify, "warm": cmd_warm}


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
    stats and explain of a shared cache where there is no disk cache (args.disk_problem)."""
    if (args.command == "verify" and args.shared) or args.command == "warm":  # (warm makes its folder)
        return None
    try:
        folder = _cache_folder(args)
    except CommandError as exc:
        if args.command not in ("stats", "explain") or redis_url(args) is None:
            raise
        args.disk_problem = str(exc)
        return None
    # signed entries are checked with the secrets a compile here would use; the command evicts nothing
    return tier_kind("disk").from_settings(TierSettings(keyring=Keyring(settings.secrets(), allow_unsigned=True),
                                                        directory=folder, max_disk_bytes=None, quiet=True))


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    # (a flag that may stand alone, --fastmath, must not take warm's path for its value)
    args, extra = parser.parse_known_args(with_consts([str(word) for word in (sys.argv[1:] if argv is None else argv)]))
    if extra:  # (the command's usage, which names the flags it takes)
        parser.commands.get(args.command, parser).error(f"unrecognized arguments: {' '.join(extra)}")

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
