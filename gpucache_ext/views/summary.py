"""The per-stage and per-tier summary (hits, misses, cut-offs, entries,
bytes, time spent and saved, audits), as rows, text and an HTML table."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ..backends import always_listed
from ..keys.stagespec import ALL_STAGES, KEYED_ON_BYTES
from ..pipeline.results import StageStats
from ..units import format_bytes, format_seconds
from .markup import esc, scrolling_table


def _rate(hits: int, misses: int) -> str:
    total = hits + misses
    return f"{100.0 * hits / total:.0f}%" if total else "-"


# what a stage the stats do not name counted
_NOTHING = StageStats(hits=0, misses=0, not_needed=0, cutoffs=0, entries=0, bytes=0, evictions=0,
                      compile_seconds=0.0, saved_seconds=0.0, audits=0, audit_mismatches=0, tiers={})


def stages_used(stats) -> Tuple[str, ...]:
    """The stages the summary shows: the default backend's four, the other
    backend's once used (those `stats` lists), and the fatbin stage once
    something looked it up or it holds entries (in any tier)."""
    fatbin = stats.get("fatbin", _NOTHING)
    used = fatbin.hits or fatbin.misses or any(t.entries for t in fatbin.tiers.values())
    listed = always_listed() - {"fatbin"}
    return tuple(stage for stage in ALL_STAGES
                 if stage in listed or (stage in stats and (stage != "fatbin" or used)))


def saved_seconds(stats) -> Dict[str, Dict[str, float]]:
    """Compile time saved by hits, per stage and tier: ``{stage: {"total": s, tier: s}}``."""
    result = {}
    for stage in ALL_STAGES:
        values = stats.get(stage, _NOTHING)
        per_tier = {name: float(t.saved_seconds) for name, t in values.tiers.items()}
        result[stage] = {"total": float(values.saved_seconds), **per_tier}
    return result


_SUMMARY_COLUMNS = (
    ("hits", "hits"), ("misses", "misses"), ("hit_rate", "hit rate"), ("cutoffs", "cut off"),
    ("entries", "entries"), ("bytes", "bytes"), ("evictions", "evictions"),
    ("compile_seconds", "compile time spent"), ("saved_seconds", "compile time saved"), ("audits", "audits"),
    ("audit_mismatches", "audit mismatches"),
)
# shown where a compile waited for another process's build of an entry (`gpucache_ext.store.claims`)
_WAITS_COLUMN = ("waits", "waited for another process")


def _columns(rows) -> tuple:
    """The summary's columns: the waits only where some tier counted one."""
    return _SUMMARY_COLUMNS + ((_WAITS_COLUMN,) if any(row.get("waits") for row in rows) else ())


def _cell(stage: str, field: str, value: Any, shown: str, tier: Optional[str] = None,
          cls: str = "") -> str:
    attrs = f' data-stage="{esc(stage)}" data-field="{field}" data-value="{esc(value)}"'
    if tier is not None:
        attrs += f' data-tier="{esc(tier)}"'
    if cls:
        attrs += f' class="{cls}"'
    return f"<td{attrs}>{esc(shown)}</td>"


def storage_summary(stats) -> str:
    """What every tier holds, all stages together: "12.3 KiB in memory, 45.6 KiB on disk"."""
    parts = []
    for name in stats.tier_names():  # (KernelCache.stats always lists the memory tier)
        held = sum(int(stats[s].tiers[name].bytes) for s in ALL_STAGES if s in stats and name in stats[s].tiers)
        where = {"memory": "in memory", "disk": "on disk"}.get(name, f"in the {name} tier")
        parts.append(f"{format_bytes(held)} {where}")
    return ", ".join(parts)


def summary_rows(stats, saved) -> List[Dict[str, Any]]:
    """One dict per stage (then per tier, then a total): the numbers the summary shows."""
    rows = []
    tiers = stats.tier_names()
    totals = dict.fromkeys(("hits", "misses", "cutoffs", "entries", "bytes", "evictions", "audits",
                            "audit_mismatches"), 0)
    totals.update(compile_seconds=0.0, saved_seconds=0.0, waits=0)
    for stage in stages_used(stats):
        s = stats.get(stage, _NOTHING)
        row = {"stage": stage, "tier": None, "hits": int(s.hits),
               "misses": int(s.misses), "entries": int(s.entries),
               "bytes": int(s.bytes), "evictions": int(s.evictions),
               "compile_seconds": float(s.compile_seconds),
               "saved_seconds": float(saved.get(stage, {}).get("total", 0.0)),
               "audits": int(s.audits), "audit_mismatches": int(s.audit_mismatches),
               "waits": sum(int(t.waits or 0) for t in s.tiers.values())}
        row["hit_rate"] = _rate(row["hits"], row["misses"])
        cutoffs = int(s.cutoffs or 0)
        row["cutoffs"] = cutoffs if stage in KEYED_ON_BYTES or cutoffs else None
        rows.append(row)
        for key in totals:
            totals[key] += row[key] or 0
        lookups = row["hits"] + row["misses"]
        for name in tiers:
            t = s.tiers.get(name)
            if t is None:
                continue
            hits = int(t.hits)
            rows.append({"stage": stage, "tier": name, "hits": hits, "misses": None,
                         "hit_rate": f"{100.0 * hits / lookups:.0f}%" if lookups else "-", "cutoffs": None,
                         "entries": int(t.entries), "bytes": int(t.bytes),
                         "evictions": None, "compile_seconds": None,
                         "saved_seconds": float(saved.get(stage, {}).get(name, 0.0)),
                         "audits": None, "audit_mismatches": None, "waits": int(t.waits or 0) or None})
    total = {"stage": "all", "tier": None, **totals}
    total["hit_rate"] = _rate(total["hits"], total["misses"])
    rows.append(total)
    return rows


def _shown(field: str, value: Any) -> str:
    if value is None:
        return ""
    if field == "bytes":
        return format_bytes(value)
    if field in ("compile_seconds", "saved_seconds"):
        return format_seconds(value)
    return str(value)


def summary_html(stats, saved) -> str:
    rows = summary_rows(stats, saved)
    columns = _columns(rows)
    head = "<th scope=\"col\">stage</th>" + "".join(
        f"<th scope=\"col\">{esc(title)}</th>" for _, title in columns)
    body = []
    for row in rows:
        stage, tier = row["stage"], row["tier"]
        if tier is None:
            cls = "gpucache-total" if stage == "all" else "gpucache-stage"
            title = "all stages" if stage == "all" else stage
        else:
            cls, title = "gpucache-tier", f"\u21b3 {tier}"
        cells = []
        for field, _ in columns:
            value = row[field]
            if value is None:
                cells.append("<td></td>")
                continue
            mark = ""
            if field in ("misses", "audit_mismatches") and value and tier is None:
                mark = "gpucache-miss"
            elif field in ("hits", "cutoffs") and value and tier is None:
                mark = "gpucache-hit"
            cells.append(_cell(stage, field, value, _shown(field, value), tier, mark))
        tier_attr = f' data-tier="{esc(tier)}"' if tier else ""
        body.append(f'<tr class="{cls}" data-stage="{esc(stage)}"{tier_attr}>'
                    f'<th scope="row">{esc(title)}</th>{"".join(cells)}</tr>')
    caption = ("Per stage: lookups that hit and missed, the hits cut off (ptx and cubin found because "
               "the stage before was rebuilt to the same bytes: the cell report's \u201chit (same "
               "bytes)\u201d), what is cached in memory, compile time spent (misses) and saved (hits), "
               "and artifacts audited against a fresh compile (mismatches are soundness bugs); the "
               "indented rows give each tier's hits, entries, bytes and saved time"
               + ("; waits: entries found after waiting for another process's build of them." if
                  _WAITS_COLUMN in columns else "."))
    return scrolling_table(f'<table class="gpucache-table gpucache-summary-table"><thead><tr>{head}</tr></thead>'
                           f'<tbody>{"".join(body)}</tbody></table>', caption, "per stage and tier")


def summary_text(stats, saved) -> str:
    rows = summary_rows(stats, saved)
    shown = _columns(rows)
    columns = ["stage"] + [title for _, title in shown]
    lines = []
    for row in rows:
        title = row["stage"] if row["tier"] is None else f"  {row['tier']}"
        if row["stage"] == "all":
            title = "all"
        lines.append([title] + [_shown(f, row[f]) for f, _ in shown])
    widths = [max(len(columns[i]), *(len(line[i]) for line in lines)) for i in range(len(columns))]

    def fmt(cells):
        return "  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i])
                         for i, c in enumerate(cells)).rstrip()

    return "\n".join([fmt(columns)] + [fmt(line) for line in lines])
