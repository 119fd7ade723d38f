"""What a user sees of the persistent tiers' signing (issue 11): ``%gpucache``
(the inspector and its text fallback) and ``%gpucache stats`` say per tier
where it is, whether its entries are signed, what it refused and why, and
what a previous secret signed.

Everything here is real: compiles (on the CPU), the disk tier in a temporary
folder, the magics in an in-process IPython."""

from html.parser import HTMLParser

import pytest

import gpucache_ext
from gpucache_ext import KernelCache, samples
from gpucache_ext.errors import SecurityWarning
from gpucache_ext.widgets.render import tier_rows, tier_security_html, tier_security_text

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
    run(ip, capsys, "--sm 80 --quiet")
    text, page = stats_of(ip)
    assert f"persistent tiers\n  disk  {tmp_path}  signed" in text
    assert tier_cells(page)[0] == {("disk", "state"): "signed", ("disk", "rejected"): "0",
                                   ("disk", "previous_secret"): "0"}

    settings(secret="b", directory=str(tmp_path))  # another team's cache on the same folder
    run(ip, capsys, "--sm 80 --quiet")
    cache = gpucache_ext.default_cache()
    assert cache.tier_info()[0].rejected == {"other secret": 3}

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


def test_without_persistent_tiers_nothing_is_added(ip):
    cache = KernelCache()
    assert tier_rows(cache.tier_info()) == [] and tier_security_text(cache.tier_info()) == ""
    assert tier_security_html(cache.stats().tiers) == ""
