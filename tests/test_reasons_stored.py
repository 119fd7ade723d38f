"""Reasons stored as data (issue 54): an entry keeps each reason's kind,
component, values and the device functions it was found within beside its
words, so a process that reads the entry back (after a restart, from the
disk or shared tier) has the same `Reason` the build gave, a multi-word
component's change included; entries written with words alone still read
as they did.  No compiles: entries are made by hand and stored in a real
disk tier."""

import hashlib
import json
import struct

from hypothesis import given, settings, strategies as st

from gpucache_ext.queries import miss_reasons
from gpucache_ext.keys.reasons import ADDED, CHANGED, NOTE, REMOVED, UPSTREAM, Reason
from gpucache_ext.backends.numba_cuda.stages import CubinArtifact
from gpucache_ext.store import codec
from gpucache_ext.store.disk import DiskTier
from gpucache_ext.store.signing import Keyring
from gpucache_ext.store.tiers import Entry
from gpucache_ext.keys.tokens import component, make_token

from .helpers import run_python

ARTIFACT = CubinArtifact(b"\x7fELF cubin bytes", "log", None, "k")
DIGEST = codec.content_digest("cubin", ARTIFACT)


def every_kind():
    """A reason of every kind and form the cache gives, multi-word components
    and values with spaces and arrows among them."""
    fatbin = miss_reasons("fatbin", {"cubin sm_80": component(1), "cubin sm_86": component(2)},
                          {"cubin sm_80": component(4), "cubin sm_75": component(3)},
                          {"cubin sm_80": "opt 3 -> 0"})
    return (
        Reason.added("global K", "2.5"),
        Reason.removed("device function f", "code 1a2b"),
        Reason.changed("opt", "3", "0"),
        Reason.changed("global MODE", "'a -> b'", "'c d input changed'"),
        Reason.changed("closure scale factor", "(1, 2)", "(3, 4)"),
        Reason.changed("code"),
        Reason.changed("device function f"),
        Reason.upstream("llvm"),
        Reason.changed("global G", "2.0", "3.0").inside("scale"),
        Reason.changed("global G", "2.0", "3.0").inside("scale").inside("activate"),
        Reason.added("global H", "1").inside("inner fn"),
        Reason.changed("code").inside("scale"),
        Reason("first compile of axpy"),
        Reason("waited 2.0s for another process's build of this entry"),
        *fatbin,
    )


def facts(reason):
    """Everything a reason is: its words and its data."""
    return (type(reason), str(reason), reason.kind, reason.component, reason.within, reason.old, reason.new)


def stored(tier, reasons, n=0):
    token = make_token("cubin", {"n": component(n)})
    tier.put("cubin", Entry(token.hex, "k", ARTIFACT, token.components, len(ARTIFACT.cubin), 0.1,
                            reasons=tuple(reasons), digest=DIGEST))
    return token.hex


def test_every_kind_of_reason_reads_back_from_the_disk_tier_as_the_same_data(tmp_path):
    reasons = every_kind()
    assert {r.kind for r in reasons} == {ADDED, REMOVED, CHANGED, UPSTREAM, NOTE}
    token = stored(DiskTier(tmp_path), reasons)
    again = DiskTier(tmp_path).get("cubin", token)  # (a tier of its own: nothing kept in memory)
    assert [facts(r) for r in again.reasons] == [facts(r) for r in reasons]
    listed = next(e for e in DiskTier(tmp_path).entries("cubin") if e.token == token)  # (a header alone)
    assert [facts(r) for r in listed.reasons] == [facts(r) for r in reasons]
    assert again.reasons[0].component == "global K" and again.reasons[0].kind == ADDED  # (read as a note before)


def test_reasons_read_back_in_a_new_process_are_the_same_data(tmp_path):
    reasons = every_kind()
    token = stored(DiskTier(tmp_path), reasons)
    back = run_python("""
        import json, sys
        from gpucache_ext.store.disk import DiskTier
        entry = DiskTier(sys.argv[1]).get("cubin", sys.argv[2])
        print(json.dumps([[str(r), r.kind, r.component, list(r.within), r.old, r.new] for r in entry.reasons]))
        """, tmp_path, token, json_line=True)
    assert back == [[str(r), r.kind, r.component, list(r.within), r.old, r.new] for r in reasons]


def test_a_signed_entry_with_reasons_as_data_verifies(tmp_path):
    tier = DiskTier(tmp_path, keyring=Keyring(["s3cret"]))
    token = stored(tier, every_kind())
    again = DiskTier(tmp_path, keyring=Keyring(["s3cret"]))
    assert [facts(r) for r in again.get("cubin", token).reasons] == [facts(r) for r in every_kind()]
    assert again.verify() == []
    assert DiskTier(tmp_path, keyring=Keyring(["other"])).lookup("cubin", token).entry is None


def rewritten(data, change):
    """An entry's bytes with its header changed by `change`, checksum made again."""
    header, start = codec.read_header(data)
    change(header)
    head = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    body = struct.pack(">I", len(head)) + head + data[start:]
    return codec.MAGIC + hashlib.sha256(body).digest() + body


def test_an_entry_with_reasons_as_words_alone_still_reads_as_before():
    """Entries written before reasons were kept as data: their words, read
    back as `Reason.of` reads them."""
    token = make_token("cubin", {"n": component(0)})
    reasons = every_kind()
    data = codec.encode("cubin", Entry(token.hex, "k", ARTIFACT, token.components, 1, 0.1, reasons=reasons,
                                       digest=DIGEST))
    assert json.loads(json.dumps(codec.read_header(data)[0]["reasons"])) == list(map(str, reasons))  # (words too)
    old = rewritten(data, lambda header: header.pop("reasons_data"))
    back = codec.decode(old, "cubin", token.hex).reasons
    assert [facts(r) for r in back] == [facts(Reason.of(str(r))) for r in reasons]
    assert back[2].kind == CHANGED and back[7].kind == UPSTREAM and back[0].kind == NOTE  # (as before)
    odd = rewritten(data, lambda header: header.update(reasons_data=[{"kind": 3}]))  # (data that does not fit)
    assert [facts(r) for r in codec.decode(odd, "cubin", token.hex).reasons] == [facts(Reason.of(str(r)))
                                                                                  for r in reasons]


WORDS = st.text(st.sampled_from("ab K_1.'()->:, "), min_size=1, max_size=12)
LABELS = st.lists(st.text(st.sampled_from("fg_ 1"), min_size=1, max_size=6), max_size=3)


@st.composite
def reasons(draw):
    kind = draw(st.sampled_from((ADDED, REMOVED, CHANGED, UPSTREAM, NOTE)))
    name = draw(st.sampled_from(("", "global ", "closure ", "device function "))) + draw(WORDS)
    old, new = draw(WORDS), draw(WORDS)
    reason = {ADDED: lambda: Reason.added(name, new), REMOVED: lambda: Reason.removed(name, old),
              CHANGED: lambda: Reason.changed(name, old, new), UPSTREAM: lambda: Reason.upstream(name),
              NOTE: lambda: Reason(name)}[kind]()
    for label in draw(LABELS):
        reason = reason.inside(label)
    return reason


@settings(max_examples=200, deadline=None)
@given(st.lists(reasons(), max_size=4))
def test_any_reasons_go_through_an_entry_as_the_same_data(found):
    token = make_token("cubin", {"n": component(0)})
    data = codec.encode("cubin", Entry(token.hex, "k", ARTIFACT, token.components, 1, 0.1, reasons=tuple(found),
                                       digest=DIGEST))
    assert [facts(r) for r in codec.decode(data, "cubin", token.hex).reasons] == [facts(r) for r in found]
    assert [facts(r) for r in codec.header_entry(data).reasons] == [facts(r) for r in found]


def test_the_phrases_built_from_reasons_are_worded_once():
    """The cell report, ``gpucache explain``, clearing and the inspector use
    one `and_join`, one `own` and one early-cutoff phrase."""
    from gpucache_ext.keys import reasons as wording
    from gpucache_ext.cli import explain
    from gpucache_ext.ipython import report
    from gpucache_ext.queries import clearing

    assert report.and_join is explain.and_join is clearing.and_join is wording.and_join
    assert report.own is explain.own is wording.own and explain.cutoff_phrase is wording.cutoff_phrase
    assert [wording.and_join(n) for n in (["ptx"], ["ptx", "cubin"], ["llvm", "ptx", "cubin"])] == [
        "ptx", "ptx and cubin", "llvm, ptx and cubin"]
    found = [Reason.upstream("llvm"), Reason.changed("opt", "3", "2"), "global K 1 -> 2"]
    assert wording.own(found) == ["opt 3 -> 2", "global K 1 -> 2"]
    assert wording.cutoff_phrase("ptx", wording.own(found), ["cubin"]) == (
        "ptx rebuilt (opt 3 -> 2, global K 1 -> 2), same bytes: cubin reused")
    assert wording.cutoff_phrase("llvm", [], ["ptx", "cubin"]) == "llvm rebuilt, same bytes: ptx and cubin reused"
