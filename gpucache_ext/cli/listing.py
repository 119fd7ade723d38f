"""gpucache ls, show and diff: what the disk cache holds, one entry in full,
two entries side by side."""

from __future__ import annotations

import logging
import time
from typing import List

from ..keys.config import summary_fields
from ..store.codec import BadEntry, decode, read_header
from ..keys.stagespec import PERSISTENT_STAGES
from ..store.signing import Rejected, strip
from ..keys.tokens import short_token
from ..units import format_age, format_bytes
from .entries import entry_rows, find_entry, read_entry, read_toolchain, toolchain_stages
from .explain import entry_chain
from .output import CommandError, Progress

log = logging.getLogger(__name__)


def cmd_ls(tier, args, out):
    stages = (args.stage,) if args.stage else PERSISTENT_STAGES
    rows = entry_rows(tier, stages, args.kernel, args.older_than, args.newer_than,
                      Progress("reading", not args.json))
    if args.json:
        out(rows)
        return 0
    if not rows:
        out("no entries")
        return 0
    from ..pipeline.definitions import FILES
    from ..views.entries import kernel_labels

    configs = [summary_fields(r["config"]) for r in rows]
    # as wide as the widest config up to _CONFIG_WIDTH, and never narrower than a field
    width = max(len("config"), min(_CONFIG_WIDTH, max(len(r["config"]) for r in rows)),
                max(len(field) for fields in configs for field in fields))
    # each kernel definition by one name, told apart where two share it (axpy@In[7], as the inspector and
    # the reports name it: by the number its entries recorded, else axpy@cell 1a2b3c4d), never cut; by
    # what the entries say alone, also where this process has a notebook session of its own
    labels = kernel_labels(rows, FILES)
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


def cmd_show(tier, args, out):
    stage, path = find_entry(tier, args.token, args.stage)
    full_token = path.name[: -len(".entry")]
    data = path.read_bytes()
    header, _ = read_header(strip(data))
    compared = stage in toolchain_stages(args)
    if compared:
        read_toolchain(tier.directory, (stage,))
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
        args.out.write_bytes(artifact.exported()[1])
    occupancy = _occupancy(header, artifact)
    # why it was built, followed upstream to the root cause ("ptx input changed" <- ptx: ...)
    chain = entry_chain(tier, stage, header) if problem is None else [(stage, full_token, tuple(header["reasons"]))]
    if args.json:
        out({"stage": stage, "path": str(path), "header": header, "valid": problem is None,
             "problem": problem, "built_chain": [{"stage": s, "token": t, "reasons": list(r)} for s, t, r in chain],
             **({"occupancy": [
                 {"block": o.block, "blocks_per_sm": o.blocks_per_sm, "active_warps": o.active_warps,
                  "max_warps": o.max_warps, "occupancy": o.occupancy, "limited_by": o.limited_by}
                 for o in occupancy[1]]} if occupancy else {})})
        return 0 if problem is None else 1
    out(f"stage     {stage}\ntoken     {full_token}\nkernel    {header['kernel']}\n"
        f"signature {header['signature']}\nconfig    {header['config']}\n"
        f"created   {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(header['created']))}\n"
        f"size      {format_bytes(header['size'])} (compile took {header['seconds'] * 1e3:.1f} ms)\n"
        f"built     {_chain_text(chain)}\n"
        f"valid     {'yes' if problem is None else 'NO: ' + problem}"
        + ("" if compared or problem else " (key and checksum; --toolchain also compares its toolchain)"))
    out("components:")
    _components(header["components"], out, "  ")
    if artifact is not None:
        out("")
        out(artifact.described(f"written to {args.out}" if args.out else "use --out FILE to save it"))
    if occupancy:
        heading, rows = occupancy
        out("")
        out(heading)
        for row in rows:
            out(f"  {row.block:>5} threads  {row}")
    return 0 if problem is None else 1


def _chain_text(chain) -> str:
    """show's "built" line: the entry's reasons, then under them the entry
    before it's, to the root cause ("<- llvm 73ad4e0d1259: fastmath False -> True")."""
    (_, _, reasons), *upstream = chain
    lines = ["; ".join(reasons) or "-"]
    lines += [f"          <- {stage}{' ' + short_token(token) if token else ''}: {'; '.join(said)}"
              for stage, token, said in upstream]
    return "\n".join(lines)


# the block sizes `show` gives a cubin's occupancy at
_SHOWN_BLOCKS = (64, 128, 256, 512, 1024)


def _occupancy(header, artifact):
    """(heading, `Occupancy` per block size) of a linked entry (a cubin's),
    from its architecture and what its link log says it uses; None for
    other artifacts (or an architecture the calculator does not know)."""
    log = artifact.link_log if artifact is not None else None
    if log is None:
        return None
    from ..occupancy import OccupancyError, occupancy_table
    from ..pipeline.results import parse_resources

    fields = header.get("config_fields") or {}
    sm, bounds = fields.get("sm"), fields.get("launch_bounds")
    used = parse_resources(log)
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


def cmd_diff(tier, args, out):
    """Two entries side by side, by instruction: PTX of ptx entries, SASS
    (nvdisasm) of cubin entries (`gpucache_ext.queries.compare_artifacts`)."""
    from ..queries import COMPARED_STAGES, compare_artifacts

    found = [find_entry(tier, token, args.stage) for token in (args.token_a, args.token_b)]
    (stage, first), (other, second) = found
    if stage != other:
        raise CommandError(f"{short_token(first.name)} is a {stage} entry and {short_token(second.name)} a "
                           f"{other} one: give two entries of one stage ({' or '.join(COMPARED_STAGES)})")
    entries = [read_entry(tier, stage, path) for _, path in found]
    try:
        comparison = compare_artifacts(stage, *entries)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    out(comparison.as_dict() if args.json else comparison.text())
    return 0
