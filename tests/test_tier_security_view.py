"""What a user sees of the persistent tiers' signing (issue 11): ``%gpucache``
(the inspector and its text fallback) and ``%gpucache stats`` say per tier
where it is, whether its entries are signed, what it refused and why, and
what a previous secret signed; a cell's report marks hits from an unsigned
shared tier and says what the cache refused during the cell.

Everything here is real: compiles (on the CPU), the disk tier in a temporary
folder, a redis-server on loopback, the magics in an in-process IPython."""

from html.parser import HTMLParser

import pytest

import gpucache_ext
from gpucache_ext import CompileConfig, KernelCache, samples
from gpucache_ext.errors import SecurityWarning
from gpucache_ext.views import tier_rows, tier_security_html, tier_security_text

from . import kernels

OTHER_SECRET = "3 other secret (signed with a secret this cache does not hold: a retired one, or another team's)"


@pytest.fixture
def settings(ip, monkeypatch):
    """Set the session cache's secrets and tiers; each call builds it again on next use."""

    def configure(secret=None, previous=None, unsigned=False, **tiers):
        for name, value in (("GPUCACHE_SECRET", secret), ("GPUCACHE_SECRET_PREVIOUS", previous),
                            ("GPUCACHE_SHARED_UNSIGNED", "1" if unsigned else None)):
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, value)
        gpucache_ext.configure_default_cache(**tiers)

    yield configure
    gpucache_ext.configure_default_cache()


def run(ip, capsys, line):
    """Run a %%gpukernel cell of the axpy sample; what it displayed (its report as text)."""
    capsys.readouterr()
    ip.run_cell(f"%%gpukernel {line} --sig '{samples.AXPY_SIG}'\n{samples.AXPY}").raise_error()
    return capsys.readouterr().out


def report_rows(out):
    """The report's table as {kernel: {column: value}}, and the lines below it."""
    lines = out.strip().splitlines()
    head = lines[0].split()
    starts = [lines[0].index(name) for name in head]
    rows, rest = {}, []
    for line in lines[1:]:
        if not line.startswith("axpy"):
            rest.append(line)
            continue
        cells = [line[a:b].strip() for a, b in zip(starts, starts[1:] + [len(line)])]
        rows[cells[0]] = dict(zip(head, cells))
    return rows, rest


class _TierCells(HTMLParser):
    """{(tier, field): data-value} of the tier table's cells."""

    def __init__(self):
        super().__init__()
        self.found, self.reasons, self._tier = {}, {}, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "tr" and "data-tier" in attrs:
            self._tier = attrs["data-tier"]
        elif "data-tier-field" in attrs:
            self.found[(self._tier, attrs["data-tier-field"])] = attrs["data-value"]
        elif "data-reason" in attrs:
            self.reasons[(self._tier, attrs["data-reason"])] = int(attrs["data-count"])


def tier_cells(page):
    parser = _TierCells()
    parser.feed(page)
    return parser.found, parser.reasons


def stats_of(ip):
    """`%gpucache stats` as the frontend gets it: (text, html)."""
    data, _ = ip.display_formatter.format(ip.run_line_magic("gpucache", "stats"))
    return data["text/plain"], data["text/html"]


def inspector_tiers(ip):
    """The live inspector's tier block (its widget's value), and its text fallback."""
    inspector = ip.run_line_magic("gpucache", "")
    block = next(w for w in inspector.children if "gpucache-tiers" in w._dom_classes)
    return block.value, inspector._repr_mimebundle_()["text/plain"]


# -- the disk tier: signed, and what another secret's cache refuses ---------------------


def test_a_signed_disk_tier_reads_signed_and_another_secrets_entries_are_refused_and_counted(
        ip, capsys, tmp_path, settings):
    settings(secret="a", directory=str(tmp_path))
    out = run(ip, capsys, "--sm 80")
    rows, rest = report_rows(out)
    assert rows["axpy"]["cubin"] == "MISS" and rest == []  # all signed, nothing refused: nothing extra
    text, page = stats_of(ip)
    assert f"persistent tiers\n  disk  {tmp_path}  signed" in text
    assert tier_cells(page)[0] == {("disk", "state"): "signed", ("disk", "rejected"): "0",
                                   ("disk", "previous_secret"): "0"}

    settings(secret="b", directory=str(tmp_path))  # another team's cache on the same folder
    out = run(ip, capsys, "--sm 80")
    rows, rest = report_rows(out)
    assert [rows["axpy"][s] for s in ("llvm", "ptx", "cubin")] == ["MISS"] * 3
    assert rest == [f"refused in this cell (not used): 3 entries of the disk tier, {OTHER_SECRET}"]
    cache = gpucache_ext.default_cache()
    assert cache.tier_info()[0].rejected == {"other secret": 3}

    out = run(ip, capsys, "--sm 80")  # its own entries now: hits, and nothing more refused
    rows, rest = report_rows(out)
    assert rows["axpy"]["cubin"] == "hit" and rest == []

    text, page = stats_of(ip)
    block = text.split("\n\n")[-1]
    assert block.splitlines() == ["persistent tiers", f"  disk  {tmp_path}  signed",
                                  f"        refused 3 entries: {OTHER_SECRET}"]
    cells, reasons = tier_cells(page)
    assert cells[("disk", "state")] == "signed" and cells[("disk", "rejected")] == "3"
    assert reasons == {("disk", "other secret"): 3}
    # the inspector shows the same block, live and in its text fallback
    live, fallback = inspector_tiers(ip)
    assert live == tier_security_html(cache.stats().tiers) and tier_cells(live) == (cells, reasons)
    assert block in fallback


def test_an_unsigned_private_disk_tier_adds_nothing_to_the_report(ip, capsys, tmp_path, settings):
    settings(directory=str(tmp_path / "mine"))
    run(ip, capsys, "--sm 80 --quiet")
    settings(directory=str(tmp_path / "mine"))  # a new cache: the hits come from the disk
    rows, rest = report_rows(run(ip, capsys, "--sm 80"))
    assert rows["axpy"]["cubin"] == "hit:disk" and rest == []
    text, page = stats_of(ip)
    assert text.splitlines()[-1] == f"  disk  {tmp_path / 'mine'}  unsigned"
    assert tier_cells(page)[0][("disk", "state")] == "unsigned"


# -- the shared tier: unsigned by opt-in, refusals by reason, rotation, not used -------------


def test_hits_from_an_unsigned_shared_tier_are_marked_and_explained(ip, capsys, redis_server, settings):
    settings(unsigned=True, redis_url=redis_server.url)
    run(ip, capsys, "--sm 80 --quiet")
    settings(unsigned=True, redis_url=redis_server.url)  # a new cache, its memory empty
    rows, rest = report_rows(run(ip, capsys, "--sm 80"))
    assert [rows["axpy"][s] for s in ("llvm", "ptx", "cubin")] == ["hit:shared (unsigned)"] * 3
    note = ("whoever can write to the server can change these kernels (GPUCACHE_SHARED_UNSIGNED); "
            "set GPUCACHE_SECRET (the same for everyone who shares it) to sign its entries")
    assert rest == [f"shared tier is unsigned: {note}"]
    assert ip.user_ns["axpy"].last.stages["cubin"].tier == "shared"

    text, page = stats_of(ip)
    where = f"{redis_server.url} prefix gpucache"
    assert text.split("\n\n")[-1] == f"persistent tiers\n  shared  {where}  UNSIGNED: {note}"
    assert tier_cells(page)[0][("shared", "state")] == "unsigned"
    assert "UNSIGNED" in page and "gpucache-warn" in page
    live, _ = inspector_tiers(ip)
    assert tier_cells(live)[0][("shared", "state")] == "unsigned" and where in live


def test_the_report_html_marks_unsigned_hits_and_refusals(redis_server):
    from gpucache_ext.ipython.report import CellReport, refusals_between

    config = CompileConfig(sm=80)
    KernelCache(redis_url=redis_server.url, allow_unsigned=True).compile(kernels.copy, kernels.COPY_SIG, config)
    unsigned = KernelCache(redis_url=redis_server.url, allow_unsigned=True)
    result = unsigned.compile(kernels.copy, kernels.COPY_SIG, config)
    page = CellReport([result], tiers=unsigned.tier_info())._repr_html_()
    assert page.count('<td class="gpucache-warn">hit:shared (unsigned)</td>') == 3
    assert '<p class="gpucache-warn">shared tier is unsigned: ' in page

    KernelCache(redis_url=redis_server.url, secret="a").compile(kernels.copy, kernels.COPY_SIG, config)
    stranger = KernelCache(redis_url=redis_server.url, secret="b")
    before = stranger.tier_info()
    result = stranger.compile(kernels.copy, kernels.COPY_SIG, config)
    refused = refusals_between(before, stranger.tier_info())
    assert refused == {"shared": {"other secret": 3}}
    report = CellReport([result], tiers=stranger.tier_info(), refused=refused)
    assert "shared tier is unsigned" not in repr(report)  # signed: no mark
    assert repr(report).splitlines()[-1] == \
        f"refused in this cell (not used): 3 entries of the shared tier, {OTHER_SECRET}"
    assert "refused in this cell (not used): 3 entries of the shared tier" in report._repr_html_()


def test_refusals_by_reason_then_rotation_to_a_new_secret(ip, capsys, redis_server, settings):
    settings(secret="a", redis_url=redis_server.url)
    run(ip, capsys, "--sm 80 --quiet")
    settings(secret="b", redis_url=redis_server.url)  # a secret that never signed these
    # quiet, yet refusals are shown
    rows, rest = report_rows(run(ip, capsys, "--sm 80 --quiet"))
    assert rows["axpy"]["cubin"] == "MISS"
    assert rest == [f"refused in this cell (not used): 3 entries of the shared tier, {OTHER_SECRET}"]
    stats = gpucache_ext.default_cache().stats()
    assert stats["cubin"].tiers["shared"].rejected_by == {"other secret": 1}
    text, page = stats_of(ip)
    assert f"refused 3 entries: {OTHER_SECRET}" in text
    assert tier_cells(page)[1] == {("shared", "other secret"): 3}

    # rotation: "c" signs now, "b" (what signed the store's entries) is still accepted
    settings(secret="c", previous="b", redis_url=redis_server.url)
    rows, rest = report_rows(run(ip, capsys, "--sm 80"))
    assert rows["axpy"]["cubin"] == "hit:shared" and rest == []  # signed, nothing refused
    text, page = stats_of(ip)
    assert text.split("\n\n")[-1].splitlines()[1:] == [
        f"  shared  {redis_server.url} prefix gpucache  signed",
        "          read 3 entries signed by a previous secret: rotation in progress "
        "(`gpucache verify --fix` signs them again with GPUCACHE_SECRET)"]
    cells, _ = tier_cells(page)
    assert cells[("shared", "previous_secret")] == "3" and cells[("shared", "rejected")] == "0"
    assert "gpucache verify --fix" in inspector_tiers(ip)[0]


def test_a_shared_tier_without_a_secret_is_shown_not_used_with_the_fix_and_no_password(ip, capsys, settings):
    settings(redis_url="redis://team:hunter2@127.0.0.1:1/0")  # nothing listens; never contacted
    with pytest.warns(SecurityWarning, match="is not used"):
        cache = gpucache_ext.default_cache()
    assert cache.tiers == []
    text, page = stats_of(ip)
    assert text.split("\n\n")[-1] == (
        "persistent tiers\n  shared  redis://team:***@127.0.0.1:1/0  not used: no secret (set "
        "GPUCACHE_SECRET, or GPUCACHE_SHARED_UNSIGNED=1 to use it unsigned)")
    assert tier_cells(page)[0][("shared", "state")] == "not used"
    live, fallback = inspector_tiers(ip)
    for shown in (text, page, live, fallback):
        assert "hunter2" not in shown and "not used" in shown
    rows, rest = report_rows(run(ip, capsys, "--sm 80"))  # compiles go on, from memory
    assert rows["axpy"]["cubin"] == "MISS" and rest == []


def test_without_persistent_tiers_nothing_is_added(ip):
    cache = KernelCache()
    assert tier_rows(cache.tier_info()) == [] and tier_security_text(cache.tier_info()) == ""
    assert tier_security_html(cache.stats().tiers) == ""
