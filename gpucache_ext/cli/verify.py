"""gpucache verify: every entry of the disk tier, or of the shared tier, checked
(signature, key, checksum, toolchain) and fixed; with --recompile compiled again and compared."""

from __future__ import annotations

from collections import Counter

from ..store.codec import CORRUPT, OK, OTHER_TOOLCHAIN, PREVIOUS_SECRET, check_stored
from ..keys.stagespec import PERSISTENT_STAGES
from ..store.disk import DiskTier, configured_directory
from ..store.shared import display_url
from ..store.signing import BAD_SIGNATURE, OTHER_SECRET, UNSIGNED
from ..keys.tokens import short_token
from .entries import read_toolchain, toolchain_stages
from .output import CommandError, Progress, counted
from .server import check_answering, quiet, redis_url, shared_tier

# what verify --shared finds in an entry; all but the first two are bad
_OUTCOMES = (OK, PREVIOUS_SECRET, UNSIGNED, BAD_SIGNATURE, OTHER_SECRET, CORRUPT, OTHER_TOOLCHAIN)


def cmd_verify(tier, args, out):
    if args.shared:
        return _verify_shared(args, out)
    files = tier.scan()
    checked = len(files)
    compared = toolchain_stages(args)
    read_toolchain(tier.directory, {stage for stage, _, _ in files if stage in compared})
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
    return (f"{counted(count, 'entry', 'entries')} signed with a previous secret: "
            + ("signed again with GPUCACHE_SECRET" if fixed
               else f"{verify} --fix signs them again with GPUCACHE_SECRET"))


def _verify_shared(args, out) -> int:
    """verify --shared: every entry under the prefix, opened as a reader here
    opens it (signature), then its key and checksum (and toolchain with
    --toolchain); --fix re-signs what a previous secret signed, keeping the
    key's expiry, and deletes the bad ones."""
    from ..store.shared import UnsignedSharedTier

    if args.recompile:
        raise CommandError("--recompile compiles disk entries again; it does not work with --shared")
    url = redis_url(args)
    if url is None:
        raise CommandError("no shared cache is configured: set GPUCACHE_REDIS_URL or give --redis-url URL")
    compared = PERSISTENT_STAGES if args.toolchain else ()
    if compared:  # (learned as a compile here learns it: from the disk folder's memo, if there is one)
        folder = configured_directory(args.dir)
        read_toolchain(folder if folder is not None and folder.is_dir() else None, compared)
    counts = Counter({outcome: 0 for outcome in _OUTCOMES})
    bad, resigned, removed = [], 0, 0
    try:
        with quiet():
            tier = shared_tier(url)
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
            check_answering(tier)
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
        out(f"checked {counted(checked, 'entry', 'entries')} of the shared cache at {tier.location}: "
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
    and compare (see `gpucache_ext.pipeline.audit.recompile_entry`); evict mismatches."""
    import random

    from ..pipeline.audit import recompile_entry

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
    from ..store.index import variants_for
    from ..keys.tokens import Token

    entry = tier.get(stage, token)
    if entry is None or not entry.is_marker:
        return entry
    for variant in variants_for(entry, Token(stage, token, entry.components), cc):
        found = tier.get(stage, variant.hex)
        if found is not None:
            return found
    return None
