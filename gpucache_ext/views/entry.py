"""One entry's view: why it was built (against the nearest other entry of
its kernel), its config and which stages read each field, its token's
components, its resources and its artifacts (typed IR, NVVM IR, PTX, SASS,
link log, a fatbin's members)."""

from __future__ import annotations

import dataclasses
import io
import logging
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from .. import sessions
from ..keys.config import FIELD_STAGES, FOLLOW_FASTMATH, CompileConfig
from ..keys.stagespec import STAGE_SPEC, TARGET_STAGES
from ..pipeline.artifacts import Artifact, Listing, Members, Part
from ..pipeline.results import parse_resources, short_signature
from ..keys.tokens import short_token
from ..units import format_age, format_bytes, format_seconds
from .markup import esc, short_kernel
from .variants import resources_table_html

log = logging.getLogger(__name__)

_MAX_ARTIFACT_CHARS = 200_000


def _effective(values: Dict[str, Any]) -> Dict[str, Any]:
    try:
        return CompileConfig(**values).normalised()
    except Exception:
        log.debug("a config from an older entry is shown as stored", exc_info=True)
        return dict(values)


def _pre(text: str, label: str) -> str:
    text = text or ""
    more = ""
    if len(text) > _MAX_ARTIFACT_CHARS:
        more = f"\n... ({len(text) - _MAX_ARTIFACT_CHARS} more characters)"
        text = text[:_MAX_ARTIFACT_CHARS]
    lines = text.count("\n") + 1 if text else 0
    return (f"<details><summary>{esc(label)} ({lines} lines)</summary>"
            f'<pre aria-label="{esc(label)}">{esc(text + more)}</pre></details>')


def _typed_ir_text(artifact) -> str:
    state = getattr(artifact, "state", {}) or {}
    lines = []
    args = state.get("args")
    if args is not None:
        lines.append("arguments: " + short_signature(args)[1:-1])
    if state.get("return_type") is not None:
        lines.append(f"returns:   {state['return_type']}")
    typemap = state.get("typemap") or {}
    if typemap:
        lines.append("")
        lines.append("variable types:")
        for name in sorted(typemap, key=str):
            lines.append(f"  {name}: {typemap[name]}")
    func_ir = state.get("func_ir")
    if func_ir is not None:
        buffer = io.StringIO()
        try:
            func_ir.dump(file=buffer)
            lines += ["", "typed IR:", buffer.getvalue()]
        except Exception:  # numba's IR dump is best effort
            log.debug("numba could not dump the typed IR", exc_info=True)
    return "\n".join(lines)


def artifacts_html(stage: str, entry, sass: Optional[str] = None, sass_note: Optional[str] = None,
                   sass_label: Optional[str] = None) -> str:
    """The entry's artifacts, as its class declares them (`artifacts.Artifact.parts`);
    for machine code (a cubin's), first `sass` (its SASS, headed `sass_label`:
    "SASS sm_86 (nvdisasm 13.5)") or `sass_note` (why there is none).  An
    artifact no class declares (typing's: numba's typed function) is shown as typed IR."""
    artifact = entry.artifact
    if artifact is None:
        return '<p class="gpucache-muted">The artifact is not loaded (it lives in a persistent tier).</p>'
    if not isinstance(artifact, Artifact):
        return _pre(_typed_ir_text(artifact), "typed IR")
    parts = []
    if artifact.machine_code is not None:
        if sass is not None:
            parts.append(_pre(sass, sass_label or "SASS (nvdisasm)"))
        else:
            parts.append(f'<p class="gpucache-muted gpucache-sass-note">{esc(sass_note or "")}</p>')
    parts += [_part_html(part) for part in artifact.parts()]
    return "".join(parts)


def _part_html(part: Part) -> str:
    if isinstance(part, Listing):
        return _pre(part.text, part.label)
    if isinstance(part, Members):
        items = "".join(f'<tr><th scope="row">{esc(m.name)}</th><td>{esc(m.kind)}</td>'
                        f'<td>{esc(format_bytes(m.nbytes))}</td>'
                        f'<td class="gpucache-code">{esc(short_token(m.token))}</td></tr>'
                        for m in part.members)
        return ('<table class="gpucache-table gpucache-fatbin-members"><caption>What the fatbin holds (the '
                'driver loads the cubin of the GPU\'s architecture, else compiles the PTX)</caption>'
                '<thead><tr><th scope="col">architecture</th><th scope="col">kind</th><th scope="col">size'
                f'</th><th scope="col">entry</th></tr></thead><tbody>{items}</tbody></table>')
    return f'<p class="gpucache-muted gpucache-wrap">{esc(part.text)}</p>' if part.aside else f"<p>{esc(part.text)}</p>"


def _resources_html(stage: str, entry, downstream) -> str:
    if not STAGE_SPEC[stage].per_target:  # (a fatbin: its cubins', by architecture)
        if not downstream:
            return '<p class="gpucache-muted">None of this fatbin\'s cubin entries is cached any more.</p>'
        return resources_table_html(downstream)
    log = entry.artifact.link_log if isinstance(entry.artifact, Artifact) else None
    if log is not None:  # (it was linked: its own)
        res = parse_resources(log)
        rows = [("registers", res["registers"], ""), ("barriers", res["barriers"], ""),
                ("shared memory", format_bytes(res["shared_bytes"]), ""),
                ("local memory", format_bytes(res["local_bytes"]), ""),
                ("constant memory", format_bytes(res["constant_bytes"]), ""),
                ("stack", format_bytes(res["stack_bytes"]), ""),
                ("spill stores", format_bytes(res["spill_stores"]),
                 "gpucache-warn" if res["spill_stores"] else ""),
                ("spill loads", format_bytes(res["spill_loads"]),
                 "gpucache-warn" if res["spill_loads"] else "")]
        body = "".join(f'<tr><th scope="row">{name}</th><td class="{cls}" data-resource="{name}">'
                       f'{esc(value)}</td></tr>' for name, value, cls in rows)
        return (f'<table class="gpucache-table gpucache-resources"><caption>Per thread and block, '
                f'from the linker\'s log</caption><tbody>{body}</tbody></table>')
    if not downstream:
        return ('<p class="gpucache-muted">Resources (registers, spills, shared memory) are measured '
                'when linking a cubin; no cubin built from this entry is cached.</p>')
    items = []
    for row, res in downstream:
        items.append(f'<li><span class="gpucache-code">{esc(short_token(row.token))}</span> '
                     f'[{esc(row.config)}]: {res["registers"]} registers, '
                     f'{esc(format_bytes(res["shared_bytes"]))} shared, spills '
                     f'{res["spill_stores"]}/{res["spill_loads"]} B</li>')
    return ('<p>Measured on the cubins built from this entry:</p><ul>' + "".join(items) + "</ul>")


def _config_html(stage: str, summary: str, fields: Optional[Dict[str, Any]] = None) -> str:
    if not fields:  # written before entries recorded every field
        return (f'<p class="gpucache-text">{esc(summary) or "(not recorded)"}</p><p class="gpucache-muted">'
                "This entry records its config's summary only.</p>")
    values = dict(fields)
    effective = _effective(values)
    rows = []
    for field in dataclasses.fields(CompileConfig):
        name = field.name
        value = values.get(name)
        shown = "follow fastmath" if value is None and name in FOLLOW_FASTMATH \
            else "default" if value is None and name == "fma" else str(value)
        if value is None and name in effective and effective[name] is not None:
            shown += f" (= {effective[name]})"
        readers = FIELD_STAGES.get(name, ())
        chips = "".join(
            f'<span class="gpucache-chip{" gpucache-chip-on" if s == stage else ""}"'
            f' title="{s} {"reads" if s in readers else "does not read"} {name}">{s}</span>'
            for s in TARGET_STAGES if s in readers)
        # (a fatbin is made of its members' bytes: each field reaches it through them)
        reads = "through its members" if not STAGE_SPEC[stage].per_target else "yes" if stage in readers else "no"
        rows.append(f'<tr data-field="{name}"><th scope="row" class="gpucache-code">{name}</th>'
                    f'<td class="gpucache-text">{esc(shown)}</td><td class="gpucache-text gpucache-chips">{chips}</td>'
                    f'<td class="gpucache-text">{reads}</td></tr>')
    return ('<table class="gpucache-table gpucache-left gpucache-config"><caption>The config it was built with; '
            'each field is read by the stages shown (typing and llvm read sm only where their '
            'code asked about the target)</caption><thead><tr><th scope="col">field</th>'
            '<th scope="col">value</th><th scope="col">read by</th>'
            f'<th scope="col">{esc(stage)} reads it</th></tr></thead><tbody>{"".join(rows)}</tbody></table>')


def _components_html(components) -> str:
    rows = "".join(
        f'<tr data-component="{esc(name)}"><th scope="row" class="gpucache-code">{esc(name)}</th>'
        f'<td class="gpucache-text">{esc(part.shown)}</td>'
        f'<td class="gpucache-text gpucache-code">{esc(short_token(part.digest))}</td></tr>'
        for name, part in sorted(components.items()))
    return ('<table class="gpucache-table gpucache-left gpucache-components"><caption>What the token hashes: '
            'one digest per named input</caption><thead><tr><th scope="col">component</th>'
            '<th scope="col">value</th><th scope="col">digest</th></tr></thead>'
            f'<tbody>{rows}</tbody></table>')


def _why_html(stage: str, entry, nearest, names) -> str:
    reasons = tuple(entry.reasons or ())
    items = "".join(f"<li>{esc(r)}</li>" for r in reasons) or "<li>(not recorded)</li>"
    parts = [f'<ul class="gpucache-reasons">{items}</ul>']
    if nearest is None:
        parts.append('<p class="gpucache-muted">No other entry of this kernel is cached at this '
                     'stage to compare with.</p>')
        return "".join(parts)
    rows = []
    for name in names:
        mine, theirs = entry.components.get(name), nearest.components.get(name)
        rows.append(f'<tr data-component="{esc(name)}"><th scope="row" class="gpucache-code">'
                    f'{esc(name)}</th>'
                    f'<td class="gpucache-text">{esc(mine.shown if mine else "(absent)")}</td>'
                    f'<td class="gpucache-text">{esc(theirs.shown if theirs else "(absent)")}</td></tr>')
    if not rows:
        rows.append('<tr><td colspan="3">no component differs</td></tr>')
    parts.append(
        '<table class="gpucache-table gpucache-left gpucache-diff"><caption>Side by side with the nearest other '
        f'entry of {esc(short_kernel(entry.kernel))} at this stage: the inputs that differ</caption>'
        '<thead><tr><th scope="col">component</th>'
        f'<th scope="col">this entry <span class="gpucache-code">{esc(short_token(entry.token))}</span><br>'
        f'<span class="gpucache-muted">{esc(entry.config)}</span></th>'
        f'<th scope="col">nearest <span class="gpucache-code">{esc(short_token(nearest.token))}</span><br>'
        f'<span class="gpucache-muted">{esc(nearest.config)}</span></th></tr></thead>'
        f'<tbody>{"".join(rows)}</tbody></table>')
    return "".join(parts)


@dataclass(frozen=True)
class EntryDetail:
    """What the entry view shows of one entry, read from the cache by the inspector."""

    stage: str
    entry: Any  # gpucache_ext.store.tiers.Entry
    tiers: Tuple[str, ...]  # where it is
    nearest: Any = None  # the nearest other entry of the kernel at this stage (Entry), if any
    differing: Tuple[str, ...] = ()  # the components they differ in
    downstream: Tuple[Any, ...] = ()  # (EntryInfo, resources) of the cubins built from it
    sass: Optional[str] = None  # a cubin's SASS
    sass_note: Optional[str] = None  # why there is no SASS
    kernel_label: Optional[str] = None  # the kernel as the entries list names it (`kernel_labels`)
    sass_label: Optional[str] = None  # "SASS sm_86 (nvdisasm 13.5)"


def entry_html(detail: Optional[EntryDetail], now: float, places=None) -> str:
    """Everything about one entry, as HTML (None: the entry is gone); `places`
    (`gpucache_ext.pipeline.definitions.Places`, default: the current session's) says
    where its kernel was defined."""
    if detail is None:
        return '<p class="gpucache-muted">That entry is no longer cached.</p>'
    stage, entry = detail.stage, detail.entry
    token = entry.token
    tiers = ", ".join(detail.tiers) or "-"
    meta = (f'{esc(stage)} entry <span class="gpucache-code">{esc(short_token(token))}</span> in '
            f'{esc(tiers)}, {esc(format_bytes(entry.nbytes))}, built {esc(format_age(now - entry.created))} ago '
            f'in {esc(format_seconds(entry.seconds))}')
    if detail.kernel_label and "@" in detail.kernel_label:  # (one of several definitions of its name)
        meta += (f"; this {esc(short_kernel(entry.kernel))} is the one defined in "
                 f"{esc((places if places is not None else sessions.places()).explain(entry.place))}")
    return "".join([
        f'<div class="gpucache-entry" data-stage="{esc(stage)}" data-token="{esc(token)}">',
        f'<h4>{esc(detail.kernel_label or short_kernel(entry.kernel))} <span class="gpucache-code">'
        f'{esc(entry.signature)}</span> [{esc(entry.config)}]</h4>',
        f'<p class="gpucache-muted">{meta}</p>',
        '<div class="gpucache-entry-grid">',
        "<section><h4>Why it was built</h4>", _why_html(stage, entry, detail.nearest, detail.differing),
        "</section>",
        "<section><h4>Config</h4>", _config_html(stage, entry.config, entry.config_fields), "</section>",
        "<section><h4>Token components</h4>", _components_html(entry.components), "</section>",
        "<section><h4>Resources</h4>", _resources_html(stage, entry, detail.downstream), "</section>",
        '<section class="gpucache-wide"><h4>Artifacts</h4>',
        artifacts_html(stage, entry, detail.sass, detail.sass_note, detail.sass_label), "</section>",
        "</div></div>",
    ])
