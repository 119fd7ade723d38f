"""The gpucache command line: its options, commands and their arguments."""

from __future__ import annotations

import argparse
import functools
import re
from pathlib import Path

from ..keys.stagespec import PERSISTENT_STAGES
from ..queries.compare import COMPARED_STAGES
from ..store.disk import default_directory
from .explain import add_explain
from .warm import add_warm

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_AGES = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpucache", description="Look after gpucache_ext's disk cache: list, show, check, "
        "prune and clear its entries; and show and check the shared (Redis) cache's.  Entries are "
        "read with the secrets a compile here reads (GPUCACHE_SECRET, GPUCACHE_SECRET_PREVIOUS).")
    parser.add_argument("--dir", type=Path, help="cache folder (default: GPUCACHE_DIR, else "
                                                 f"{default_directory()})")
    parser.add_argument("--redis-url", metavar="URL", help="the shared cache, for stats, explain and "
                        "verify --shared (default: GPUCACHE_REDIS_URL; off: none)")
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
    diff.add_argument("--stage", choices=COMPARED_STAGES, help="look for the tokens in this stage only")
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
    add_explain(add)
    add_warm(add)
    parser.commands = sub.choices  # (each command's parser: its usage names its own flags)
    return parser
