"""What a %%gpukernel cell reports: per kernel and signature, per stage, hit
or miss (and from which tier), time spent, time saved, and why it missed;
under the table, a line when a hit came from an unsigned shared tier, and
one when the cache refused entries for their signature during the cell.

A `CellReport` shows as a small HTML table in notebooks (in an output too narrow
for its columns, each row as lines of labelled cells) and as plain text in a
terminal (or any frontend without HTML).  Nothing here imports IPython:
display happens through the ``_repr_*_`` protocol.
"""

from __future__ import annotations

import html
import math
import sys
from typing import TYPE_CHECKING, Dict, Iterable, List, Mapping, NamedTuple, Optional

from ..pipeline.results import FatbinResult, Outcome, short_signature  # noqa: F401  (re-exported)
from ..keys.config import FOLLOW_FASTMATH, summary_fields
from ..keys.stagespec import ALL_STAGES, STAGE_SPEC, STAGES, TARGET_STAGES
from ..keys.tokens import short_name, short_token
from ..keys.reasons import Reason, and_join, cutoff_phrase, own  # noqa: F401  (and_join re-exported)
from ..units import format_seconds

if TYPE_CHECKING:  # annotations only: cache imports numba-cuda, which the gpucache command must not
    from ..pipeline.cache import CompileResult
    from ..pipeline.results import TierInfo

# The report's table, in the output's code font (monospaced: widths are counted in characters,
# `ch`).  JupyterLab's `:not(.jp-RenderedMarkdown).jp-RenderedHTMLCommon td` (right-aligned, free to
# wrap) and `.jp-RenderedHTMLCommon table` (13px) outweigh one class: these rules name the table's
# class twice.  Cells do not wrap (a stage, a time, a kernel name) but the signature and the config,
# which break only between their arguments and fields (each a nowrap span), and "why", which wraps
# from a least width of its own.  The table's box is a size container: where it is narrower than
# the table can be (`_table_ch`), `_stacked_style` lays each row out as lines of labelled cells.
_PAD_CH = 1.5  # a cell's padding, both sides together
_WHY_CH = 24  # the why column's least width
_STYLE = (
    "<style>"
    ".gpucache-report-box{container-type:inline-size;max-width:100%;overflow-x:auto;"
    "font-family:var(--jp-code-font-family,monospace);font-size:12px}"
    ".gpucache-report.gpucache-report{border-collapse:collapse;font-family:inherit;font-size:inherit;"
    "color:inherit;table-layout:auto;width:auto;max-width:100%;margin:0 0 4px}"
    ".gpucache-report.gpucache-report th,.gpucache-report.gpucache-report td{"
    f"padding:2px {_PAD_CH / 2}ch;text-align:left;vertical-align:top;white-space:nowrap;line-height:1.4;"
    "border-bottom:1px solid var(--jp-border-color2,rgba(128,128,128,.3))}"
    ".gpucache-report.gpucache-report thead th{border-bottom-color:var(--jp-border-color1,rgba(128,128,128,.6))}"
    ".gpucache-report.gpucache-report td.gpucache-signature,.gpucache-report.gpucache-report td.gpucache-config"
    "{white-space:normal}"
    f".gpucache-report.gpucache-report td.gpucache-why{{white-space:normal;min-width:{_WHY_CH}ch;"
    "overflow-wrap:anywhere}"
    ".gpucache-nowrap{white-space:nowrap}"
    ".gpucache-hit{color:var(--jp-success-color1,#2e7d32)}"
    ".gpucache-miss{color:var(--jp-error-color1,#c62828);font-weight:bold}"
    ".gpucache-cutoff{font-style:italic}"
    ".gpucache-why{opacity:.85}"
    ".gpucache-warn{color:var(--jp-warn-color1,#e65100);font-weight:bold}"
    # (the variants tables' caption, and the box a wide one scrolls in: `views.markup.scrolling_table`)
    ".gpucache-caption{margin:6px 0 0;white-space:normal}"
    ".gpucache-table-scroll{overflow-x:auto;max-width:100%}"
    "</style>"
)


def _split_outside_brackets(text: str, sep: str) -> List[str]:
    """`text` split at each `sep` that is not inside (), [] or {}:
    "float32[:, :], int32" -> ["float32[:, :]", "int32"]."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        char = text[i]
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(0, depth - 1)
        elif depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i])
            i += len(sep)
            start = i
            continue
        i += 1
    parts.append(text[start:])
    return [part for part in parts if part]


def signature_pieces(signature: str) -> List[str]:
    """The argument types of a `short_signature`, each whole:
    "(float32[:, :], int32)" -> ["float32[:, :]", "int32"]."""
    inner = signature[1:-1] if signature.startswith("(") and signature.endswith(")") else signature
    return _split_outside_brackets(inner, ", ")


def _nowrap(pieces: Iterable[str], between: str) -> str:
    return between.join(f'<span class="gpucache-nowrap">{html.escape(piece)}</span>' for piece in pieces)


def _least_ch(column: str, text: str) -> int:
    """The width of a report cell's widest part that cannot break, in characters."""
    if column == "why":
        return _WHY_CH
    if column == "config":
        return max(map(len, summary_fields(text)), default=0)
    pieces = signature_pieces(text) if column == "signature" and text.startswith("(") else []
    if pieces:  # "(a," "b," "c)"
        return max(len(piece) + 1 + (i == 0) for i, piece in enumerate(pieces))
    return len(text)


def _table_ch(columns: List[str], rows: List[Dict[str, str]]) -> int:
    """The least width of a report's table, in characters of its font (with room to spare)."""
    return math.ceil(sum(max(len(column), *(_least_ch(column, row[column]) for row in rows)) + _PAD_CH
                         for column in columns)) + 2


def _stacked_style(columns: List[str], fit: str, least_ch: int) -> str:
    """Where the report's box (``data-fit=fit``) is narrower than `least_ch`:
    each row as lines of cells, each named by its column ("typing MISS"), the
    header hidden, "why" on a line of its own, empty cells left out."""
    box = f'.gpucache-report-box[data-fit="{fit}"] .gpucache-report'
    labels = "".join(f'{box} td:nth-child({i})::before{{content:"{column}"}}' for i, column in enumerate(columns, 1))
    return ("<style>"
            f"@container (max-width:{least_ch}ch){{"
            f"{box},{box} tbody{{display:block}}"
            f"{box} thead{{display:none}}"
            f"{box} tr{{display:flex;flex-wrap:wrap;column-gap:2ch;padding:3px 2px;"
            "border-bottom:1px solid var(--jp-border-color2,rgba(128,128,128,.3))}"
            f"{box} td{{display:block;padding:0;border:none;min-width:0;max-width:100%}}"
            f"{box} td::before{{margin-right:1ch;color:var(--jp-ui-font-color2,#616161);font-weight:normal;"
            "font-style:normal}"
            f"{labels}"
            f"{box} td:empty{{display:none}}"
            f"{box} td.gpucache-why{{flex-basis:100%;min-width:0}}"
            "}</style>")


def _stage_cell(done, unsigned=()) -> str:
    """hit, hit:TIER, hit:TIER (unsigned) for a tier in `unsigned`, MISS or not
    needed; a hit because the stage before was rebuilt to the same bytes (early
    cutoff) adds "same bytes": hit (same bytes), hit:TIER (unsigned, same bytes); an
    entry another process built while this one waited says so, with the wait."""
    if done.outcome is Outcome.NOT_NEEDED:
        return "not needed"
    if done.hit:
        marks = [mark for mark, shown in (("unsigned", done.tier in unsigned), ("same bytes", done.cutoff),
                                          (f"another process built it, waited {format_seconds(done.waited)}",
                                           done.waited > 0))
                 if shown]
        tier = "" if done.tier in ("memory", None) else f":{done.tier}"
        return f"hit{tier}" + (f" ({', '.join(marks)})" if marks else "")
    return "MISS"


def refusals_between(before: Iterable[TierInfo], after: Iterable[TierInfo]) -> Dict[str, Dict[str, int]]:
    """What the persistent tiers refused between two `KernelCache.tier_info`
    readings: {tier name: {reason: count}}, only the tiers that refused some."""
    earlier = {(info.name, info.location, reason): count
               for info in before for reason, count in info.rejected.items()}
    found: Dict[str, Dict[str, int]] = {}
    for info in after:
        for reason, count in info.rejected.items():
            grew = count - earlier.get((info.name, info.location, reason), 0)
            if grew > 0:
                found.setdefault(info.name, {})[reason] = grew
    return found


def _reused_after(result: CompileResult, stage: str) -> List[str]:
    """The stages after `stage` that hit one after the other: those a rebuild
    of `stage` to the same bytes left reused."""
    reused = []
    built = _built(result)
    for later in built[built.index(stage) + 1:]:
        if result.stages[later].outcome is not Outcome.HIT:
            break
        reused.append(later)
    return reused


def _cutoff(result: CompileResult, stage: str, reasons: Iterable[str]) -> str:
    """`stage` (a miss) rebuilt to the same bytes as before, with the stages
    of `result` that were reused after it (`cutoff_phrase`)."""
    return cutoff_phrase(stage, reasons, _reused_after(result, stage))


def cut_off(result: CompileResult) -> List[str]:
    """The stages of `result` rebuilt to the same bytes as before (the stage
    after each hit: `StageResult.cutoff`), in pipeline order."""
    built = _built(result)
    return [stage for stage, after in zip(built, built[1:])
            if result.stages[stage].outcome is Outcome.MISS and result.stages[after].cutoff]


def _built(result: CompileResult) -> List[str]:
    """The stages `result` went through, in its backend's order: all of its
    chain, or up to ptx for a fatbin's PTX-only target."""
    return [stage for stage in result.stages if STAGE_SPEC[stage].per_target]


def cutoff_text(result: CompileResult) -> List[str]:
    """A `cutoff_phrase` per stage of `result` rebuilt to the same bytes, with
    every reason it missed for."""
    return [_cutoff(result, stage, own(result.stages[stage].reasons)) for stage in cut_off(result)]


def why_text(result: CompileResult) -> str:
    """Why the stages that compiled did, each reason once, at the first stage
    it reaches: "llvm: fastmath False -> True; ptx: sm 86 -> 80".  A stage that
    missed only because the one before it did adds nothing; a field that
    follows fastmath is left out where fastmath itself changed.  A stage
    rebuilt to the same bytes as before says so, with the stages after it that
    were reused: "ptx rebuilt (opt 3 -> 2), same bytes: cubin reused"."""
    said, parts = set(), []
    reasons = {stage: result.stages[stage].reasons for stage in _built(result) if not result.stages[stage].hit}
    fastmath = any(Reason.of(r).component == "fastmath" for found in reasons.values() for r in found)
    same_bytes = cut_off(result)
    for stage, found in reasons.items():
        new = []
        for reason in own(found):
            field = reason.component
            if fastmath and field in FOLLOW_FASTMATH and getattr(result.config, field, None) is None:
                continue
            if reason not in said:
                said.add(reason)
                new.append(reason)
        if stage in same_bytes:
            parts.append(_cutoff(result, stage, new))
        elif new:
            parts.append(f"{stage}: {', '.join(new)}")
    return "; ".join(parts)


# an audit not yet run as the report is shown; the HTML report says when it runs
AUDIT_QUEUED = "queued"
_AUDIT_QUEUED_TITLE = ("audited in the background after this cell, against a fresh compile; this report is "
                       "not updated: a mismatch is told in a later cell's report, and %gpucache stats counts "
                       "audits")


def _audit_cell(result: CompileResult) -> str:
    """The audit of a compile: ok, queued (it runs after the cell: the
    report, saved with the notebook, is not updated, and a mismatch is told
    in a later cell's report), or which stages differed from a fresh compile."""
    audit = result.audit
    if audit is None:
        return ""
    if audit.state == "mismatch":
        return "MISMATCH " + ",".join(sorted({m.stage for m in audit.mismatches}))
    if audit.state == "failed":
        return "FAILED"
    return {"passed": "ok", "pending": AUDIT_QUEUED}.get(audit.state, audit.state)


def _kernel_name(result: CompileResult) -> str:
    return short_name(result.kernel)


def launch_line(result: CompileResult, occasion: str = "at this launch") -> Optional[str]:
    """One line for a compile made after its cell ran (a device function or a
    global changed elsewhere, or a lazy kernel met new argument types), at a
    launch or as `occasion` says ("as its variants were read", "at
    use(max_registers=32)"): which stages compiled, how long, and why; None
    where every stage hit."""
    if isinstance(result, FatbinResult):
        built = [f"sm_{sm} {stage}" for sm, each in sorted(result.per_target.items())
                 for stage in _built(each) if not each.stages[stage].hit]
        built += [] if result.fatbin_stage.hit else ["fatbin"]
        why = why_text(result) or "; ".join(result.fatbin_stage.reasons)
    else:
        built = [stage for stage in _built(result) if not result.stages[stage].hit]
        why = why_text(result)
    if not built:
        return None
    return (f"gpukernel: compiled {_kernel_name(result)} {short_signature(result.signature)} "
            f"[{result.applied_summary()}] {occasion} ({', '.join(built)}; "
            f"{format_seconds(result.seconds)}){': ' + why if why else ''}")


class VariantsTable(NamedTuple):
    """A sweep's variants of one kernel, as the report shows them.

    A read-only view: each time it is shown, every result it lists is
    re-checked against its kernel's inputs now, with the check a launch makes
    (`gpucache_ext.launch.registry.stale_reasons`, ``cache.still_current``);
    nothing is compiled while a report is shown, so a result built from an
    earlier state (a global or a device function changed since, also later
    in the same cell) is marked ``EARLIER``, with what changed as the cache
    explains a miss ("global K 2.5 -> 3.25").  A result whose kernel is
    gone is shown as it is (nothing is left to check it against)."""

    title: str
    rows: list  # `gpucache_ext.queries.ResourceRow`, per variant and architecture
    occupancy: object  # `gpucache_ext.queries.VariantOccupancy`
    moves: list  # `gpucache_ext.queries.ResourceMove`, from the first variant
    results: list  # the `CompileResult`s the rows come from
    # {cubin token: the cell that built it ("In[7]")} where the rows were built in several cells
    # (a sweep's variants include those earlier cells built: no place is in a token); None otherwise
    built: Optional[Dict[str, Optional[str]]] = None

    def stale(self) -> Dict[str, tuple]:
        """{cubin token: what changed} for the rows built from an earlier state, checked now."""
        registry = sys.modules.get("gpucache_ext.launch.registry")  # (no Kernel exists before it is imported)
        if registry is None:
            return {}
        found = {}
        for result in self.results:
            reasons = registry.stale_reasons(result)
            if reasons:
                for each in result.cubin_targets.values():
                    found[each.stages["cubin"].token] = reasons
        return found


class CellReport:
    """One row per kernel and signature compiled (or found) in a cell."""

    def __init__(self, results: Iterable[CompileResult], explain: bool = False,
                 audit_findings: Iterable = (), tiers: Iterable[TierInfo] = (),
                 refused: Optional[Mapping[str, Mapping[str, int]]] = None, bound: Iterable[str] = (),
                 variants: Iterable = ()):
        self.results: List[CompileResult] = list(results)
        # the per-target stages the results went through, in declaration order: the stage
        # columns (numba-cuda's typing, llvm, ptx, cubin; numba-cuda-mlir's mlir in place of llvm)
        used = {each.stage for result in self.results for each in result.every_stage()}
        self.stages = tuple(stage for stage in TARGET_STAGES if stage in used) or STAGES
        # a sweep's variants, a `VariantsTable` per kernel (its results get no per-architecture table)
        self.variants: List[VariantsTable] = list(variants)
        self._swept = {id(result) for table in self.variants for result in table.results}
        # what the cell bound that compiled nothing yet: "lazy_add: compiles at its first launch, ..."
        self.bound = list(bound)
        self.explain = explain
        # mismatches background audits found since the previous cell
        self.audit_findings = list(audit_findings)
        # the cache's persistent tiers (`KernelCache.tier_info`): hits from an unsigned one are marked
        self.tiers = list(tiers)
        # entries the tiers refused for their signature during the cell: {tier: {reason: count}}
        # (see `refusals_between`)
        self.refused = {tier: dict(reasons) for tier, reasons in (refused or {}).items() if reasons}

    def _unsigned(self) -> Dict[str, str]:
        """The tiers whose hits are marked unsigned, with what to know and do about them."""
        if not self.tiers:
            return {}
        from ..views.security import tier_rows

        return {row["tier"]: row["note"] for row in tier_rows(self.tiers) if row["shown"] == "UNSIGNED"}

    def _security_text(self) -> List[str]:
        """A line per unsigned tier a hit of this cell came from, and one for
        the entries refused during the cell: nothing when all is signed."""
        unsigned = self._unsigned()
        hit_from = {done.tier for result in self.results for done in result.every_stage()
                    if done.outcome is Outcome.HIT}
        lines = [f"{tier} tier is unsigned: {note}" for tier, note in unsigned.items() if tier in hit_from]
        if self.refused:
            from ..views.security import entries_phrase, refusals_text

            lines.append("refused in this cell (not used): " + "; ".join(
                f"{entries_phrase(sum(reasons.values()))} of the {tier} tier, {refusals_text(reasons)}"
                for tier, reasons in self.refused.items()))
        return lines

    def _per_architecture(self):
        """(title, `ResourceRow`s) for each multi-target kernel: one row per cubin target."""
        from ..queries import ResourceRow

        for result in self.results:
            if isinstance(result, FatbinResult) and id(result) not in self._swept:
                yield (f"{_kernel_name(result)} {short_signature(result.signature)} per architecture "
                       f"(fatbin {len(result.fatbin)} B)",
                       [ResourceRow.from_result(each) for each in result.cubin_targets.values()])

    def _architectures_text(self) -> List[str]:
        from ..views.variants import resource_moves_text, resources_table_text

        lines = []
        for title, rows in self._per_architecture():
            lines += ["", title + ":", *("  " + line for line in resources_table_text(rows).splitlines())]
        for table in self.variants:
            lines += ["", table.title + ":", *("  " + line for line in resources_table_text(
                table.rows, table.occupancy, table.stale(), table.built).splitlines())]
            moved = resource_moves_text(table.moves)
            if moved:
                lines += ["  how the figures moved between variants one field apart:",
                          *("    " + line for line in moved.splitlines())]
        return lines

    def _findings_text(self) -> List[str]:
        return [f"audit: the cached {m.stage} of {short_name(m.kernel)} (token {short_token(m.token)}) "
                "differed from a fresh compile; it was evicted and the fresh code is in use"
                for m in self.audit_findings]

    def rows(self) -> List[Dict[str, str]]:
        """One row per kernel and signature; a multi-target kernel has one per
        target, then one for its fatbin."""
        rows = []
        unsigned = self._unsigned()
        for result in self.results:
            if not isinstance(result, FatbinResult):
                rows.append(self._row(result, result.applied_summary(), unsigned))
                continue
            for sm, each in sorted(result.per_target.items()):
                rows.append(self._row(each, each.applied_summary() + ("" if sm in result.targets.sms
                                                                      else " (PTX only)"), unsigned))
            fatbin = result.fatbin_stage
            row = dict.fromkeys(self._columns(), "")
            row.update(kernel=_kernel_name(result), signature=short_signature(result.signature),
                       config=result.targets.summary(), fatbin=_stage_cell(fatbin, unsigned),
                       time=format_seconds(fatbin.seconds), saved=format_seconds(fatbin.saved_seconds),
                       why="; ".join(([f"fatbin: {', '.join(fatbin.reasons)}"] if not fatbin.hit else [])
                                     + ([f"no PTX: {result.ptx_note}"] if result.ptx_note else [])),
                       audit=_audit_cell(result))
            rows.append(row)
        return rows

    def _row(self, result: CompileResult, config: str, unsigned) -> Dict[str, str]:
        row = {"kernel": _kernel_name(result), "signature": short_signature(result.signature), "config": config}
        for stage in self.stages:
            row[stage] = _stage_cell(result.stages[stage], unsigned) if stage in result.stages else "-"
        row["fatbin"] = ""
        row["time"] = format_seconds(result.seconds)
        row["saved"] = format_seconds(result.saved_seconds)
        row["why"] = why_text(result)
        row["audit"] = _audit_cell(result)
        return row

    def _columns(self):
        columns = ["kernel", "signature", "config", *self.stages, "time", "saved", "why"]
        if any(isinstance(result, FatbinResult) for result in self.results):
            columns.insert(len(self.stages) + 3, "fatbin")
        if any(result.audit is not None for result in self.results):
            columns.append("audit")
        return columns

    def __repr__(self) -> str:
        rows = self.rows()
        if not rows:
            return "\n".join([*self._bound_text(), *self._security_text(), *self._findings_text()])
        columns = self._columns()
        widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in columns}
        lines = ["  ".join(c.ljust(widths[c]) for c in columns).rstrip()]
        lines += ["  ".join(r[c].ljust(widths[c]) for c in columns).rstrip() for r in rows]
        lines += self._architectures_text()
        if self.explain:
            lines += ["", *self._explanations_text()]
        return "\n".join(lines + self._bound_text() + self._security_text() + self._findings_text())

    def _bound_text(self) -> List[str]:
        """What the cell bound besides what it compiled; "no kernel compiled"
        where it bound nothing at all."""
        if not self.bound:
            return [] if self.results else ["gpukernel: no kernel compiled in this cell"]
        head = "gpukernel: also bound" if self.results else "gpukernel: nothing compiled in this cell; bound"
        return [f"{head}:", *(f"  {line}" for line in self.bound)]

    def _repr_pretty_(self, printer, cycle):
        printer.text(repr(self))

    def _explanations_text(self) -> List[str]:
        lines = []
        for result in self.results:
            lines.append(result.explain())
            each = [(f"sm_{sm} ", r.stages[stage]) for sm, r in sorted(result.per_target.items())
                    for stage in _built(r)] + [("", result.fatbin_stage)] \
                if isinstance(result, FatbinResult) else [("", result.stages[stage]) for stage in _built(result)]
            for target, done in each:
                lines.append(f"  {target}{done.stage} token {done.token}")
                for name, part in sorted(done.components.items()):
                    lines.append(f"    {name:<28} {short_token(part.digest)}  {part.shown}")
        return lines

    def _repr_mimebundle_(self, include=None, exclude=None, **kwargs):
        """Plain text and static HTML: a terminal, an exported notebook or any
        frontend shows the same numbers."""
        return {"text/plain": repr(self), "text/html": self._repr_html_()}

    def _repr_html_(self) -> str:
        rows = self.rows()
        findings = "".join(f'<p class="gpucache-warn">{html.escape(line)}</p>' for line in self._security_text())
        findings += "".join(f'<p class="gpucache-miss">{html.escape(line)}</p>'
                            for line in self._findings_text())
        bound = self._bound_text()
        bound_html = (f'<p class="gpucache-bound">{html.escape(bound[0])}</p>'
                      + ("<ul>" + "".join(f"<li>{html.escape(line.strip())}</li>" for line in bound[1:]) + "</ul>"
                         if len(bound) > 1 else "")) if bound else ""
        if not rows:
            return f"{_STYLE}{bound_html}{findings}"
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self._columns())
        body = []
        for row in rows:
            cells = []
            for column in self._columns():
                text = html.escape(row[column])
                if (column in ALL_STAGES or column == "audit") and row[column] not in ("", "-"):
                    shown = row[column]
                    cls = "gpucache-miss" if shown.startswith(("MISS", "MISMATCH", "FAILED")) \
                        else "gpucache-warn" if "(unsigned" in shown else "gpucache-hit"
                    title = ""
                    if column == "audit" and shown == AUDIT_QUEUED:
                        cls, title = "gpucache-queued", f' title="{_AUDIT_QUEUED_TITLE}"'
                    if shown.endswith("same bytes)"):  # (stages only: the first has none before it)
                        # (the stage this row ran before it: its backend's chain)
                        stages = self.stages
                        before = [s for s in stages[:stages.index(column)] if row[s] not in ("", "-")][-1]
                        cls += " gpucache-cutoff"
                        title = (f' title="{before} was rebuilt to the same bytes as before, so this '
                                 f'{column} was found, not rebuilt (early cutoff)"')
                    cells.append(f'<td class="{cls}"{title}>{text}</td>')
                elif column == "why":
                    cells.append(f'<td class="gpucache-why">{text}</td>')
                elif column == "signature" and row[column].startswith("("):
                    cells.append(f'<td class="gpucache-signature">('
                                 f'{_nowrap(signature_pieces(row[column]), ", ")})</td>')
                elif column == "config" and row[column]:
                    cells.append(f'<td class="gpucache-config">{_nowrap(summary_fields(row[column]), " ")}</td>')
                else:
                    cells.append(f"<td>{text}</td>")
            body.append("<tr>" + "".join(cells) + "</tr>")
        columns = self._columns()
        least = _table_ch(columns, rows)
        fit = "-".join([str(least), *(c for c in columns if c in ("fatbin", "audit"))])
        table = (f'{_STYLE}{_stacked_style(columns, fit, least)}<div class="gpucache-report-box" data-fit="{fit}">'
                 f'<table class="gpucache-report"><thead><tr>{head}</tr></thead>'
                 f'<tbody>{"".join(body)}</tbody></table></div>')
        for title, arch_rows in self._per_architecture():
            from ..views.variants import resources_table_html

            table += (f'<p class="gpucache-arch-title">{html.escape(title)}</p>'
                      + resources_table_html(arch_rows))
        for variants in self.variants:
            from ..views.variants import resource_moves_html, resources_table_html

            table += (f'<div class="gpucache-variants"><p class="gpucache-arch-title">'
                      f'{html.escape(variants.title)}</p>'
                      + resources_table_html(variants.rows, variants.occupancy, variants.stale(), variants.built)
                      + "<p>How the figures moved between variants one field apart:</p>"
                      + resource_moves_html(variants.moves) + "</div>")
        if self.explain:
            table += "<pre>" + html.escape("\n".join(self._explanations_text())) + "</pre>"
        return table + bound_html + findings
