"""Reasons as data (issue 33): a miss's reasons say what they are about
(`Reason.kind`, `.component`, `.within`), so the views that filter them ask
that instead of reading their words; they stay the words every tier keeps.

Real compiles: the kernels below are compiled at sm_86 by a real cache."""

import json
import pickle

from gpucache_ext import CompileConfig, KernelCache
from gpucache_ext.ipython.report import why_text
from gpucache_ext.queries import miss_reasons
from gpucache_ext.keys.reasons import ADDED, CHANGED, NOTE, REMOVED, UPSTREAM, Reason
from gpucache_ext.keys.tokens import Component, component, parts_digest

from .helpers import DEVICE_READS_G, READ_K, reading

SIG = "void(float32[:])"
BASE = CompileConfig(sm=86)


def test_a_reason_is_its_words_and_knows_what_it_is_about():
    reason = Reason.changed("opt", "3", "0")
    assert reason == "opt 3 -> 0" and (reason.kind, reason.component) == (CHANGED, "opt")
    assert {reason: 1}["opt 3 -> 0"] == 1  # hashes as its words
    assert json.loads(json.dumps([reason])) == ["opt 3 -> 0"]
    back = pickle.loads(pickle.dumps(reason))
    assert (back, back.kind, back.component) == (reason, CHANGED, "opt")
    assert Reason.added("global K", "2.5") == "global K added (2.5)"
    assert Reason.removed("global K", "2.5") == "global K removed (was 2.5)"
    assert Reason.changed("code") == "code changed"
    assert Reason.upstream("llvm") == "llvm input changed" and Reason.upstream("llvm").is_upstream


def test_reasons_inside_device_functions_keep_their_component_and_path():
    inner = Reason.changed("global G", "2.0", "3.0").inside("scale")
    assert inner == "global G 2.0 -> 3.0 (read by scale)"
    assert (inner.component, inner.within) == ("global G", ("scale",))
    outer = inner.inside("activate")
    assert outer == "global G 2.0 -> 3.0 (read by scale, called by activate)"
    assert outer.within == ("scale", "activate")
    code = Reason.changed("code").inside("scale")
    assert code == "device function scale: code changed" and code.component == "code"


def test_plain_words_read_back_as_data_only_where_they_are_unambiguous():
    assert Reason.of("ptx input changed").kind == UPSTREAM
    assert Reason.of("fastmath False -> True").component == "fastmath"
    assert Reason.of("global MODE 'a' -> 'b input changed'").kind == NOTE  # not its words' ending
    assert Reason.of("first compile of axpy").kind == NOTE
    same = Reason.changed("opt", "3", "0")
    assert Reason.of(same) is same


def test_a_value_that_reads_like_an_upstream_change_is_still_the_values_change():
    """A global whose shown value ends like "... input changed" is its own
    reason: the filters that drop "the stage before changed" (once by the
    reason's last words) keep it."""
    new = {"global MODE": component("b input changed")}
    old = {"global MODE": component("a")}
    reasons = miss_reasons("typing", new, old)
    assert [r.kind for r in reasons] == [CHANGED] and reasons[0].endswith(" input changed")  # (the old filter's test)
    assert not reasons[0].is_upstream


def test_a_real_miss_gives_reasons_as_data():
    cache = KernelCache()
    _, kernel = reading(READ_K, K=2.5)
    cache.compile(kernel, SIG, BASE)
    _, kernel = reading(READ_K, K=3.25)
    changed = cache.compile(kernel, SIG, BASE)
    typing = changed.stages["typing"].reasons
    assert [(r.kind, r.component) for r in typing] == [(CHANGED, "global K")]
    assert [(r.kind, r.component) for r in changed.stages["llvm"].reasons] == [(UPSTREAM, "typing")]
    opt = cache.compile(kernel, SIG, BASE.replace(opt=0))
    assert any(r.component == "opt" and r.kind == CHANGED for r in opt.stages["ptx"].reasons)
    assert "typing: global K 2.5 -> 3.25" in why_text(changed)
    assert "llvm input changed" not in why_text(changed)  # (the stage before already says why)


def test_a_device_functions_global_is_found_within_it():
    cache = KernelCache()
    _, kernel = reading(DEVICE_READS_G, G=2.0)
    cache.compile(kernel, SIG, BASE)
    _, kernel = reading(DEVICE_READS_G, G=3.0)
    (reason,) = cache.compile(kernel, SIG, BASE).stages["typing"].reasons
    assert reason == "global G 2.0 -> 3.0 (read by scale)"
    assert (reason.kind, reason.component, reason.within) == (CHANGED, "global G", ("scale",))


def test_reasons_read_back_from_disk_are_data_again(tmp_path):
    cache = KernelCache(directory=tmp_path)
    _, kernel = reading(READ_K, K=2.5)
    cache.compile(kernel, SIG, BASE)
    result = cache.compile(kernel, SIG, BASE.replace(fastmath=True))
    token = result.stages["ptx"].token
    again = KernelCache(directory=tmp_path).entry("ptx", token)
    assert again is not None and again.reasons
    assert again.reasons == result.stages["ptx"].reasons
    assert all(isinstance(r, Reason) for r in again.reasons)
    assert [r.kind for r in again.reasons] == [r.kind for r in map(Reason.of, result.stages["ptx"].reasons)]


def test_a_fatbins_member_reasons_name_members():
    parts = {"cubin sm_80": component(1), "cubin sm_86": component(2)}
    old = {"cubin sm_80": component(1), "cubin sm_75": component(3)}
    reasons = miss_reasons("fatbin", parts, old, {"cubin sm_86": None})
    assert [(r.kind, str(r)) for r in reasons] == [(ADDED, "sm_86 added"), (REMOVED, "sm_75 removed")]
    whole = Component(parts_digest({"code": component("a")}), "device function", ())
    assert miss_reasons("typing", {"device function f": whole}, {})[0].kind == ADDED


# ---------------------------------------------------------------------------
# Places as data, held by the cache and the session (issue 33)


def test_a_place_is_its_stored_words_and_knows_its_kind(tmp_path):
    from gpucache_ext.pipeline.definitions import FILES, Place

    path = tmp_path / "kernels.py"
    path.write_text("x = 1\n")
    place = Place.file(str(path))
    assert place == f"file:{path.resolve()}" and (place.kind, place.where) == ("file", str(path.resolve()))
    assert pickle.loads(pickle.dumps(place)).kind == "file"
    cell = Place.of("cell:1a2b3c4d5e")
    assert (cell.kind, cell.where) == ("cell", "1a2b3c4d5e")
    assert FILES.describe(cell) == "cell 1a2b3c4d" and FILES.describe(place) == "kernels.py"
    assert FILES.describe("odd:words") == "odd:words" and FILES.explain(None) == "an unknown place"
    assert Place.of("file:/a:b/k.py").where == "/a:b/k.py"  # (a colon in the path)


def test_a_cache_asks_its_own_places_else_files_alone(tmp_path):
    from gpucache_ext.pipeline.definitions import FILES, Places

    cache = KernelCache()
    assert cache.places is FILES  # (no IPython session here)
    _, kernel = reading(READ_K, K=1.0)
    assert cache.compile(kernel, SIG, BASE).place is None  # a "<cell>" code name: no file, no cell
    asked = []
    cache.places = Places(lambda name: asked.append(name) or ("cellid42", 7), {"cellid42": 7}.get)
    result = cache.compile(kernel, SIG, BASE.replace(opt=2))
    assert result.place == "cell:cellid42" and result.place.kind == "cell" and asked == ["<cell>"]
    assert cache.places.describe(result.place) == "In[7]"
    assert KernelCache().places is FILES  # (one cache's places are its own)


def test_the_session_attaches_its_places_while_loaded(ip):
    import gpucache_ext
    from gpucache_ext import sessions
    from gpucache_ext.pipeline.definitions import FILES

    session = gpucache_ext.current_session()
    assert session is not None and sessions.places() is session.places
    assert gpucache_ext.default_cache().places is session.places
    ip.run_line_magic("unload_ext", "gpucache_ext")
    try:
        assert gpucache_ext.current_session() is None and sessions.places() is FILES
    finally:
        ip.run_line_magic("load_ext", "gpucache_ext")
    assert gpucache_ext.current_session() is not None
