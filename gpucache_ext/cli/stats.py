"""gpucache stats: entries, bytes and signatures per stage, of the disk tier
and of the shared tier."""

from __future__ import annotations

from typing import Optional

from ..backends import always_listed
from ..keys.stagespec import PERSISTENT_STAGES
from ..store.shared import display_url
from ..store.signing import CURRENT, NOT_SIGNED, OTHER_SECRET, PREVIOUS, UNSIGNED
from ..units import format_bytes
from .output import counted
from .server import NotAnswering, check_answering, quiet, redis_url, shared_tier

# how entries are signed, as `Keyring.classify` reads their first bytes (stats'
# columns); the last two are what this reader refuses
_SIGNATURE_KINDS = (CURRENT, PREVIOUS, NOT_SIGNED, UNSIGNED, OTHER_SECRET)
_REFUSED_KINDS = (UNSIGNED, OTHER_SECRET)


def cmd_stats(tier, args, out):
    disk = (_tier_report(tier, "unsigned: no GPUCACHE_SECRET, signatures are not checked")
            if tier is not None else {"location": None, "used": False, "note": args.disk_problem})
    shared = _shared_report(redis_url(args))
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
    listed = always_listed()
    for stage in PERSISTENT_STAGES:
        counts = tier.stats(stage)
        if stage not in listed and not counts["entries"]:
            continue  # (another backend's stage, unused here: numba-cuda-mlir's mlir)
        found = tier.signatures(stage)
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
        out(f"{counted(sum(refused.values()), 'entry', 'entries')} would be refused here ("
            + ", ".join(f"{n} {kind}" for kind, n in refused.items() if n)
            + f"): a compile here builds them again; {verify} --fix removes them")
    if report["previous_secret"]:
        out(f"{counted(report['previous_secret'], 'entry', 'entries')} signed with a previous secret: "
            f"{verify} --fix signs them again with GPUCACHE_SECRET")


def _shared_report(url: Optional[str]) -> Optional[dict]:
    """stats of the shared tier at `url` (None: none configured)."""
    if url is None:
        return None
    from ..store.shared import UnsignedSharedTier

    try:
        with quiet():
            tier = shared_tier(url)
            report = _tier_report(tier, "unsigned: GPUCACHE_SHARED_UNSIGNED=1 and no GPUCACHE_SECRET, so "
                                        "anyone who can write to the server can change your kernels")
            check_answering(tier)
    except UnsignedSharedTier:
        return {"location": display_url(url), "used": False, "signed": False,
                "note": f"{display_url(url)} is not used: no secret is set. Set GPUCACHE_SECRET (the same "
                        "for everyone who shares it) to sign and check its entries, or "
                        "GPUCACHE_SHARED_UNSIGNED=1 to use it unsigned"}
    except NotAnswering as exc:
        return {"location": display_url(url), "used": True, "error": str(exc)}
    return report
