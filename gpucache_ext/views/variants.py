"""A kernel's resources across its variants (`gpucache_ext.queries.ResourceRow`,
`ResourceMove`): per target and config, registers, spills, memory and
occupancy, rows built from an earlier state marked, which cell built each
where several did, and how the figures moved between variants one config
field apart."""

from __future__ import annotations

from typing import Dict, List, Tuple

from ..units import format_bytes
from .markup import class_attr, esc, scrolling_table, short_kernel

_VARIANT_COLUMNS = ("arch", "signature", "config", "built in", "registers", "spills (stored/loaded)", "shared",
                    "local", "constant", "cubin")


def _variant_columns(rows, occupancy=None, stale=None, built=None) -> Tuple[str, ...]:
    """The columns for `rows`: signature and config only where the rows
    differ in them, "built in" only where `built` names several places;
    with `occupancy`, one per block size and the best mark; with `stale`
    rows, a "state" column after the config."""
    hidden = {"signature"} if len({row.signature for row in rows}) < 2 else set()
    if len({row.variant for row in rows}) < 2:
        hidden.add("config")
    if len({(built or {}).get(row.token) for row in rows}) < 2:
        hidden.add("built in")
    columns = tuple(column for column in _VARIANT_COLUMNS if column not in hidden)
    if _stale_rows(rows, stale):
        at = columns.index("registers")
        columns = columns[:at] + ("state",) + columns[at:]
    if occupancy is None:
        return columns
    # the occupancy right after what names the variant: the figures it is read for come first,
    # in view where a narrow output scrolls the rest (which cell built it, registers, spills, memory, size)
    at = columns.index("registers")
    names = tuple(column for column in columns[:at] if column != "built in")
    rest = (("built in",) if "built in" in columns else ()) + columns[at:]
    return ("best",) + names + tuple(f"{block} threads" for block in occupancy.blocks) + rest


# what the "state" column says of a row built from an earlier state of its kernel's inputs
EARLIER = "EARLIER"


def _stale_rows(rows, stale) -> Dict[str, Tuple[str, ...]]:
    """Of `stale` ({cubin token: what changed since it was built}), the rows' own."""
    if not stale:
        return {}
    return {row.token: tuple(stale[row.token]) for row in rows if row.token in stale}


def stale_note(rows, stale) -> str:
    """The line under a variants table some of whose rows were built from an
    earlier state of their kernel's inputs (`stale`: {cubin token: what
    changed, as the cache explains a miss}); "" where none was."""
    found = _stale_rows(rows, stale)
    if not found:
        return ""
    changed = list(dict.fromkeys(reason for reasons in found.values() for reason in reasons))
    return (f"{EARLIER}: built from an earlier state of the kernel's inputs ({'; '.join(changed)}); not what it "
            "compiles now: a launch, kernel.use() or kernel.variants compiles it again")


# how an occupancy cell names what limits it
_LIMIT_WORDS = {"warps": "warps", "registers": "regs", "shared memory": "smem", "blocks per SM": "blocks"}


def _occupancy_parts(found) -> Tuple[str, str]:
    """("67%", "regs"): the share of the SM's warps, and what limits it; ("-", "") where no block fits."""
    if found is None:
        return "-", ""
    if not found.blocks_per_sm:
        return "0%", "(does not fit)"
    return f"{round(found.occupancy * 100)}%", _LIMIT_WORDS.get(found.limited_by, found.limited_by)


def _occupancy_cell(found) -> str:
    """"67% regs" (the share of the SM's warps, and what limits it); "-" where no block fits."""
    return " ".join(part for part in _occupancy_parts(found) if part)


def _spilled(row) -> bool:
    return bool(row.spill_stores or row.spill_loads)


def _variant_cells(row) -> Dict[str, str]:
    spills = f"{format_bytes(row.spill_stores)} / {format_bytes(row.spill_loads)}" if _spilled(row) else "none"
    return {"arch": row.arch, "signature": row.signature, "config": row.variant or "defaults",
            "registers": str(row.registers), "spills (stored/loaded)": spills,
            "shared": format_bytes(row.shared_bytes), "local": format_bytes(row.local_bytes),
            "constant": format_bytes(row.constant_bytes), "cubin": format_bytes(row.cubin_bytes)}


def _cells(row, occupancy, stale=None, built=None) -> Dict[str, str]:
    cells = _variant_cells(row)
    cells["built in"] = (built or {}).get(row.token) or "?"
    cells["state"] = EARLIER if stale and row.token in stale else "current"
    if occupancy is not None and occupancy.dynamic_shared:  # static + per-block dynamic
        cells["shared"] += f" + {format_bytes(occupancy.dynamic_shared)} dyn"
    if occupancy is not None:
        cells["best"] = "*" if row.token in occupancy.best else ""
        for block, found in zip(occupancy.blocks, occupancy.by_row.get(row.token, ())):
            cells[f"{block} threads"] = _occupancy_cell(found)
    return cells


def resources_table_text(rows, occupancy=None, stale=None, built=None) -> str:
    """One line per variant (`ResourceRow`s: a kernel's targets and configs):
    arch, registers, spills, shared, local and constant memory, cubin size;
    with `occupancy` (`gpucache_ext.queries.VariantOccupancy`), each one's
    theoretical occupancy at each block size and the best per architecture
    marked ``*``; with `stale` ({cubin token: what changed}), a state column
    (``EARLIER`` for those rows, built from an earlier state of the kernel's
    inputs) and a line saying what changed (`stale_note`); with `built`
    ({cubin token: the cell that built it, as the entries list names it:
    "In[7]"}), a "built in" column where the rows were built in several
    (the same code compiles to the same entries in any cell: a sweep's
    variants are those the earlier cells built too); "" without rows."""
    if not rows:
        return ""
    columns = _variant_columns(rows, occupancy, stale, built)
    lines = [list(columns)] + [[_cells(row, occupancy, stale, built)[c] for c in columns] for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(columns))]
    left = {"arch", "signature", "config", "built in", "best", "state"}
    note = stale_note(rows, stale)
    return "\n".join([*("  ".join(cell.ljust(width) if column in left else cell.rjust(width)
                                  for cell, width, column in zip(line, widths, columns)).rstrip()
                        for line in lines), *([note] if note else [])])


def resources_table_html(rows, occupancy=None, stale=None, built=None) -> str:
    """`resources_table_text` as a table; spills are marked where there are
    any; each figure in a ``data-resource`` cell's ``data-value`` (occupancy:
    ``data-block`` and ``data-occupancy``, 0 to 1); a row of `stale` (built
    from an earlier state of the kernel's inputs) is ``data-state="earlier"``,
    its state cell says so and names what changed, and a line under the table
    too (`stale_note`); with `built`, each row's "built in" cell its
    ``data-built-in``."""
    if not rows:
        return '<p class="gpucache-muted">No cubin is cached to measure.</p>'
    columns = _variant_columns(rows, occupancy, stale, built)
    earlier = _stale_rows(rows, stale)
    head = _head_html(columns)
    values = {"registers": "registers", "shared": "shared_bytes", "local": "local_bytes",
              "constant": "constant_bytes", "cubin": "cubin_bytes"}
    body = []
    for row in rows:
        cells = _cells(row, occupancy, earlier, built)
        found = dict(zip(occupancy.blocks, occupancy.by_row.get(row.token, ()))) if occupancy else {}
        tds = [f'<th scope="row">{esc(row.arch)}</th>']
        for column in columns:
            if column == "arch":
                continue
            if column == "best":
                tds.insert(0, f'<td class="gpucache-best" data-best="{str(bool(cells["best"])).lower()}">'
                              f'{"&#9733;" if cells["best"] else ""}</td>')
            elif column.endswith(" threads"):
                block = int(column.split()[0])
                share = found.get(block)
                figure, limit = _occupancy_parts(share)  # (the two lines of a narrow cell)
                tds.append(f'<td class="gpucache-occupancy" data-block="{block}" '
                           f'data-occupancy="{share.occupancy if share else ""}" '
                           f'data-limited-by="{esc(share.limited_by) if share else ""}">'
                           f'<span class="gpucache-share">{esc(figure)}</span>'
                           + (f' <span class="gpucache-limit">{esc(limit)}</span>' if limit else "") + "</td>")
            elif column == "built in":
                tds.append(f'<td class="gpucache-text" data-built-in="{esc(cells[column])}">'
                           f'{esc(cells[column])}</td>')
            elif column in ("signature", "config"):
                tds.append(f'<td class="gpucache-text{" gpucache-code" if column == "signature" else ""}">'
                           f'{esc(cells[column])}</td>')
            elif column == "state":
                why = "; ".join(earlier.get(row.token, ()))
                tds.append(f'<td class="gpucache-text{" gpucache-warn" if why else ""}"'
                           + (f' title="built from an earlier state: {esc(why)}"' if why else "")
                           + f">{esc(cells[column])}</td>")
            elif column in values:
                tds.append(f'<td data-resource="{values[column]}" data-value="{getattr(row, values[column])}">'
                           f'{esc(cells[column])}</td>')
            else:
                tds.append(f'<td data-resource="spills" data-value="{row.spill_stores}/{row.spill_loads}"'
                           f'{class_attr("gpucache-warn" if _spilled(row) else "")}>{esc(cells[column])}</td>')
        state = f' data-state="{"earlier" if row.token in earlier else "current"}"' if earlier else ""
        body.append(f'<tr data-arch="{esc(row.arch)}" data-token="{esc(row.token)}"{state}>{"".join(tds)}</tr>')
    note = stale_note(rows, earlier)
    table = (f'<table class="gpucache-table gpucache-resource-variants"><thead>{head}</thead>'
             f'<tbody>{"".join(body)}</tbody></table>')
    caption = ("Per target and config, from the linker's log: registers and spills per thread, shared memory "
               "per block")
    return (scrolling_table(table, caption, "resources per variant")
            + (f'<p class="gpucache-warn gpucache-stale">{esc(note)}</p>' if note else ""))


# columns whose cells are text, left-aligned (the rest are figures)
_TEXT_COLUMNS = ("arch", "signature", "config", "state")


def _head_html(columns) -> str:
    """The table's header rows: the occupancy columns, where there are any,
    under one heading, each titled by its block size alone (a narrow column)."""
    def title(column, rows=1):
        cls = ' class="gpucache-text"' if column in _TEXT_COLUMNS else ""
        span = f' rowspan="{rows}"' if rows > 1 else ""
        return f'<th scope="col"{span}{cls}>{esc(column)}</th>'

    blocks = [column for column in columns if column.endswith(" threads")]
    if not blocks:
        return f'<tr>{"".join(title(column) for column in columns)}</tr>'
    first = []
    for column in columns:
        if column == blocks[0]:
            first.append(f'<th scope="colgroup" colspan="{len(blocks)}" class="gpucache-occupancy-head">'
                         "occupancy at threads per block</th>")
        elif column not in blocks:
            first.append(title(column, rows=2))
    second = "".join(f'<th scope="col" data-block="{column.split()[0]}">{esc(column.split()[0])}</th>'
                     for column in blocks)
    return f'<tr>{"".join(first)}</tr><tr>{second}</tr>'


def _move_prefixes(moves) -> List[str]:
    """What each move's line starts with: its signature where the moves are of several."""
    groups = {(move.kernel, move.signature) for move in moves}
    if len(groups) < 2:
        return [""] * len(moves)
    kernels = len({kernel for kernel, _ in groups}) > 1
    return [(f"{short_kernel(move.kernel)} " if kernels else "") + f"{move.signature}: " for move in moves]


def resource_moves_text(moves) -> str:
    """A line per `ResourceMove` ("regression: spills appear ..."); "" when nothing moved."""
    return "\n".join(f"{prefix}{'regression: ' if move.regression else ''}{move.text}"
                     for prefix, move in zip(_move_prefixes(moves), moves))


def resource_moves_html(moves) -> str:
    """`resource_moves_text` as a list, regressions marked; a note when nothing moved."""
    if not moves:
        return ('<p class="gpucache-muted gpucache-moves">No figure moved between variants whose configs '
                "differ in one field.</p>")
    items = []
    for prefix, move in zip(_move_prefixes(moves), moves):
        mark = '<span class="gpucache-warn">regression:</span> ' if move.regression else ""
        items.append(f'<li data-field="{esc(move.field)}" data-resource="{esc(move.resource)}" '
                     f'data-regression="{str(move.regression).lower()}">{esc(prefix)}{mark}'
                     f"{esc(move.text)}</li>")
    return f'<ul class="gpucache-moves">{"".join(items)}</ul>'


def resource_variants_html(kernel: str, rows, moves, occupancy=None, stale=None, built=None) -> str:
    """The inspector's "resources across variants" section for one kernel:
    the table of its cubin variants (with `occupancy`, each one's at common
    block sizes and the best per architecture; `stale` rows marked built
    from an earlier state; `built`, which cell built each, see
    `resources_table_html`) and how the figures moved."""
    note = ("" if occupancy is None else
            f'<p class="gpucache-muted">Occupancy: the share of an SM\'s warps the variant keeps busy at '
            f'{", ".join(map(str, occupancy.blocks))} threads a block, and what limits it; theoretical (not '
            "speed); &#9733; the best per architecture (no spills, then the highest occupancy).</p>")
    table = resources_table_html(rows, occupancy, stale, built)
    return (f'<h4>Resources across variants of {esc(kernel)}</h4>{note}{table}'
            f"<p>How they moved between variants one config field apart:</p>{resource_moves_html(moves)}")
