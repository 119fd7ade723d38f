"""One kernel definition, one name, one set of variants: the inspector, the
``gpucache`` command and the cell reports agree (issue 35 item 5).

The notebook habit: a kernel re-declared in a new cell to try a flag, then
a sweep in the last.  The cache reuses what the earlier cells built (no
place is in any token), so the sweep's variants are entries that several
cells built first."""

from __future__ import annotations

import html
import re

import pytest

import gpucache_ext
from gpucache_ext.pipeline.definitions import Place, Places

from . import helpers
from .helpers import cell

ACT = """
from numba import cuda
import numpy as np

@cuda.jit("void(float32[:], float32[:])")
def act(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = x[i] * 2.0 + 1.0
"""

# the cells before the sweep, each trying a flag the sweep then lists
TRIES = (("try-defaults", "--sm 86"), ("try-cap", "--sm 86 --max-registers 32"), ("try-fast", "--sm 86 --fastmath"))
SWEEP = "--sm 86 --max-registers 32,none --fastmath off,on"


def _redeclared_then_swept(ip, capsys):
    """The kernel declared in three cells with a flag each, then swept in a
    fourth; returns ({cell id: its number}, the sweep cell's printed report)."""
    numbers = {}
    for cell_id, line in TRIES:
        cell(ip, line + " --quiet", ACT, store_history=True, cell_id=cell_id)
        numbers[cell_id] = ip.execution_count - 1
    capsys.readouterr()
    cell(ip, SWEEP, ACT, store_history=True, cell_id="sweep")
    numbers["sweep"] = ip.execution_count - 1
    return numbers, capsys.readouterr().out


def _report_variants(out):
    """{(arch, variant)} and the best ones, from the report's variants table ("defaults" for none)."""
    lines = out.split("act: 4 variants", 1)[1].splitlines()[2:]
    rows, best = set(), set()
    for line in lines:
        if not line.strip().startswith(("*", "sm_")):
            break
        words = line.strip().lstrip("*").split()
        variant = " ".join(word for word in words[1:] if "=" in word or word == "defaults")
        rows.add((words[0], variant))
        if line.strip().startswith("*"):
            best.add((words[0], variant))
    return rows, best


def _report_moves(out):
    """The report's lines on how the figures moved between variants."""
    lines = out.split("how the figures moved between variants one field apart:", 1)[1].splitlines()[1:]
    return [line.strip() for line in lines if line.startswith("    ")]


def _view_variants(cache, view):
    """{(arch, variant)} and the best ones, from the inspector's variants view."""
    rows, best = set(), set()
    for arch, token, body in re.findall(r'<tr data-arch="([^"]+)" data-token="([^"]+)"[^>]*>(.*?)</tr>', view):
        words = cache.entry("cubin", token).config.split()
        found = (arch, " ".join(words[1:]) or "defaults")
        rows.add(found)
        if 'data-best="true"' in body:
            best.add(found)
    return rows, best


def _sweep_token(ip, **fields):
    """The cubin token of the swept variant with `fields`."""
    (variant,) = [v for v in ip.user_ns["act"].variants
                  if all(getattr(v.config, name) == value for name, value in fields.items())]
    (result,) = variant.results.values()
    return result.stages["cubin"].token


def test_the_inspector_shows_the_variants_the_sweep_reported_and_the_same_best(ip, capsys):
    numbers, out = _redeclared_then_swept(ip, capsys)
    reported, reported_best = _report_variants(out)
    assert len(reported) == 4 and len(reported_best) == 1, out
    cache = gpucache_ext.default_cache()
    inspector = gpucache_ext.inspector()
    # the one cubin the sweep cell built, and one it reused (built first by the defaults' cell)
    for token in (_sweep_token(ip, fastmath=True, max_registers=32), _sweep_token(ip, fastmath=False,
                                                                                 max_registers=None)):
        inspector.select("cubin", token)
        view = inspector.variants_view.value
        shown, best = _view_variants(cache, view)
        assert shown == reported and best == reported_best, view
        moved = [html.unescape(text) for text in re.findall(r"<li [^>]*>(.*?)</li>", view)]
        assert moved == _report_moves(out) and moved, view
        # and which cell built each, by the name the entries list gives that cell
        built = re.findall(r'<td class="gpucache-text" data-built-in="[^"]*">([^<]*)</td>', view)
        assert sorted(built) == sorted(f"In[{numbers[c]}]" for c in ("try-defaults", "try-cap", "try-fast",
                                                                      "sweep")), view


def _ls_labels(directory):
    """{(stage, 12-digit token): kernel column} as ``gpucache ls`` prints them, in another process."""
    lines = helpers.gpucache("--dir", directory, "ls").stdout.splitlines()
    head = lines[0]
    start, end = head.index("kernel"), head.index("config")
    return {(line.split()[0], line.split()[1]): line[start:end].strip()
            for line in lines[1:] if line[:1].strip()}


def test_gpucache_ls_names_each_definition_as_the_inspector_does(ip, capsys, tmp_path):
    gpucache_ext.configure_default_cache(directory=tmp_path)
    numbers, _ = _redeclared_then_swept(ip, capsys)
    labels = gpucache_ext.inspector()._labels
    listed = _ls_labels(tmp_path)
    assert listed and {key[0] for key in listed} >= {"llvm", "ptx", "cubin"}
    mine = {(stage, token[:12]): label for (stage, token), label in labels.items() if stage != "typing"}
    assert listed == mine
    assert set(listed.values()) == {f"act@In[{numbers[c]}]" for c in ("try-defaults", "try-cap", "try-fast",
                                                                        "sweep")}


def test_two_cells_run_without_history_are_never_named_alike(ip):
    cell(ip, "--sm 86 --quiet", ACT, cell_id="quiet-one-1a2b")
    cell(ip, "--sm 86 --quiet", ACT.replace("2.0", "3.0"), cell_id="quiet-two-9f8e")
    cell(ip, "--sm 86 --quiet", ACT.replace("2.0", "4.0"), store_history=True, cell_id="numbered")
    number = ip.execution_count - 1
    labels = set(gpucache_ext.inspector()._labels.values())
    # (neither has a number of its own: the one they ran beside is the numbered cell's)
    assert labels == {"act@cell quiet-on", "act@cell quiet-tw", f"act@In[{number}]"}, labels


def test_places_that_read_alike_go_by_their_ids():
    """In[7] recorded by two notebooks, two ids of one prefix, two files of one name."""
    places = Places()
    first, second = Place.cell("1a2b3c4d-one", 7), Place.cell("9f8e7d6c-two", 7)
    assert places.suffixes([first, second]) == {first: "cell 1a2b3c4d", second: "cell 9f8e7d6c"}
    assert places.suffixes([first, Place.cell("9f8e7d6c", 5)]) == {first: "In[7]", "cell:9f8e7d6c": "In[5]"}
    alike = [Place.cell("1a2b3c4d-one"), Place.cell("1a2b3c4d-two")]
    assert sorted(places.suffixes(alike).values()) == ["cell 1a2b3c4d-o", "cell 1a2b3c4d-t"]
    files = [Place("file", "/a/kernels.py"), Place("file", "/b/kernels.py"), Place("file", "/b/other.py")]
    assert list(places.suffixes(files).values()) == ["a/kernels.py", "b/kernels.py", "other.py"]
    # the number is a note, not the place: one cell is one definition, whatever number it ran as
    assert Place.cell("x", 3) == Place.cell("x", 9) == "cell:x" and Place.of("cell:x", 4).number == 4


@pytest.mark.parametrize("number", [None, 0, -1, "7", True])
def test_a_recorded_number_that_is_no_count_is_none(number):
    assert Place.of("cell:x", number).number is None
    assert Places().describe(Place.of("cell:x", number)) == "cell x"


def test_compare_with_tells_entries_apart_by_what_differs(ip, capsys):
    """The sweep's cell run again with edits: "compare with" lists versions
    of one definition, each told apart by the run of the cell that built it,
    not by its token alone."""
    numbers, _ = _redeclared_then_swept(ip, capsys)
    runs = []
    for scale in ("3.0", "4.0"):  # the sweep's cell edited and run again, twice
        cell(ip, SWEEP + " --quiet", ACT.replace("2.0", scale), store_history=True, cell_id="sweep")
        runs.append(ip.execution_count - 1)
    inspector = gpucache_ext.inspector()
    for stage in ("ptx", "cubin"):
        inspector.select(stage, ip.user_ns["act"].last.stages[stage].token)
        labels = [label for label, token in inspector.compare_with.options if token]
        said = [label.rsplit(" ", 1)[0] for label in labels]  # (each less its token)
        assert len(labels) > 3 and len(set(said)) == len(said), said
    # the bound variant's cubin of the run before: one definition, one config, told apart by its run
    assert f"act@In[{runs[1]}] (float32[:], float32[:]) [sm_86 max_registers=32] from In[{runs[0]}]" in said, said
    assert f"act@In[{numbers['try-cap']}] (float32[:], float32[:]) [sm_86 max_registers=32]" in said, said


def test_identical_duplicates_are_one_compare_choice():
    """Entries that read alike and hold the same code are one choice, the
    newest; one that differs says which run built it, else when."""
    from gpucache_ext.pipeline.results import EntryInfo
    from gpucache_ext.views.compare import compare_choices

    def info(token, created, number=None, config="sm_86"):
        return EntryInfo("ptx", token * 8, "__main__.act", "(float32[:],)", config, {"sm": 86}, ("memory",), 10,
                         created, 0.1, (), Place.cell("c", number) if number else Place.cell("c"))

    rows = [info("d", 40.0), info("c", 30.0), info("b", 20.0), info("a", 10.0, config="sm_86 opt=2")]
    digests = {"d" * 8: "same", "c" * 8: "same", "b" * 8: "other"}
    choices, same = compare_choices(rows, digest_of=digests.get)
    assert [token[0] for _, token in choices] == ["d", "b", "a"] and same == {"c" * 8: "d" * 8}
    texts = [label.rsplit(" ", 1)[0] for label, _ in choices]
    assert len(set(texts)) == 3 and texts[2] == "act (float32[:],) [sm_86 opt=2]", texts
    assert texts[0].startswith("act (float32[:],) [sm_86] built ")
    numbered = [info("d", 40.0, 5), info("b", 20.0, 3)]
    assert [label.rsplit(" ", 1)[0] for label, _ in compare_choices(numbered, selected=info("e", 50.0, 6))[0]] == [
        "act (float32[:],) [sm_86] from In[5]", "act (float32[:],) [sm_86] from In[3]"]


def test_the_sweep_cells_report_says_which_cell_built_each_variant_as_the_inspector_does(ip, capsys, monkeypatch):
    shown = []
    publish = ip.display_pub.publish
    monkeypatch.setattr(ip.display_pub, "publish", lambda data, *a, **k: (shown.append(data), publish(data, *a, **k)))
    numbers, out = _redeclared_then_swept(ip, capsys)
    cache = gpucache_ext.default_cache()
    inspector = gpucache_ext.inspector()
    inspector.select("cubin", _sweep_token(ip, fastmath=True, max_registers=32))
    view = inspector.variants_view.value
    by_view = {}
    for token, body in re.findall(r'<tr data-arch="[^"]+" data-token="([^"]+)"[^>]*>(.*?)</tr>', view):
        by_view[token] = re.search(r'data-built-in="([^"]*)"', body).group(1)
    assert sorted(by_view.values()) == sorted(f"In[{numbers[c]}]" for c in numbers)
    # the text report: a "built in" column after the occupancy, each row naming the inspector's cell
    lines = out.split("act: 4 variants", 1)[1].splitlines()[1:6]
    head = lines[0]
    assert "built in" in head and head.index("built in") > head.index("threads"), out
    start = head.index("built in")
    by_text = {}
    for line in lines[1:]:
        words = line.strip().lstrip("*").split()
        variant = " ".join(word for word in words[1:] if "=" in word or word == "defaults")
        by_text[variant] = line[start:].split()[0]
    by_config = {" ".join(cache.entry("cubin", t).config.split()[1:]) or "defaults": cell
                 for t, cell in by_view.items()}
    assert by_text == by_config, out
    # the HTML report: the same cells, the same rows
    (page,) = [data["text/html"] for data in shown if "gpucache-resource-variants" in data.get("text/html", "")]
    in_page = dict(re.findall(r'<tr data-arch="[^"]+" data-token="([^"]+)"[^>]*>.*?data-built-in="([^"]*)"',
                              page))
    assert in_page == by_view, page
