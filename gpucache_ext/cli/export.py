"""gpucache export: a kernel's fatbin, or an entry's cubin, PTX or LLVM IR,
written to a file; and what to give instead where there is none."""

from __future__ import annotations

import re
from pathlib import Path

from ..keys.stagespec import PERSISTENT_STAGES
from ..pipeline.artifacts import FatbinArtifact, members_text
from ..store.codec import BadEntry, artifact_class, read_header
from ..store.disk import DiskTier, read_head
from ..store.signing import strip
from ..keys.tokens import short_name, short_token
from ..units import format_age, format_bytes
from .entries import entry_rows, find_entry, read_entry
from .output import CommandError, counted

# the stages whose entries hold code to ship, most shipped first (the
# pipeline's last first); what export writes of each, and a file name ending
# for it, its artifact says (`Artifact.exported`, `Artifact.format`)
_EXPORTED = tuple(reversed(PERSISTENT_STAGES))
_TOKEN_LIKE = re.compile(r"[0-9a-f]{6,64}")


def cmd_export(tier, args, out):
    """Write an artifact out to ship it: a kernel's fatbin (by name), or the
    artifact of a fatbin, cubin, ptx or llvm entry (by token)."""
    destination = _export_file(args)
    wanted = args.name_or_token.strip()
    prefix = wanted.lower()
    if _TOKEN_LIKE.fullmatch(prefix) and any(path.name.startswith(prefix) for _, path, _ in tier.scan()):
        stage, path = find_entry(tier, prefix, None)
    else:
        stage, path = "fatbin", _fatbin_of(tier, wanted)
    token = path.name[: -len(".entry")]
    entry = read_entry(tier, stage, path)
    if entry.is_marker:
        raise CommandError(_per_target(tier, stage, token, entry))
    written, data = entry.artifact.exported()
    if args.fatbin is not None and not isinstance(entry.artifact, FatbinArtifact):
        raise CommandError(f"--fatbin FILE writes a fatbin, and {short_token(token)} is a {stage} entry "
                           f"({written.title}); give the file without --fatbin: gpucache export "
                           f"{short_token(token)} {destination}")
    members = entry.artifact.contents()
    try:
        destination.write_bytes(data)
    except OSError as exc:
        raise CommandError(f"cannot write {destination}: {exc.strerror or exc}; give a file name in a "
                           "folder you can write to") from None
    if args.json:
        report = {"stage": stage, "format": written.name, "token": token, "kernel": entry.kernel,
                  "signature": entry.signature, "config": entry.config, "path": str(destination),
                  "bytes": len(data)}
        if members:
            report["members"] = [{"name": m.name, "kind": m.kind, "bytes": m.nbytes, "token": m.token}
                                 for m in members]
        out(report)
    else:
        out(f"wrote {destination} ({format_bytes(len(data))}, {written.title}): {entry.kernel} "
            f"{entry.signature} [{entry.config}]" + (f", {members_text(members)}" if members else ""))
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
    rows = entry_rows(tier, ("fatbin",), wanted)
    if len(rows) == 1:
        return find_entry(tier, rows[0]["token"], "fatbin")[1]
    if rows:
        raise CommandError(f"{wanted} has {len(rows)} fatbins ({'; '.join(_listed(r) for r in rows[:8])}); "
                           f"give the token of the one to export, e.g. gpucache export "
                           f"{short_token(rows[0]['token'])} {_file_name(rows[0], 'fatbin')}")
    prefix = wanted.lower()
    if _TOKEN_LIKE.fullmatch(prefix):
        _refuse_typing(tier, prefix)
    others = entry_rows(tier, _EXPORTED[1:], wanted)
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
            f"{counted(len(found), stage + ' entry', stage + ' entries')} ({'; '.join(map(_listed, found[:8]))}"
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
    return f"{short_name(row['kernel'])}.{artifact_class(stage).format.suffix}"


def _refuse_typing(tier: DiskTier, prefix: str) -> None:
    """A CommandError when `prefix` starts the token of a typing entry that an
    llvm entry on disk was built from (typing entries are never stored)."""
    built = []
    for _, path, _ in tier.scan("llvm"):
        try:
            header, _ = read_header(strip(read_head(path)))
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
    from ..store.index import variant_token
    from ..keys.targets import describe
    from ..keys.tokens import Token

    variants = [(variant_token(Token(stage, token, entry.components), reads), reads) for reads in entry.variants]
    held = [(variant, reads) for variant, reads in variants if tier.path(stage, variant.hex).exists()]
    what = (f"the {stage} entry {short_token(token)} of {entry.kernel} holds no code: building it asked about "
            f"the target, so its {artifact_class(stage).format.title} is filed per target")
    if not held:
        return (f"{what}, and none of those entries is in {tier.directory} now; compile the kernel for the "
                f"target you want, then export its entry (gpucache ls --kernel {entry.kernel} --stage {stage})")
    listed = "; ".join(f"{variant.short} ({describe(reads)})" for variant, reads in held)
    return (f"{what}: {listed}.  Export the one for your target by its token, e.g. gpucache export "
            f"{held[0][0].short} {short_name(entry.kernel)}.{artifact_class(stage).format.suffix}")
