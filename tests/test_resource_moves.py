"""How a kernel's resources move across its cached cubin variants (per
target, per config), from real compiles on the CPU: the rows, the moves and
their words, the renderers, the inspector's section and ``%gpucache explain``."""

import dataclasses
import html
import re

import pytest

import gpucache_ext
from gpucache_ext import KernelCache, samples
from gpucache_ext.keys.config import CompileConfig
from gpucache_ext.queries import ResourceMove, ResourceRow, resource_moves, resource_rows
from gpucache_ext.pipeline.results import parse_resources
from gpucache_ext.views import (resource_moves_html, resource_moves_text, resource_variants_html,
                                         resources_table_html, resources_table_text)

HEAVY_SIG = "void(float32[:], float32[:], float32[:])"
HEAVY_SIGNATURE = "(float32[:], float32[:], float32[:])"  # as entries show it

# Sixteen accumulators live across the loop: some 68 registers at sm_86, and
# ptxas spills them when capped at 32.
HEAVY = '''\
from numba import cuda


@cuda.jit
def heavy(out, a, b):
    i = cuda.grid(1)
    if i >= out.size:
        return
    s0 = a[i]; s1 = b[i]; s2 = a[i] * 2.0; s3 = b[i] * 3.0
    s4 = a[i] + b[i]; s5 = a[i] - b[i]; s6 = a[i] * b[i]; s7 = a[i] + 1.0
    s8 = b[i] + 2.0; s9 = a[i] * 0.5; s10 = b[i] * 0.25; s11 = a[i] - 1.0
    s12 = b[i] - 2.0; s13 = a[i] * 1.5; s14 = b[i] * 2.5; s15 = a[i] + 3.0
    for k in range(64):
        x = a[(i + k) % a.size]
        y = b[(i + 2 * k) % b.size]
        s0 = s0 * x + s15; s1 = s1 * y + s0; s2 = s2 * x + s1; s3 = s3 * y + s2
        s4 = s4 * x + s3; s5 = s5 * y + s4; s6 = s6 * x + s5; s7 = s7 * y + s6
        s8 = s8 * x + s7; s9 = s9 * y + s8; s10 = s10 * x + s9; s11 = s11 * y + s10
        s12 = s12 * x + s11; s13 = s13 * y + s12; s14 = s14 * x + s13; s15 = s15 * y + s14
    out[i] = s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7 + s8 + s9 + s10 + s11 + s12 + s13 + s14 + s15
'''

CAPPED = CompileConfig(sm=86, max_registers=32)


def compiled(source, name, sig, configs):
    """A fresh cache holding `name` of `source` compiled for each config, in order."""
    cache = KernelCache()
    kernel = samples.load(source)[name]
    results = [cache.compile(kernel, sig, config) for config in configs]
    return cache, results


@pytest.fixture(scope="module")
def heavy():
    """heavy at sm_86, then capped at 32 registers, then at sm_75."""
    return compiled(HEAVY, "heavy", HEAVY_SIG, (CompileConfig(sm=86), CAPPED, CompileConfig(sm=75)))


@pytest.fixture(scope="module")
def matmul():
    """The tiled matmul at sm_86, then at sm_75."""
    return compiled(samples.MATMUL, "matmul", samples.MATMUL_SIG, (CompileConfig(sm=86), CompileConfig(sm=75)))


def by_config(rows):
    return {row.config: row for row in rows}


def moves_of(moves, field, resource):
    found = [move for move in moves if move.field == field and move.resource == resource]
    assert len(found) <= 1
    return found[0] if found else None


# -- the rows ---------------------------------------------------------------------


def test_a_row_per_cached_cubin_with_the_figures_of_its_link_log(heavy, monkeypatch):
    cache, results = heavy
    loads = []
    entry = cache.entry
    monkeypatch.setattr(cache, "entry", lambda stage, token: loads.append((stage, token)) or entry(stage, token))
    rows = resource_rows(cache, "heavy")
    assert [(stage, token) for stage, token in loads if stage == "cubin"] == [
        ("cubin", info.token) for info in cache.entries(stage="cubin", kernel="heavy")]  # each loaded once
    assert [(row.arch, row.variant) for row in rows] == [("sm_75", ""), ("sm_86", ""), ("sm_86", "max_registers=32")]
    for result in results:
        row = by_config(rows)[result.config.summary()]
        found = parse_resources(result.link_log)
        assert row.token == result.stages["cubin"].token and row.signature == HEAVY_SIGNATURE
        assert row.kernel.endswith("heavy") and row.config_fields == result.config.fields()
        assert row.cubin_bytes == len(result.cubin)
        for name in ("registers", "spill_stores", "spill_loads", "shared_bytes", "local_bytes", "constant_bytes"):
            assert getattr(row, name) == found[name], name
        # the same figures from the compile itself (what a cell's report has)
        assert dataclasses.replace(ResourceRow.from_result(result), created=row.created, source=row.source) == row
    assert len({row.source for row in rows}) == 1  # one code, three variants
    assert resource_rows(cache, "heavy", HEAVY_SIGNATURE) == rows
    assert resource_rows(cache, "heavy", "(float64[:])") == [] and resource_rows(cache, "nothing") == []


# -- the moves --------------------------------------------------------------------


def test_capping_registers_lowers_them_and_spills_appear(heavy):
    cache, results = heavy
    rows = by_config(resource_rows(cache, "heavy"))
    free, capped = rows["sm_86"], rows[CAPPED.summary()]
    assert capped.registers <= 32 < free.registers and capped.spill_stores and capped.spill_loads
    moves = resource_moves(rows.values())

    registers = moves_of(moves, "max_registers", "registers")
    assert (registers.value_before, registers.value_after) == (None, 32)
    assert (registers.token_before, registers.token_after) == (free.token, capped.token)
    assert registers.before == {"registers": free.registers} and registers.after == {"registers": capped.registers}
    assert not registers.regression
    assert registers.text == f"registers {free.registers} -> {capped.registers} when max_registers was set (none -> 32)"

    spills = moves_of(moves, "max_registers", "spills")
    assert spills.regression and spills.before == {"spill_stores": 0, "spill_loads": 0}
    assert spills.after == {"spill_stores": capped.spill_stores, "spill_loads": capped.spill_loads}
    assert spills.text == (f"spills appear (0 -> {capped.spill_stores} B stored, 0 -> {capped.spill_loads} B "
                           "loaded) when max_registers was set (none -> 32)")
    # by what matters: spills lead, then registers; a cubin that grew is no regression
    assert moves[:2] == [spills, registers]
    assert all(not move.regression for move in moves if move.resource == "cubin_bytes")


def test_lifting_the_cap_raises_registers_and_spills_disappear():
    _, (capped, free) = compiled(HEAVY, "heavy", HEAVY_SIG, (CAPPED, CompileConfig(sm=86)))
    rows = [ResourceRow.from_result(capped), dataclasses.replace(ResourceRow.from_result(free), created=1.0)]
    moves = resource_moves(rows)
    registers = moves_of(moves, "max_registers", "registers")
    assert registers.regression and registers.text == (
        f"registers {rows[0].registers} -> {rows[1].registers} when max_registers was lifted (32 -> none)")
    spills = moves_of(moves, "max_registers", "spills")
    assert not spills.regression and spills.text.startswith(f"spills disappear ({rows[0].spill_stores} -> 0 B stored")


def test_arch_moves_say_at_which_target_against_which(matmul):
    cache, _ = matmul
    rows = by_config(resource_rows(cache, "matmul"))
    sm86, sm75 = rows["sm_86"], rows["sm_75"]
    assert sm75.registers != sm86.registers  # what this test relies on
    moves = resource_moves(rows.values())
    assert moves and {move.field for move in moves} == {"sm"}
    registers = moves_of(moves, "sm", "registers")
    assert (registers.value_before, registers.value_after) == (86, 75)
    assert (registers.arch_before, registers.arch_after) == ("sm_86", "sm_75")
    assert registers.text == f"registers {sm86.registers} -> {sm75.registers} at sm_75 against sm_86"
    assert not registers.regression  # figures differ across targets by design; only spills count there
    assert all(move.text.endswith("at sm_75 against sm_86") for move in moves)


def test_nothing_is_said_where_nothing_moved(heavy):
    cache, _ = heavy
    rows = by_config(resource_rows(cache, "heavy"))
    sm86, sm75 = rows["sm_86"], rows["sm_75"]
    figures = ("registers", "spill_stores", "spill_loads", "shared_bytes", "local_bytes", "constant_bytes",
               "cubin_bytes")
    assert [getattr(sm75, f) for f in figures] == [getattr(sm86, f) for f in figures]
    assert not [move for move in resource_moves(rows.values()) if move.field == "sm"]
    assert resource_moves([sm86, sm75]) == []
    assert resource_moves_text([]) == ""


def test_only_variants_one_field_apart_of_the_same_code_are_compared(heavy):
    cache, _ = heavy
    rows = by_config(resource_rows(cache, "heavy"))
    capped, sm75 = rows[CAPPED.summary()], rows["sm_75"]
    assert resource_moves([sm75, capped]) == []  # sm and max_registers differ
    assert resource_moves([rows["sm_86"], dataclasses.replace(capped, source="other code")]) == []
    assert resource_moves([rows["sm_86"], dataclasses.replace(capped, signature="(float64[:])")]) == []
    # a variant is compared with the first built one field away from it, not with every other
    third = dataclasses.replace(capped, config_fields={**capped.config_fields, "max_registers": 24},
                                token="third", created=capped.created + 1, registers=24)
    moves = resource_moves([rows["sm_86"], capped, third])
    assert {(move.token_before, move.token_after) for move in moves} == {
        (rows["sm_86"].token, capped.token), (rows["sm_86"].token, "third")}


def _row(**changes):
    fields = {**CompileConfig(sm=86).fields(), **changes.pop("fields", {})}
    figures = dict(registers=40, spill_stores=0, spill_loads=0, shared_bytes=0, local_bytes=0, constant_bytes=520,
                   cubin_bytes=6144)
    figures.update(changes)
    return ResourceRow(f"sm_{fields['sm']}", f"token {sorted(fields.items())} {sorted(figures.items())}",
                       CompileConfig(**fields).summary(), fields, "(float32[:])", **figures)


@pytest.mark.parametrize("before, after, text", [
    (_row(fields={"max_registers": 64}, registers=64), _row(fields={"max_registers": 32}, registers=32),
     "registers 64 -> 32 when max_registers was lowered (64 -> 32)"),
    (_row(fields={"max_registers": 32}, registers=32), _row(fields={"max_registers": 64}, registers=40),
     "registers 32 -> 40 when max_registers was lifted (32 -> 64)"),
    (_row(), _row(fields={"fastmath": True}, registers=38), "registers 40 -> 38 when fastmath was turned on"),
    (_row(fields={"debug": True}, local_bytes=48), _row(),
     "local memory disappears (48 -> 0 B) when debug was turned off"),
    (_row(), _row(fields={"opt": 0}, local_bytes=48), "local memory appears (0 -> 48 B) when opt went 3 -> 0"),
    (_row(), _row(fields={"launch_bounds": (256,)}, registers=32),
     "registers 40 -> 32 when launch_bounds went none -> 256"),
    (_row(), _row(fields={"ftz": True}, registers=39), "registers 40 -> 39 when ftz went as fastmath -> on"),
    (_row(), _row(fields={"sm": 90}, cubin_bytes=6554), "cubin 6.0 KiB -> 6.4 KiB at sm_90 against sm_86"),
    (_row(), _row(fields={"sm": 75}, spill_stores=24, spill_loads=24),
     "spills appear at sm_75 (0 -> 24 B stored, 0 -> 24 B loaded) against sm_86"),
    (_row(), _row(fields={"sm": 90}, shared_bytes=1024),
     "shared memory appears at sm_90 (0 B -> 1.0 KiB) against sm_86"),
    (_row(cubin_bytes=6150), _row(fields={"opt": 2}, cubin_bytes=6160), "cubin 6150 -> 6160 B when opt went 3 -> 2"),
])
def test_the_words_of_a_move(before, after, text):
    after = dataclasses.replace(after, created=1.0)
    moves = resource_moves([before, after])
    assert len(moves) == 1 and moves[0].text == str(moves[0]) == text


def test_moves_read_back_from_json_compare_alike():
    bounds = _row(fields={"launch_bounds": (256, 2)})
    read_back = dataclasses.replace(bounds, config_fields={**bounds.config_fields, "launch_bounds": [256, 2]},
                                    token="read back", registers=30, created=1.0)
    assert resource_moves([bounds, ResourceRow.from_link_log("", 0, arch="sm_86")]) == []
    assert resource_moves([bounds, read_back]) == []  # one config: nothing to say
    read_back = ResourceRow.from_link_log("used 30 registers", 6144, arch="sm_86", token="read back",
                                          config_fields={**bounds.config_fields, "launch_bounds": [256, 2],
                                                         "opt": 2}, signature=bounds.signature, created=1.0)
    assert read_back.config_fields["launch_bounds"] == (256, 2)
    assert "registers 40 -> 30 when opt went 3 -> 2" in [move.text for move in resource_moves([bounds, read_back])]


def test_moves_are_typed_records():
    names = [f.name for f in dataclasses.fields(ResourceMove)]
    assert names[:6] == ["kernel", "signature", "field", "value_before", "value_after", "resource"]
    assert {"before", "after", "token_before", "token_after", "regression"} <= set(names)


# -- the renderers -------------------------------------------------------------------


def test_the_table_has_a_row_per_variant_and_marks_spills(heavy):
    cache, _ = heavy
    rows = resource_rows(cache, "heavy")
    text = resources_table_text(rows)
    lines = text.splitlines()
    assert len(lines) == 1 + len(rows)
    assert lines[0].split()[:3] == ["arch", "config", "registers"]  # one signature: no signature column
    assert [line.split()[0] for line in lines[1:]] == [row.arch for row in rows]
    capped = by_config(rows)[CAPPED.summary()]
    assert f"{capped.spill_stores} B / {capped.spill_loads} B" in text and "max_registers=32" in text

    page = resources_table_html(rows)
    found = re.findall(r'<tr data-arch="([^"]+)" data-token="([^"]+)">(.*?)</tr>', page)
    assert [(arch, token) for arch, token, _ in found] == [(row.arch, row.token) for row in rows]
    for (_, token, cells), row in zip(found, rows):
        spills = re.search(r'<td data-resource="spills" data-value="(\d+)/(\d+)"( class="gpucache-warn")?>', cells)
        assert (int(spills[1]), int(spills[2])) == (row.spill_stores, row.spill_loads)
        assert bool(spills[3]) == (token == capped.token)
        assert f'data-resource="registers" data-value="{row.registers}"' in cells
        assert f'data-resource="cubin_bytes" data-value="{row.cubin_bytes}"' in cells
    assert "<script" not in page
    assert resources_table_text([]) == ""


def test_the_table_shows_signatures_where_the_rows_have_several(heavy, matmul):
    rows = resource_rows(heavy[0], "heavy") + resource_rows(matmul[0], "matmul")
    header = resources_table_text(rows).splitlines()[0].split()
    assert header[:3] == ["arch", "signature", "config"]
    assert "(float32[:, :], float32[:, :], float32[:, :])" in resources_table_text(rows)
    # a kernel's targets alone (a multi-target compile): neither signature nor config
    assert resources_table_text(resource_rows(matmul[0], "matmul")).split()[:2] == ["arch", "registers"]


def test_moves_as_text_and_html(heavy, matmul):
    moves = resource_moves(resource_rows(heavy[0], "heavy"))
    lines = resource_moves_text(moves).splitlines()
    assert len(lines) == len(moves)
    for line, move in zip(lines, moves):
        assert line == ("regression: " if move.regression else "") + move.text
    page = resource_moves_html(moves)
    items = re.findall(r'<li data-field="([^"]+)" data-resource="([^"]+)" data-regression="(true|false)">(.*?)</li>',
                       page)
    assert [(f, r, g == "true") for f, r, g, _ in items] == [(m.field, m.resource, m.regression) for m in moves]
    for (_, _, _, item), move in zip(items, moves):
        assert item.endswith(html.escape(move.text)) and ("gpucache-warn" in item) == move.regression
    assert "No figure moved" in resource_moves_html([])
    # moves of several signatures say which
    both = resource_moves(resource_rows(heavy[0], "heavy") + resource_rows(matmul[0], "matmul"))
    assert any(line.startswith("matmul (float32[:, :]") for line in resource_moves_text(both).splitlines())
    section = resource_variants_html("heavy", resource_rows(heavy[0], "heavy"), moves)
    assert "Resources across variants of heavy" in section and section.count("<tr data-arch") == 3


# -- the inspector and %gpucache explain ------------------------------------------------


def gpukernel(ip, flags, source=HEAVY, sig=HEAVY_SIG):
    result = ip.run_cell(f"%%gpukernel --quiet --sig '{sig}' {flags}\n{source}")
    if not result.success:
        raise result.error_in_exec
    return ip.user_ns


def variants_view(inspector):
    return inspector.variants_view.get_state()["value"]


def test_the_inspector_shows_the_variants_of_the_selected_entrys_kernel(ip):
    gpukernel(ip, "--sm 86")
    gpukernel(ip, "--sm 86 --max-registers 32")
    gpukernel(ip, "--sm 86", samples.AXPY, samples.AXPY_SIG)
    inspector = gpucache_ext.inspector()
    assert "gpucache-variants" in inspector.variants_view.get_state()["_dom_classes"]
    cache = gpucache_ext.default_cache()
    heavy = ip.user_ns["heavy"].last
    inspector.select("cubin", heavy.stages["cubin"].token)
    page = variants_view(inspector)
    assert "Resources across variants of heavy" in page and page.count("<tr data-arch") == 2
    assert 'class="gpucache-warn">' in page  # the capped variant spills
    for move in resource_moves(resource_rows(cache, heavy.kernel)):
        assert html.escape(move.text) in page
    inspector.select("typing", heavy.stages["typing"].token)  # any stage of the kernel
    assert variants_view(inspector) == page
    inspector.select("cubin", ip.user_ns["axpy"].last.stages["cubin"].token)  # one cubin: no section
    assert variants_view(inspector) == ""


def test_the_inspector_leaves_out_variants_of_an_earlier_definition(ip):
    gpukernel(ip, "--sm 86")
    gpukernel(ip, "--sm 86", HEAVY.replace("a[i] + 3.0", "a[i] + 4.0"))
    gpukernel(ip, "--sm 75", HEAVY.replace("a[i] + 3.0", "a[i] + 4.0"))
    inspector = gpucache_ext.inspector()
    inspector.select("cubin", ip.user_ns["heavy"].last.stages["cubin"].token)
    page = variants_view(inspector)
    assert page.count("<tr data-arch") == 2 and 'data-arch="sm_75"' in page


def test_explain_says_how_resources_moved(ip, capsys):
    gpukernel(ip, "--sm 86")
    ip.run_line_magic("gpucache", "explain heavy")
    assert "resources across cached variants" not in capsys.readouterr().out  # one variant
    gpukernel(ip, "--sm 86 --max-registers 32")
    ip.run_line_magic("gpucache", "explain heavy")
    out = capsys.readouterr().out
    assert "resources across cached variants:" in out
    assert re.search(r"\n  regression: spills appear \(0 -> \d+ B stored, 0 -> \d+ B loaded\) when "
                     r"max_registers was set \(none -> 32\)", out)
    assert re.search(r"\n  registers \d+ -> \d+ when max_registers was set \(none -> 32\)", out)


def test_across_targets_only_spills_are_a_regression():
    at_86 = _row(created=1.0)
    at_75 = dataclasses.replace(_row(fields={"sm": 75}, registers=48, spill_stores=24, spill_loads=24), created=2.0)
    moves = {move.resource: move for move in resource_moves([at_86, at_75])}
    assert set(moves) == {"spills", "registers"}
    assert moves["spills"].regression and not moves["registers"].regression
    capped = dataclasses.replace(_row(fields={"max_registers": 32}, registers=48), created=3.0)
    assert [m.regression for m in resource_moves([at_86, capped])] == [True]  # a flag that costs registers


def test_moves_come_in_the_order_they_matter_each_once():
    """A cubin that grew is listed after registers that fell, and is no
    regression; two variant pairs that moved alike give one move."""
    base = _row(created=1.0)
    capped = dataclasses.replace(_row(fields={"max_registers": 32}, registers=24, cubin_bytes=base.cubin_bytes + 100),
                                 created=2.0)
    moves = resource_moves([base, capped])
    assert [m.resource for m in moves] == ["registers", "cubin_bytes"]
    assert [m.regression for m in moves] == [False, False]
    # fastmath at sm_90 is tuned from fastmath at sm_86, sm_90 from the base: the same move twice
    fast = dataclasses.replace(_row(fields={"fastmath": True}), created=3.0)
    fast_90 = dataclasses.replace(_row(fields={"fastmath": True, "sm": 90}, shared_bytes=3072), created=4.0)
    at_90 = dataclasses.replace(_row(fields={"sm": 90}, shared_bytes=3072), created=5.0)
    texts = [m.text for m in resource_moves([base, at_90, fast, fast_90])]
    assert texts == ["shared memory appears at sm_90 (0 B -> 3.0 KiB) against sm_86"]  # once, not per pair


def test_symbol_uids_are_of_one_length():
    """The uid in a kernel's symbol names has 16 digits whatever its source's
    digest: a symbol's length (and so the cubin's bytes) does not move with it."""
    from gpucache_ext.backends.numba_cuda.stages.numbering import _next_uid, address_of, symbol_uid

    digests = ["0" * 64, "f" * 64, "000000000001" + "0" * 52, "e8d4a5100000" + "0" * 52, "123456789abc" + "0" * 52]
    assert {len(str(symbol_uid(d))) for d in digests} == {16}
    assert len({symbol_uid(d) for d in digests}) == len(digests)
    # the next free number (two functions alike) and the uid written as an address keep their lengths
    assert {len(str(_next_uid(symbol_uid(d)))) for d in digests} == {16}
    assert {len(address_of(symbol_uid(d))) for d in digests} == {14}
    assert len({address_of(symbol_uid(d)) for d in digests}) == len(digests)
