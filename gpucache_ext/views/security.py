"""The persistent tiers' security: where each is, whether its entries are
signed (and required to be), what it refused and why, and what a previous
secret signed; as rows, text and an HTML table."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from ..store.signing import REASONS
from ..units import entries_phrase
from .markup import class_attr, esc, scrolling_table


# what each refusal reason (gpucache_ext.store.signing.REASONS) means, for people
REASON_HELP = {
    "bad signature": "changed since it was signed: tampered with, or damaged",
    "unsigned": "no signature, and this cache requires one",
    "other secret": "signed with a secret this cache does not hold: a retired one, or another team's",
}


def _rotation_help(command: str) -> str:
    return f"rotation in progress ({command} signs them again with GPUCACHE_SECRET)"


# what entries read signed by a previous secret mean, and what to do
ROTATION_HELP = _rotation_help("`gpucache verify --fix`")


def unsigned_warning(info) -> bool:
    """True for a tier in use whose entries are not signed although its note
    says why that matters (a shared tier, a folder others can write to); an
    unsigned private folder is not one."""
    return bool(info.used and not info.signed and info.note)


def _ordered(rejected) -> List[Tuple[str, int]]:
    """Refusals by reason, in `REASONS` order (then any others), none empty."""
    known = [(reason, int(rejected[reason])) for reason in REASONS if rejected.get(reason)]
    return known + [(reason, int(count)) for reason, count in sorted(rejected.items())
                    if reason not in REASONS and count]


def refusals_text(rejected) -> str:
    """`rejected` ({reason: count}) for people: "3 other secret (signed with a
    secret this cache does not hold: ...), 1 bad signature (...)"."""
    return ", ".join(f"{count} {reason}" + (f" ({REASON_HELP[reason]})" if reason in REASON_HELP else "")
                     for reason, count in _ordered(rejected))


def tier_rows(tiers) -> List[Dict[str, Any]]:
    """One dict per persistent tier (`KernelCache.tier_info`, `CacheStats.tiers`):
    tier, location, state ("signed", "unsigned", "not used"), shown (the state
    as reported: "UNSIGNED" where `unsigned_warning`), note (what to know and
    do), warn, rejected ({reason: count}),
    refused (their total) and previous_secret (entries read that a retired
    secret signed)."""
    rows = []
    for info in tiers:
        state, note = info.state, info.note or ""
        warn = state == "not used" or unsigned_warning(info)
        rejected = dict(_ordered(info.rejected or {}))
        rows.append({"tier": info.name, "location": info.location, "state": state,
                     "shown": "UNSIGNED" if warn and state == "unsigned" else state, "note": note,
                     "warn": warn, "rejected": rejected, "refused": sum(rejected.values()),
                     "previous_secret": int(info.previous_secret or 0)})
    return rows


def _tier_details(row: Dict[str, Any]) -> List[str]:
    """What a tier refused, and read signed by a previous secret, as lines."""
    lines = []
    if row["refused"]:
        lines.append(f"refused {entries_phrase(row['refused'])}: {refusals_text(row['rejected'])}")
    if row["previous_secret"]:
        lines.append(f"read {entries_phrase(row['previous_secret'])} signed by a previous secret: {ROTATION_HELP}")
    return lines


def tier_security_text(tiers) -> str:
    """The persistent tiers, a line each (where, and whether their entries are
    signed), then what each refused; "" without persistent tiers."""
    rows = tier_rows(tiers)
    if not rows:
        return ""
    name_width = max(len(row["tier"]) for row in rows)
    where_width = max(len(row["location"]) for row in rows)
    lines = ["persistent tiers"]
    for row in rows:
        state = row["shown"] + (f": {row['note']}" if row["note"] else "")
        lines.append(f"  {row['tier'].ljust(name_width)}  {row['location'].ljust(where_width)}  {state}")
        lines += [" " * (name_width + 4) + line for line in _tier_details(row)]
    return "\n".join(lines)


def tier_security_html(tiers) -> str:
    """`tier_security_text` as a table; each value in a ``data-tier-field``
    cell's ``data-value`` (state, rejected, previous_secret); "" without
    persistent tiers."""
    rows = tier_rows(tiers)
    if not rows:
        return ""
    body = []
    for row in rows:
        state_class = "gpucache-warn" if row["warn"] else "gpucache-hit" if row["state"] == "signed" else ""
        note = f'<div class="gpucache-muted">{esc(row["note"])}</div>' if row["note"] else ""
        reasons = "".join(
            f'<div data-reason="{esc(reason)}" data-count="{count}">{count} {esc(reason)}'
            + (f' <span class="gpucache-muted">({esc(REASON_HELP[reason])})</span>' if reason in REASON_HELP
               else "") + "</div>"
            for reason, count in row["rejected"].items())
        previous = row["previous_secret"]
        command = '<span class="gpucache-code">gpucache verify --fix</span>'
        rotation = (f'{esc(entries_phrase(previous))}<div class="gpucache-muted">{_rotation_help(command)}</div>'
                    if previous else "none")
        body.append(
            f'<tr data-tier="{esc(row["tier"])}"><th scope="row">{esc(row["tier"])}</th>'
            f'<td class="gpucache-code gpucache-where">{esc(row["location"])}</td>'
            f'<td data-tier-field="state" data-value="{esc(row["state"])}"{class_attr(state_class)}>'
            f'{esc(row["shown"])}{note}</td>'
            f'<td data-tier-field="rejected" data-value="{row["refused"]}"'
            f'{class_attr("gpucache-miss" if row["refused"] else "")}>{reasons or "none"}</td>'
            f'<td data-tier-field="previous_secret" data-value="{previous}"'
            f'{class_attr("gpucache-warn" if previous else "")}>{rotation}</td></tr>')
    caption = ("Persistent tiers: where the entries are, whether they are signed (and required to be), "
               "the entries refused for their signature, and those read that a previous secret signed, "
               "since the cache was made.")
    head = "".join(f'<th scope="col">{title}</th>'
                   for title in ("tier", "where", "signing", "refused", "signed by a previous secret"))
    return scrolling_table(f'<table class="gpucache-table gpucache-left gpucache-tiers-table"><thead><tr>{head}</tr>'
                           f'</thead><tbody>{"".join(body)}</tbody></table>', caption, "persistent tiers")
