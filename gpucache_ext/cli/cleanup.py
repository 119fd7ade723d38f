"""gpucache clear and prune: delete entries, or evict the least recently used."""

from __future__ import annotations

import sys

from ..keys.stagespec import PERSISTENT_STAGES
from ..units import format_bytes
from .output import CommandError, Progress


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
