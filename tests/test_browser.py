"""The inspector in a real browser: JupyterLab on loopback, Debian's Chromium
driven by playwright, notebooks/quickstart.ipynb run top to bottom.

Skips only when /usr/bin/chromium is missing and CI is not set; in CI a missing
browser (or playwright, or jupyterlab) fails the test.  Browsers are never
downloaded: install Chromium with ``apt-get install -y chromium``.

The module's fixture starts JupyterLab (127.0.0.1, a free port, a token, a
temporary root with a copy of the notebook, temporary settings; the kernel
imports this checkout) and the browser, runs the notebook, and stops both, and
the kernel, however the tests end.  The tests share that page, in file order:
the ones that only read it first, then those that act (evict, change the
theme).  Every wait has a timeout.  Screenshots go to the fixture's folder;
failures print the path of a screenshot of the page.  Those tests are `slow`;
the quick smoke test draws the inspector's static snapshot in Chromium
without JupyterLab.
"""

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import List

import pytest

from .helpers import CHROMIUM, cell, free_port, require_chromium

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "quickstart.ipynb"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
SERVER_START_S = 90
PAGE_S = 90
RUN_ALL_S = 240
ACTION_S = 60

pytestmark = pytest.mark.timeout(600)


def _children(pid: int):
    """Pids of the direct children of `pid` (the kernels JupyterLab started)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover
        return True
    try:  # a zombie is not alive
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class JupyterLab:
    """A JupyterLab server of our own, on loopback, in a temporary root."""

    def __init__(self, workdir: Path):
        self.root = workdir / "root"
        self.root.mkdir()
        shutil.copy(NOTEBOOK, self.root / NOTEBOOK.name)
        settings = workdir / "settings"
        self._settings(settings)
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "jupyterlab.log"
        env = dict(os.environ)
        env.update({
            "JUPYTER_CONFIG_DIR": str(workdir / "config"),
            "JUPYTER_RUNTIME_DIR": str(workdir / "runtime"),
            "JUPYTER_DATA_DIR": str(workdir / "data"),  # (labextensions still come from sys.prefix)
            "IPYTHONDIR": str(workdir / "ipython"),
            "GPUCACHE_DIR": str(workdir / "gpucache"),  # a fresh persistent tier, if any
            "JUPYTER_PLATFORM_DIRS": "1",
            # the kernel imports this checkout, not whatever copy is installed
            "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))),
        })
        env.pop("JUPYTER_TOKEN", None)
        command = [
            sys.executable, "-m", "jupyterlab", "--no-browser",
            "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root}",
            "--ServerApp.open_browser=False", "--LabApp.expose_app_in_browser=True",
            f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={workdir / 'workspaces'}",
            "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly", "--ServerApp.terminals_enabled=False",
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:  # containers and CI runners
            command.append("--allow-root")
        self.log = open(self.log_path, "wb")
        self.process = subprocess.Popen(command, cwd=self.root, env=env, stdout=self.log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
        self.kernels = set()

    @staticmethod
    def _settings(settings: Path):
        """Every cell rendered (no windowing), no news or update checks."""
        tracker = settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
        tracker.parent.mkdir(parents=True)
        tracker.write_text(json.dumps({"windowingMode": "none"}))
        notification = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
        notification.parent.mkdir(parents=True)
        notification.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))

    def request(self, path, method="GET", timeout=10):
        request = urllib.request.Request(f"{self.url}{path}", method=method,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()

    def wait_ready(self):
        deadline = time.monotonic() + SERVER_START_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"JupyterLab exited ({self.process.returncode}):\n{self.log_text()}")
            try:
                status, _ = self.request("/api/status", timeout=5)
                if status == 200:
                    return
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.5)
        raise TimeoutError(f"JupyterLab did not answer within {SERVER_START_S} s:\n{self.log_text()}")

    def note_kernels(self):
        if self.process.poll() is None:
            self.kernels.update(_children(self.process.pid))

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:  # pragma: no cover
            return ""

    def stop(self):
        """Shut the server down (it stops its kernels); force whatever is left."""
        self.note_kernels()
        if self.process.poll() is None:
            try:
                self.request("/api/shutdown", method="POST", timeout=5)
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            if self.process.poll() is not None:
                break
            try:
                os.killpg(self.process.pid, sig)  # the group we started: server and helpers
            except ProcessLookupError:
                break
            try:
                self.process.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                pass
        deadline = time.monotonic() + 10
        for pid in self.kernels:  # kernels run in their own sessions
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if _alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.log.close()
        return self.process.returncode


# JavaScript run in the page (playwright's evaluate; nothing is put into the notebook)
KERNEL_IDLE = """() => {
  const app = window.jupyterapp; const w = app && app.shell.currentWidget;
  const s = w && w.sessionContext;
  return !!(w && w.content && w.content.widgets && s && s.isReady && s.session && s.session.kernel
            && s.session.kernel.status === 'idle');
}"""
RUN_ALL = """() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); return true; }"""
ALL_RAN = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  const cells = w.content.widgets.filter(c => c.model.type === 'code');
  const s = w.sessionContext.session;
  return cells.length > 0 && cells.every(c => Number.isInteger(c.model.executionCount))
         && !!s && s.kernel.status === 'idle';
}"""
INSPECTOR_NUMBERS = """() => Array.from(document.querySelectorAll(
    '.gpucache-inspector .gpucache-summary td[data-field]')).map(td => ({
  stage: td.dataset.stage, tier: td.dataset.tier || null, field: td.dataset.field,
  value: td.dataset.value, text: td.textContent.trim()}))"""
STATS_TABLE = """() => {
  for (const table of document.querySelectorAll('table.gpucache-summary-table')) {
    if (table.closest('.gpucache-inspector')) continue;  // the inspector's own
    const rows = {};
    for (const td of table.querySelectorAll('td[data-field]')) {
      if (td.dataset.tier) continue;
      (rows[td.dataset.stage] = rows[td.dataset.stage] || {})[td.dataset.field] =
          {value: td.dataset.value, text: td.textContent.trim()};
    }
    return rows;
  }
  return null;
}"""
ERRORS = """() => Array.from(document.querySelectorAll(
  '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'))
  .map(e => e.textContent).filter(t => /Traceback|Error/.test(t))"""
CONTRAST = """() => {
  const lum = (c) => {
    const m = c.match(/[\\d.]+/g).map(Number);
    const lin = m.slice(0, 3).map(v => {
        v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2];
  };
  const box = document.querySelector('.gpucache-inspector');
  const cell = box.querySelector('.gpucache-summary td[data-stage="ptx"][data-field="entries"]');
  const fg = getComputedStyle(cell).color, bg = getComputedStyle(box).backgroundColor;
  const [a, b] = [lum(fg), lum(bg)].sort((x, y) => y - x);
  return {fg, bg, ratio: (a + 0.05) / (b + 0.05), bgLuminance: lum(bg),
          light: document.body.dataset.jpThemeLight};
}"""


# -- the layout checks (items of issue 10), measured in the page -------------------

# What each code cell ran and what its %%gpukernel cell report said, per kernel row.
CELL_REPORTS = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  const out = [];
  for (const cell of w.content.widgets) {
    if (cell.model.type !== 'code') continue;
    const source = cell.model.sharedModel.getSource();
    const rows = [];
    for (const table of cell.node.querySelectorAll('table.gpucache-report')) {
      const head = Array.from(table.querySelectorAll('thead th')).map(th => th.textContent.trim());
      for (const tr of table.querySelectorAll('tbody tr')) {
        const row = {};
        Array.from(tr.children).forEach((td, i) => { row[head[i]] = td.textContent.trim(); });
        rows.push(row);
      }
    }
    out.push({count: cell.model.executionCount, source, rows});
  }
  return out;
}"""

# The inspector chart's columns: per cell label, per stage (hits, misses).
CHART_POINTS = """() => {
  const points = {};
  for (const g of document.querySelectorAll('.gpucache-inspector svg.gpucache-chart g[data-cell]')) {
    (points[g.dataset.cell] = points[g.dataset.cell] || {})[g.dataset.stage] =
        [Number(g.dataset.hits), Number(g.dataset.misses)];
  }
  return points;
}"""

SETTLED = """() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => done(true))))"""

# The entries list: the header and the listbox, in their scrolling box.  Option
# text is measured with the listbox's own font (options have no boxes of their own).
ENTRIES_LAYOUT = """() => {
  const box = document.querySelector('.gpucache-inspector');
  const scroller = box.querySelector('.gpucache-entries-scroll') || box;
  const head = box.querySelector('.gpucache-entries-head');
  const select = box.querySelector('.gpucache-entries select');
  const style = getComputedStyle(select);
  const canvas = document.createElement('canvas').getContext('2d');
  canvas.font = `${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
  const inner = select.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  const options = Array.from(select.options).map(o => ({
      text: o.text.replace(/\\u00a0/g, ' '), width: canvas.measureText(o.text).width}));
  const rect = e => { const r = e.getBoundingClientRect(); return {left: r.left, right: r.right, top: r.top,
                                                                   bottom: r.bottom, width: r.width}; };
  // the header's column titles, each as laid out (a Range over its characters)
  const text = head.firstChild;
  const titles = {};
  for (const name of %s) {
    const found = new RegExp(`(^| )${name}( |$)`).exec(text.textContent);  // a whole title
    if (!found) { titles[name] = null; continue; }
    const at = found.index + found[1].length;
    const range = document.createRange();
    range.setStart(text, at); range.setEnd(text, at + name.length);
    titles[name] = rect(range);
  }
  const summary = box.querySelector('.gpucache-summary .gpucache-table-scroll'), table = summary.querySelector('table');
  return {
    summary: {scrollWidth: summary.scrollWidth, clientWidth: summary.clientWidth,
              overflowX: getComputedStyle(summary).overflowX, table: rect(table)},
    viewport: window.innerWidth,
    inspector: rect(box), inspectorScroll: [box.scrollWidth, box.clientWidth],
    scroller: rect(scroller), scrollerOverflowX: getComputedStyle(scroller).overflowX,
    scrollWidth: scroller.scrollWidth, clientWidth: scroller.clientWidth, scrollLeft: scroller.scrollLeft,
    head: rect(head), headScroll: [head.scrollWidth, head.clientWidth],
    select: rect(select), selectInner: inner, options, titles,
  };
}"""

SCROLL_ENTRIES = """(x) => { const s = document.querySelector('.gpucache-inspector .gpucache-entries-scroll');
  if (s) s.scrollLeft = x; return s ? s.scrollLeft : null; }"""

# Every text of the chart, as laid out: its string and bounding box in the page.
CHART_TEXTS = """(selector) => {
  const svg = document.querySelector(selector);
  const frame = svg.getBoundingClientRect();
  return {svg: {left: frame.left, right: frame.right, top: frame.top, bottom: frame.bottom},
          texts: Array.from(svg.querySelectorAll('text')).map(t => {
            const r = t.getBoundingClientRect();
            return {text: t.textContent, left: r.left, right: r.right, top: r.top, bottom: r.bottom};
          })};
}"""

WIDTHS = (1000, 1200, 1400)
ENTRY_COLUMNS = ("kernel", "signature", "config", "stage", "token", "tier", "size", "age", "why built")


def _numbers(rows):
    return {(r["stage"], r["tier"], r["field"]): r for r in rows}


def _overlaps(a, b, slack=0.5):
    return (min(a["right"], b["right"]) - max(a["left"], b["left"]) > slack
            and min(a["bottom"], b["bottom"]) - max(a["top"], b["top"]) > slack)


@contextlib.contextmanager
def _shot_on_failure(page, folder: Path, name: str):
    """On failure, a screenshot of the whole page (its path printed)."""
    try:
        yield
    except BaseException:
        failure = folder / f"failure-{name}.png"
        try:
            page.screenshot(path=str(failure), full_page=True, timeout=20_000)
            print(f"\nbrowser test failed; screenshot: {failure}")
        except Exception:
            pass
        raise


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab with notebooks/quickstart.ipynb run top to bottom, in Chromium;
    shared by this module's tests, in order (the last ones act on the cache)."""
    require_chromium()
    from playwright.sync_api import sync_playwright  # a test dependency: missing it fails

    workdir = tmp_path_factory.mktemp("jupyterlab")
    started = time.monotonic()
    server = JupyterLab(workdir)
    try:
        server.wait_ready()
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                                 args=CHROMIUM_ARGS, timeout=60_000)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 4200})
                page.set_default_timeout(PAGE_S * 1000)
                with _shot_on_failure(page, workdir, "quickstart"):
                    page.goto(f"{server.url}/lab/tree/{NOTEBOOK.name}?token={server.token}",
                              wait_until="domcontentloaded", timeout=PAGE_S * 1000)
                    page.wait_for_function(KERNEL_IDLE, timeout=PAGE_S * 1000, polling=250)
                    server.note_kernels()
                    page.evaluate(RUN_ALL)
                    page.wait_for_function(ALL_RAN, timeout=RUN_ALL_S * 1000, polling=500)
                    assert page.evaluate(ERRORS) == []
                    page.locator(".gpucache-inspector").first.wait_for(state="visible", timeout=ACTION_S * 1000)
                    page.wait_for_selector('.gpucache-inspector td[data-stage="cubin"][data-field="misses"]',
                                           timeout=ACTION_S * 1000)
                yield SimpleNamespace(server=server, browser=browser, page=page, folder=workdir)
            finally:
                browser.close()
    finally:
        server.stop()
    assert server.process.poll() is not None
    assert not any(_alive(pid) for pid in server.kernels)
    print(f"\nbrowser tests: {time.monotonic() - started:.1f} s; JupyterLab log: {server.log_path}")


def _at_width(page, width: int, height: int = 4200):
    page.set_viewport_size({"width": width, "height": height})
    page.wait_for_function(f"() => window.innerWidth === {width}", timeout=ACTION_S * 1000)
    page.evaluate(SETTLED)


STAGE_NAMES = ("typing", "llvm", "ptx", "cubin")


def _reported(row, stage):
    """A cell report's stage column as (hits, misses): hit, hit:disk, MISS, not needed."""
    shown = row[stage]
    return (int(shown.startswith("hit")), int(shown.startswith("MISS")))


AXPY = """
from numba import cuda

@cuda.jit("void(float32[:], float32, float32[:], float32[:])")
def axpy(r, a, x, y):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = a * x[i] + y[i]
"""

# The same measures in the static snapshot: its box and its summary table.
SNAPSHOT_NUMBERS = INSPECTOR_NUMBERS.replace(".gpucache-inspector .gpucache-summary td",
                                             ".gpucache-static .gpucache-summary-table td")
SNAPSHOT_CONTRAST = CONTRAST.replace(".gpucache-inspector", ".gpucache-static").replace(
    ".gpucache-summary td", ".gpucache-summary-table td")


@pytest.mark.timeout(180)
def test_the_inspectors_snapshot_in_chromium(ip, tmp_path):
    """The quick smoke test (no JupyterLab): three %%gpukernel cells, then the
    inspector's static snapshot (its HTML where widgets do not run) drawn by
    Chromium: the summary shows the cache's numbers, the chart has a bar per
    hit and miss and no two of its texts overlap, the text is readable."""
    require_chromium()

    import gpucache_ext

    for line in ("--sm 80", "--sm 80", "--sm 86"):  # all miss; all hit; ptx and cubin miss
        cell(ip, line, AXPY, quiet=True, store_history=True)
    inspector = gpucache_ext.inspector()
    stats = inspector.cache.stats()
    with _snapshot_page(inspector.snapshot().html(), tmp_path, "snapshot") as (page, errors):
        shown = _numbers(page.evaluate(SNAPSHOT_NUMBERS))
        assert {s: shown[(s, None, "misses")]["text"] for s in STAGE_NAMES} == \
            {"typing": "1", "llvm": "1", "ptx": "2", "cubin": "2"}
        for stage in STAGE_NAMES:
            for field in ("hits", "misses", "entries"):
                assert shown[(stage, None, field)]["value"] == str(getattr(stats[stage], field)), (stage, field)
        chart = "svg.gpucache-chart"
        assert page.locator(f"{chart} rect.gpucache-bar-miss").count() >= 4
        assert page.locator(f"{chart} rect.gpucache-bar-hit").count() >= 4
        found = page.evaluate(CHART_TEXTS, chart)
        assert {"typing", "llvm", "ptx", "cubin"} <= {t["text"] for t in found["texts"]}
        _assert_no_overlap(found, "the snapshot's chart")
        readable = page.evaluate(SNAPSHOT_CONTRAST)
        assert readable["ratio"] >= 4.5, readable
        assert errors == []


@contextlib.contextmanager
def _snapshot_page(snapshot: str, folder: Path, name: str):
    """(page, its script errors): the inspector's static `snapshot` drawn by
    Chromium at 1200 px, settled; a screenshot in `folder` where the block fails."""
    from playwright.sync_api import sync_playwright  # a test dependency: missing it fails

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS,
                                             timeout=60_000)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 1600})
            errors = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            with _shot_on_failure(page, folder, name):
                page.set_content(f"<!doctype html><html><head><meta charset='utf-8'></head><body>{snapshot}"
                                 "</body></html>", timeout=ACTION_S * 1000)
                page.evaluate(SETTLED)
                yield page, errors
        finally:
            browser.close()


MLIR_AXPY = """
from numba_cuda_mlir import cuda

@cuda.jit
def axpy(r, a, x, y):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = a * x[i] + y[i]
"""


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_inspectors_snapshot_of_numba_cuda_mlir_entries_in_chromium(ip, tmp_path):
    """numba-cuda-mlir's cells drawn by Chromium: the summary's mlir row shows
    the cache's numbers (typing, mlir, ptx, cubin), the chart labels the mlir
    stage, nothing overlaps, and the text is readable.  (Before the tests of
    the `lab` fixture, which holds Playwright's sync API open for the module.)"""
    pytest.importorskip("numba_cuda_mlir", reason="numba-cuda-mlir is not installed (gpucache_ext[mlir])")
    require_chromium()

    import gpucache_ext

    sig = "--sig 'void(float32[:], float32, float32[:], float32[:])'"
    for line in ("--sm 86", "--sm 86", "--sm 86 --opt 0"):  # all miss; all hit; mlir, ptx and cubin miss
        cell(ip, f"{line} {sig}", MLIR_AXPY, quiet=True, store_history=True)
    inspector = gpucache_ext.inspector()
    stats = inspector.cache.stats()
    stages = ("typing", "mlir", "ptx", "cubin")
    with _snapshot_page(inspector.snapshot().html(), tmp_path, "mlir-snapshot") as (page, errors):
        shown = _numbers(page.evaluate(SNAPSHOT_NUMBERS))
        assert {s: shown[(s, None, "misses")]["text"] for s in stages} == \
            {"typing": "1", "mlir": "2", "ptx": "2", "cubin": "2"}
        for stage in stages:
            for field in ("hits", "misses", "entries"):
                assert shown[(stage, None, field)]["value"] == str(getattr(stats[stage], field)), (stage, field)
        found = page.evaluate(CHART_TEXTS, "svg.gpucache-chart")
        assert set(stages) <= {t["text"] for t in found["texts"]}
        _assert_no_overlap(found, "the snapshot's chart")
        assert page.evaluate(SNAPSHOT_CONTRAST)["ratio"] >= 4.5
        assert errors == []


@pytest.mark.slow
def test_quickstart_inspector_at_1200_px_screenshot_with_checked_numbers(lab, capsys):
    """docs/inspector-1200.png and docs/inspector-1200.md: the inspector after the
    quickstart at a 1200 px wide viewport, its numbers checked against what the
    quickstart's cells reported.  Both are written to the test's folder (paths
    printed) and, with GPUCACHE_UPDATE_DOCS=1, to docs/ as well.

    The check: each %%gpukernel cell's report (per kernel row, per stage: hit or
    MISS) equals the inspector chart's column for that cell; a cell without a
    report that used the cache (the launch, where launching looks the kernel up)
    may only hit; and the summary table's hits and misses per stage are the sum
    of those, its entries one per miss (nothing was evicted)."""
    page, folder = lab.page, lab.folder
    with _shot_on_failure(page, folder, "screenshot"):
        _at_width(page, 1200)
        cells = page.evaluate(CELL_REPORTS)
        points = page.evaluate(CHART_POINTS)
        shown = _numbers(page.evaluate(INSPECTOR_NUMBERS))
        reports = [cell for cell in cells if cell["rows"]]
        assert [c["source"].splitlines()[0] for c in reports] == \
            ["%%gpukernel --sm 80", "%%gpukernel --sm 80", "%%gpukernel --sm 86 --max-registers 32"]
        totals = {stage: [0, 0] for stage in STAGE_NAMES}
        others = []
        for cell in cells:
            column = points.get(f"[{cell['count']}]")
            if cell["rows"]:
                reported = {s: [sum(_reported(row, s)[k] for row in cell["rows"]) for k in (0, 1)]
                            for s in STAGE_NAMES}
                assert column == reported, (cell["source"], column, reported)
            elif column is not None:
                assert all(misses == 0 for _, misses in column.values()), (cell["source"], column)
                others.append((cell, column))
                reported = column
            else:
                continue
            for stage in STAGE_NAMES:
                totals[stage][0] += reported[stage][0]
                totals[stage][1] += reported[stage][1]
        assert set(points) <= {f"[{c['count']}]" for c in cells}, points  # every column is a cell's
        lines = []
        for stage in STAGE_NAMES:
            hits, misses, entries = (int(shown[(stage, None, f)]["value"]) for f in ("hits", "misses", "entries"))
            assert [hits, misses] == totals[stage], (stage, totals[stage], hits, misses)
            assert entries == totals[stage][1], (stage, entries, totals[stage])
            # what people read is the value
            assert [shown[(stage, None, f)]["text"] for f in ("hits", "misses", "entries")] == \
                [str(hits), str(misses), str(entries)]
            lines.append(f"| {stage} | {totals[stage][0]} | {hits} | {totals[stage][1]} | {misses} | {entries} |")

        inspector = page.locator(".gpucache-inspector").first
        inspector.scroll_into_view_if_needed()
        page.evaluate(SETTLED)
        top = inspector.bounding_box()
        status = page.locator(".gpucache-inspector .gpucache-status").first.bounding_box()
        clip = {"x": top["x"], "y": top["y"], "width": top["width"],
                "height": status["y"] + status["height"] - top["y"] + 8}
        shot = folder / "inspector-1200.png"
        page.screenshot(path=str(shot), clip=clip, animations="disabled", caret="hide",
                        timeout=ACTION_S * 1000)
        size = shot.stat().st_size
        assert size < 300 * 1024, size

    version, agent = page.evaluate("() => [window.jupyterapp.version, navigator.userAgent]")
    chrome = re.search(r"(?:Headless)?Chrome/[0-9.]+", agent).group(0)
    report = [
        "# The inspector at 1200 px, after the quickstart",
        "",
        "Written by `tests/test_browser.py::test_quickstart_inspector_at_1200_px_screenshot_with_checked_numbers`"
        f" ({time.strftime('%Y-%m-%d %H:%M %Z')}): `notebooks/quickstart.ipynb` run top to bottom in"
        f" JupyterLab {version} ({chrome}), viewport 1200 px wide. `inspector-1200.png` is the"
        f" inspector from its title down to its action buttons ({int(clip['width'])} x {int(clip['height'])}"
        f" px, {size // 1024} KiB). Headless Chromium draws no scrollbars: the entries list scrolls"
        " sideways to its tier, size, age and why-built columns.",
        "",
        "What the quickstart's `%%gpukernel` cells reported (their cell reports, per stage), each equal to"
        " the inspector chart's column for that cell:",
        "",
        "| cell | magic | kernel | config | typing | llvm | ptx | cubin |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for cell in reports:
        for row in cell["rows"]:
            report.append(f"| [{cell['count']}] | `{cell['source'].splitlines()[0]}` | {row['kernel']} | "
                          f"{row['config']} | " + " | ".join(row[s] for s in STAGE_NAMES) + " |")
    if others:
        report += ["", "Cells without a report that used the cache (their chart column, hits/misses per stage):",
                   ""]
        for cell, column in others:
            first = cell["source"].splitlines()[0]
            report.append(f"- [{cell['count']}] `{first}`: "
                          + ", ".join(f"{s} {column[s][0]}/{column[s][1]}" for s in STAGE_NAMES))
    report += [
        "",
        "The inspector's summary table as shown (each cell's `data-value`, equal to its text), against"
        " the sum of the above; entries are one per miss (nothing was evicted):",
        "",
        "| stage | hits (cells) | hits shown | misses (cells) | misses shown | entries shown |",
        "|---|---|---|---|---|---|",
        *lines,
        "",
    ]
    text = "\n".join(report)
    (folder / "inspector-1200.md").write_text(text)
    if os.environ.get("GPUCACHE_UPDATE_DOCS"):
        docs = ROOT / "docs"
        shutil.copy(shot, docs / "inspector-1200.png")
        (docs / "inspector-1200.md").write_text(text)
    with capsys.disabled():
        print(f"\n{text}\nscreenshot: {shot}")


@pytest.mark.slow
def test_inspector_shows_the_kernels_numbers(lab):
    page = lab.page
    with _shot_on_failure(page, lab.folder, "numbers"):
        _at_width(page, 1400)
        shown = _numbers(page.evaluate(INSPECTOR_NUMBERS))
        reported = page.evaluate(STATS_TABLE)  # what `%gpucache stats` printed
        assert reported is not None, "the %gpucache stats table is not on the page"
        for stage in ("typing", "llvm", "ptx", "cubin"):
            for field in ("hits", "misses", "entries", "bytes", "compile_seconds"):
                cell = shown[(stage, None, field)]
                assert cell["value"] == reported[stage][field]["value"], (stage, field)
                # the numbers people read, in the same units (KiB, ms)
                assert cell["text"] == reported[stage][field]["text"], (stage, field)
            assert (stage, "memory", "hits") in shown
        # the notebook's cells: one first compile, sm 80 -> 86 misses ptx and cubin again
        assert {s: shown[(s, None, "misses")]["text"] for s in ("typing", "llvm", "ptx", "cubin")} \
            == {"typing": "1", "llvm": "1", "ptx": "2", "cubin": "2"}
        assert page.locator(".gpucache-inspector svg.gpucache-chart rect.gpucache-bar-miss").count() >= 4
        assert page.locator(".gpucache-inspector svg.gpucache-chart rect.gpucache-bar-hit").count() >= 4

        # the entries, and one entry's explanation
        options = page.locator(".gpucache-inspector .gpucache-entries select option")
        assert options.count() == 6
        labels = [t.replace("\u00a0", " ") for t in options.all_inner_texts()]
        # the ptx entry built for sm_86: stage column, then its token
        index = next(i for i, t in enumerate(labels)
                     if re.search(r" ptx +[0-9a-f]{8} ", t) and "sm_86" in t)
        page.locator(".gpucache-inspector .gpucache-entries select").select_option(index=index)
        view = page.locator(".gpucache-inspector .gpucache-entry-view")
        view.locator('.gpucache-entry[data-stage="ptx"]').wait_for(timeout=ACTION_S * 1000)
        view.get_by_text("sm 80 -> 86").first.wait_for(timeout=ACTION_S * 1000)
        assert view.locator("table.gpucache-diff tr[data-component='sm']").count() == 1
        light = page.evaluate(CONTRAST)
        assert light["light"] == "true" and light["ratio"] >= 4.5, light
        page.locator(".gpucache-inspector").first.screenshot(path=str(lab.folder / "inspector.png"),
                                                             timeout=ACTION_S * 1000)


# The inspector's elements that reach past its right edge outside any box that scrolls.
STICKING_OUT = """() => {
  const box = document.querySelector('.gpucache-inspector'), right = box.getBoundingClientRect().right;
  const clipped = el => {
    for (let p = el.parentElement; p && p !== box; p = p.parentElement)
      if (getComputedStyle(p).overflowX !== 'visible') return true;
    return false;
  };
  return [...box.querySelectorAll('*')].filter(el => {
    const r = el.getBoundingClientRect();
    return r.width > 0 && r.right > right + 1 && !clipped(el);
  }).slice(0, 8).map(el => [el.tagName, el.className, (el.textContent || '').slice(0, 40)]);
}"""


@pytest.mark.slow
def test_entries_list_columns_all_reachable_from_1000_to_1400_px(lab):
    page = lab.page
    for width in WIDTHS:
        with _shot_on_failure(page, lab.folder, f"entries-{width}"):
            _at_width(page, width)
            page.evaluate(SCROLL_ENTRIES, 0)
            before = page.evaluate(ENTRIES_LAYOUT % json.dumps(ENTRY_COLUMNS))
            page.screenshot(path=str(lab.folder / f"entries-{width}.png"), timeout=ACTION_S * 1000)
            # the inspector fits the page; nothing overflows it unseen
            assert before["inspector"]["right"] <= width, before["inspector"]
            # (on failure: what sticks out of it outside any box that scrolls)
            offenders = page.evaluate(STICKING_OUT)
            scroll = before["inspectorScroll"]
            assert scroll[0] <= scroll[1] + 1, (scroll, offenders)
            # the summary table: all of it in view, or in a box that scrolls
            summary = before["summary"]
            if summary["scrollWidth"] > summary["clientWidth"] + 1:
                assert summary["overflowX"] in ("auto", "scroll"), summary
            # the listbox is wide enough for every row: nothing is cut off inside it
            assert before["options"] and all(o["width"] <= before["selectInner"] + 1 for o in before["options"]), \
                (width, before["selectInner"], max(o["width"] for o in before["options"]))
            # the header shows every column title (nothing clipped inside it)
            assert before["headScroll"][0] <= before["headScroll"][1] + 1, before["headScroll"]
            assert all(before["titles"][name] for name in ENTRY_COLUMNS), before["titles"]
            # where the list is wider than its box, the box scrolls; scrolled to the end,
            # the last column (header and rows) is in view
            if before["scrollWidth"] > before["clientWidth"] + 1:
                assert before["scrollerOverflowX"] in ("auto", "scroll"), before["scrollerOverflowX"]
            page.evaluate(SCROLL_ENTRIES, 10 ** 6)
            after = page.evaluate(ENTRIES_LAYOUT % json.dumps(ENTRY_COLUMNS))
            view = after["scroller"]
            for name in ENTRY_COLUMNS[-1:]:
                title = after["titles"][name]
                assert view["left"] - 1 <= title["left"] and title["right"] <= view["right"] + 1, \
                    (width, name, title, view)
            assert after["select"]["right"] <= view["right"] + 1, (width, after["select"], view)
            page.evaluate(SCROLL_ENTRIES, 0)


# -- the cell reports and the entry view's listings at narrow widths ---------------------

# Every %%gpukernel report table, as laid out, in its frame (`frame`: the closest ancestor that
# matches, the output area in JupyterLab): per cell its column, text and which line each of its
# characters is on (0, 1, ...; -1 for white space), so that a type, a config field or a time that
# was broken over lines shows whatever the markup.
REPORT_LAYOUT = """(frame) => {
  const rect = e => { const r = e.getBoundingClientRect();
                      return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, width: r.width}; };
  const lines = (cell) => {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    const tops = [], chars = [];
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (let i = 0; i < node.data.length; i++) {
        if (/\\s/.test(node.data[i])) { chars.push(null); continue; }
        const range = document.createRange();
        range.setStart(node, i); range.setEnd(node, i + 1);
        const r = range.getBoundingClientRect();
        chars.push(r.width > 0 ? r.top : null);
        if (r.width > 0) tops.push(r.top);
      }
    }
    const seen = [...new Set(tops.map(Math.round))].sort((a, b) => a - b)
        .filter((top, i, all) => i === 0 || top - all[i - 1] > 4);  // one top per line
    return chars.map(top => top === null ? -1 : seen.filter(t => t <= Math.round(top) + 4).length - 1);
  };
  return [...document.querySelectorAll('table.gpucache-report')].map(table => {
    const out = table.closest(frame);
    const head = [...table.querySelectorAll('thead th')].map(th => th.textContent.trim());
    return {
      viewport: window.innerWidth, frame: rect(out), frameScroll: [out.scrollWidth, out.clientWidth],
      table: rect(table), display: getComputedStyle(table).display,
      rows: [...table.querySelectorAll('tbody tr')].map(tr => [...tr.children].map((td, i) => ({
        column: head[i], text: td.textContent, lines: lines(td), rect: rect(td),
        textAlign: getComputedStyle(td).textAlign}))),
    };
  });
}"""

# JupyterLab's file browser (the left sidebar): is it shown?
FILE_BROWSER_OPEN = """() => { const fb = document.getElementById('filebrowser');
  return !window.jupyterapp.shell.leftCollapsed && !!fb && fb.offsetWidth > 100; }"""
WHOLE = ("kernel", "typing", "llvm", "ptx", "cubin", "fatbin", "time", "saved", "audit")


def _pieces(text, sep):
    """`text` split at `sep` outside brackets: a signature's types, a config's fields."""
    return [p for p in re.split(re.escape(sep) + r"(?![^\[(]*[\])])", text) if p]


def _lines_of(td, piece):
    """How many lines each occurrence of `piece` in the cell's text is laid out on."""
    counts, at = [], td["text"].find(piece)
    while at >= 0:
        counts.append(len({line for line in td["lines"][at:at + len(piece)] if line >= 0}))
        at = td["text"].find(piece, at + 1)
    return counts


def _check_reports(tables, what, expect_types=None):
    """Each report table inside its frame (nothing to scroll to), no type, config
    field, stage, time or saved figure broken over lines, "why" left-aligned."""
    assert tables, what
    for table in tables:
        frame = table["frame"]
        assert frame["right"] <= table["viewport"] + 1, (what, "the frame is off-screen", frame)
        assert table["table"]["right"] <= frame["right"] + 1, (what, table["table"], frame)
        assert table["frameScroll"][0] <= table["frameScroll"][1] + 1, (what, table["frameScroll"])
        for row in table["rows"]:
            assert row, what
            for td in row:
                column, text = td["column"], td["text"].strip()
                box = td["rect"]
                if not box["width"]:  # an empty cell, left out
                    assert not text, (what, column, text)
                    continue
                assert frame["left"] - 1 <= box["left"] and box["right"] <= frame["right"] + 1, \
                    (what, column, text, box, frame)
                if column == "signature":
                    inner = text[1:-1] if text.startswith("(") else text
                    types = _pieces(inner, ", ")
                    if expect_types is not None:
                        assert types == expect_types, (what, types)
                    for piece in types:
                        assert set(_lines_of(td, piece)) == {1}, (what, "a type broken over lines", piece, td)
                elif column == "config":
                    for piece in _pieces(text, " "):
                        assert set(_lines_of(td, piece)) == {1}, (what, "a config field broken", piece, td)
                elif column in WHOLE and text:
                    assert set(_lines_of(td, text)) == {1}, (what, f"a {column} cell broken over lines", td)
                elif column == "why":
                    assert td["textAlign"] in ("left", "start"), (what, td["textAlign"], text)


def _report_clip(page):
    """The part of the page from the first report's cell to the last's, the whole width."""
    tables = page.locator("table.gpucache-report")
    tables.first.scroll_into_view_if_needed()
    page.evaluate(SETTLED)
    top = tables.first.locator("xpath=ancestor::div[contains(@class, 'jp-CodeCell')][1]").bounding_box()
    bottom = tables.last.bounding_box()
    return {"x": 0, "y": max(0, top["y"]), "width": page.viewport_size["width"],
            "height": bottom["y"] + bottom["height"] + 12 - max(0, top["y"])}


SHOTS = Path("/tmp/layout-shots")


def _share(shot: Path):
    """A copy of `shot` in /tmp/layout-shots, to attach to a note."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, SHOTS / shot.name)


@contextlib.contextmanager
def _file_browser_open(page):
    """JupyterLab's file browser open for the block (the narrow output a
    user with it open reads), closed again after where it was opened here."""
    opened = not page.evaluate(FILE_BROWSER_OPEN)
    if opened:
        page.evaluate("() => { window.jupyterapp.commands.execute('filebrowser:toggle-main'); return true; }")
    try:
        page.wait_for_function(FILE_BROWSER_OPEN, timeout=ACTION_S * 1000)
        yield
    finally:
        if opened:
            page.evaluate("() => { window.jupyterapp.commands.execute('filebrowser:toggle-main'); return true; }")


@pytest.mark.slow
def test_cell_reports_fit_their_output_with_the_file_browser_open(lab):
    """The quickstart's cell reports at 900, 1000 and 1400 px with JupyterLab's
    file browser open: each table inside its output area (no column off-screen
    or to scroll to), no type, config field, stage, time or saved figure broken
    over lines, the why column left-aligned.  Screenshots: report-WIDTH.png."""
    page = lab.page
    with _file_browser_open(page):
        for width in (900, 1000, 1400):
            with _shot_on_failure(page, lab.folder, f"report-{width}"):
                _at_width(page, width)
                assert page.evaluate(FILE_BROWSER_OPEN)
                tables = page.evaluate(REPORT_LAYOUT, ".jp-OutputArea-output")
                assert len(tables) == 3, len(tables)  # the quickstart's three %%gpukernel cells
                shot = lab.folder / f"report-{width}.png"
                page.screenshot(path=str(shot), clip=_report_clip(page), timeout=ACTION_S * 1000)
                if width == 1000:
                    _share(shot)
                _check_reports(tables, f"the quickstart at {width} px")
                if width == 1400:  # room for every column: tables with their headers, not lines of cells
                    assert [t["display"] for t in tables] == ["table"] * 3, tables


STENCIL = """
def stencil5(out, a, b, c, d):
    i, j = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = a[i, j] * b[i, j] + c[i, j] - d[i, j]
"""
STENCIL_SIG = "void(float32[:, :], float32[:, :], float32[:, :], float32[:, :], float32[:, :])"


@pytest.mark.slow
def test_a_long_signature_report_fits_600_and_900_px(lab):
    """A report of a kernel with five 2-D array arguments and a config of
    several fields, on a page of its own in a 600 and a 900 px wide box: the
    table fits its box and no type or field is broken over lines."""
    from gpucache_ext import CompileConfig, KernelCache
    from gpucache_ext.ipython.report import CellReport

    from .helpers import reading

    _, stencil = reading(STENCIL, "stencil5")
    cache = KernelCache()
    config = CompileConfig(sm=86, fastmath=True, max_registers=32, launch_bounds=(128, 2))
    results = [cache.compile(stencil, STENCIL_SIG, config),
               cache.compile(stencil, STENCIL_SIG, CompileConfig(sm=80, fastmath=True, max_registers=32,
                                                                 launch_bounds=(128, 2)))]
    assert results[0].config.summary() == "sm_86 fastmath=True max_registers=32 launch_bounds=(128, 2)"
    report = CellReport(results)._repr_html_()
    page = lab.browser.new_page(viewport={"width": 1200, "height": 900})  # (the module's browser)
    try:
        for frame in (600, 900):
            with _shot_on_failure(page, lab.folder, f"long-report-{frame}"):
                page.set_content(f"<!doctype html><html><head><meta charset='utf-8'></head><body>"
                                 f"<div class='frame' style='width:{frame}px;border:1px dashed #999'>{report}"
                                 "</div></body></html>", timeout=ACTION_S * 1000)
                page.evaluate(SETTLED)
                tables = page.evaluate(REPORT_LAYOUT, ".frame")
                assert len(tables) == 1 and len(tables[0]["rows"]) == 2
                page.screenshot(path=str(lab.folder / f"long-report-{frame}.png"), full_page=True)
                _check_reports(tables, f"a long signature in {frame} px", expect_types=["float32[:, :]"] * 5)
                config = next(c for c in tables[0]["rows"][0] if c["column"] == "config")
                assert _pieces(config["text"].strip(), " ") == \
                    ["sm_86", "fastmath=True", "max_registers=32", "launch_bounds=(128, 2)"], config["text"]
    finally:
        page.close()


# The entry view, with its listings open: the inspector, its sections and every listing, as laid out.
ENTRY_VIEW_LAYOUT = """() => {
  const rect = e => { const r = e.getBoundingClientRect();
                      return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, width: r.width}; };
  const box = document.querySelector('.gpucache-inspector'), view = box.querySelector('.gpucache-entry-view');
  return {
    viewport: window.innerWidth, inspector: rect(box), inspectorScroll: [box.scrollWidth, box.clientWidth],
    view: rect(view),
    sections: [...view.querySelectorAll('.gpucache-entry-grid > section')].map(s => ({
      title: s.querySelector('h4').textContent, ...rect(s)})),
    details: [...view.querySelectorAll('details')].map(d => d.open),
    pres: [...view.querySelectorAll('pre')].map(p => ({
      label: p.getAttribute('aria-label'), ...rect(p), scrollWidth: p.scrollWidth, clientWidth: p.clientWidth,
      overflowX: getComputedStyle(p).overflowX,
      longest: Math.max(...p.textContent.split('\\n').map(line => line.length))})),
  };
}"""


@pytest.mark.slow
def test_sass_listing_scrolls_in_its_box_and_the_inspector_keeps_its_width(lab):
    """A cubin entry's artifacts (SASS, link log) opened in the inspector at
    1400 and 1000 px: long lines scroll inside each listing; the inspector,
    the entry view and its sections (Config, Why it was built, ...) keep within
    the page.  Screenshot: inspector-sass-1400.png."""
    page = lab.page
    _at_width(page, 1400)
    with _shot_on_failure(page, lab.folder, "sass"):
        options = page.locator(".gpucache-inspector .gpucache-entries select option")
        labels = [t.replace("\u00a0", " ") for t in options.all_inner_texts()]
        index = next(i for i, t in enumerate(labels) if re.search(r" cubin +[0-9a-f]{8} ", t))
        page.locator(".gpucache-inspector .gpucache-entries select").select_option(index=index)
        view = page.locator(".gpucache-inspector .gpucache-entry-view")
        view.locator('.gpucache-entry[data-stage="cubin"]').wait_for(timeout=ACTION_S * 1000)
        summaries = view.locator("details > summary")
        assert summaries.count() >= 2  # SASS and the link log
        for i in range(summaries.count()):
            summaries.nth(i).click()
        page.evaluate(SETTLED)
    for width in (1400, 1000):
        with _shot_on_failure(page, lab.folder, f"sass-{width}"):
            _at_width(page, width)
            found = page.evaluate(ENTRY_VIEW_LAYOUT)
            assert all(found["details"]), found["details"]
            inspector = found["inspector"]
            assert inspector["right"] <= width, (width, inspector)
            assert page.evaluate(STICKING_OUT) == []
            assert found["inspectorScroll"][0] <= found["inspectorScroll"][1] + 1, found["inspectorScroll"]
            assert found["view"]["right"] <= inspector["right"] + 1, (found["view"], inspector)
            titles = [s["title"] for s in found["sections"]]
            assert {"Why it was built", "Config", "Artifacts"} <= set(titles), titles
            for section in found["sections"]:
                assert inspector["left"] - 1 <= section["left"] and section["right"] <= inspector["right"] + 1, \
                    (width, section, inspector)
            for pre in found["pres"]:
                assert pre["right"] <= inspector["right"] + 1, (width, pre, inspector)
                assert pre["overflowX"] in ("auto", "scroll"), pre
            sass = next(p for p in found["pres"] if p["label"].startswith("SASS"))
            assert sass["longest"] * 6 > sass["clientWidth"], sass  # (lines longer than the box: it scrolls)
            assert sass["scrollWidth"] > sass["clientWidth"] + 1, sass
            if width == 1400:
                section = page.locator(".gpucache-inspector").first
                section.scroll_into_view_if_needed()
                shot = lab.folder / "inspector-sass-1400.png"
                section.screenshot(path=str(shot), animations="disabled", caret="hide", timeout=ACTION_S * 1000)
                _share(shot)


def _assert_no_overlap(found, what):
    texts, frame = found["texts"], found["svg"]
    assert texts, what
    for t in texts:  # inside the chart, not cut off at its edges
        assert frame["left"] - 0.5 <= t["left"] and t["right"] <= frame["right"] + 0.5, (what, t, frame)
        assert frame["top"] - 0.5 <= t["top"] and t["bottom"] <= frame["bottom"] + 0.5, (what, t, frame)
    for i, a in enumerate(texts):
        for b in texts[i + 1:]:
            assert not _overlaps(a, b), (what, a, b)


def _points(labels, seed=0):
    stages = ("typing", "llvm", "ptx", "cubin")
    return [{"label": label, "stages": {s: ((i + k + seed) % 3, (i * k + seed) % 2) for k, s in enumerate(stages)}}
            for i, label in enumerate(labels)]


@pytest.mark.slow
def test_chart_labels_do_not_overlap(lab):
    """The chart's texts (legend, stage names, cell labels) laid out in Chromium:
    no two boxes overlap and none leaves the chart, in the inspector after the
    quickstart at every width, and for few and many cells with long labels."""
    from gpucache_ext.views import STYLE, chart_svg

    page = lab.page
    for width in WIDTHS:
        with _shot_on_failure(page, lab.folder, f"chart-{width}"):
            _at_width(page, width)
            found = page.evaluate(CHART_TEXTS, ".gpucache-inspector svg.gpucache-chart")
            assert {"typing", "llvm", "ptx", "cubin"} <= {t["text"] for t in found["texts"]}
            _assert_no_overlap(found, f"quickstart at {width} px")

    cases = {
        "one cell": _points(["[1]"]),
        "few cells": _points(["earlier", "[3]", "[4]", "recompile", "[5]"]),
        "30 cells": _points([f"[{n}]" for n in range(1, 31)]),
        "30 cells, long labels": _points([f"[{n}]" for n in range(990, 1017)] + ["recompile", "[1017]", "recompile"]),
        "40 cells (30 shown)": _points([f"[{n}]" for n in range(100, 140)]),
    }
    other = lab.browser.new_page(viewport={"width": 1200, "height": 900})
    try:
        for name, points in cases.items():
            for frame in (900, 400):  # as drawn, and scaled down to a narrow output
                # in the static snapshot's box: the inspector's font (as in JupyterLab without its variables)
                other.set_content(f'<!doctype html><html><head>{STYLE}</head><body><div class="gpucache-static" '
                                  f'style="width:{frame}px">{chart_svg(points)}</div></body></html>')
                other.evaluate(SETTLED)
                found = other.evaluate(CHART_TEXTS, "svg.gpucache-chart")
                cells = {t["text"] for t in found["texts"]} & {p["label"] for p in points}
                shown = points[-30:]
                # the last cell is labelled, and more than one where there are more
                assert shown[-1]["label"] in cells and len(cells) >= min(2, len(shown)), (name, cells)
                _assert_no_overlap(found, f"{name} in {frame} px")
                other.screenshot(path=str(lab.folder / f"chart-{name.replace(' ', '-')}-{frame}.png"))
    finally:
        other.close()


def _row_key(label):
    """(stage, short token) of an entries list row."""
    return re.search(r" (typing|llvm|ptx|cubin) +([0-9a-f]{8}) ", label.replace("\u00a0", " ")).groups()


@pytest.mark.slow
def test_evict_in_the_browser_updates_at_once_and_keeps_the_place(lab):
    page = lab.page
    with _shot_on_failure(page, lab.folder, "evict"):
        _at_width(page, 1400)
        select = page.locator(".gpucache-inspector .gpucache-entries select")
        options = page.locator(".gpucache-inspector .gpucache-entries select option")
        assert options.count() == 6
        labels = [t.replace("\u00a0", " ") for t in options.all_inner_texts()]
        index = next(i for i, t in enumerate(labels)
                     if re.search(r" ptx +[0-9a-f]{8} ", t) and "sm_86" in t)
        assert index < len(labels) - 1
        token = re.search(r" ptx +([0-9a-f]{8}) ", labels[index]).group(1)
        select.select_option(index=index)
        page.locator(".gpucache-inspector .gpucache-entry-view "
                     f'.gpucache-entry[data-stage="ptx"][data-token^="{token}"]').wait_for(timeout=ACTION_S * 1000)
        page.locator(".gpucache-inspector button", has_text="Evict entry").click()
        page.wait_for_selector('.gpucache-inspector td[data-stage="ptx"][data-field="entries"]'
                               '[data-value="1"]', timeout=ACTION_S * 1000)
        assert options.count() == 5
        page.locator(".gpucache-inspector .gpucache-status").get_by_text(
            f"evicted ptx entry {token}").wait_for(timeout=ACTION_S * 1000)
        # the row that followed it is selected, in the list and in the entry view
        rows = [_row_key(t) for t in labels]
        assert [_row_key(t) for t in options.all_inner_texts()] == rows[:index] + rows[index + 1:]
        page.wait_for_function(f"() => document.querySelector('.gpucache-inspector .gpucache-entries select')"
                               f".selectedIndex === {index}", timeout=ACTION_S * 1000)
        stage, following = _row_key(labels[index + 1])
        page.locator(".gpucache-inspector .gpucache-entry-view "
                     f'.gpucache-entry[data-stage="{stage}"][data-token^="{following}"]').wait_for(
                         timeout=ACTION_S * 1000)


@pytest.mark.slow
def test_dark_theme_is_readable(lab):
    page = lab.page
    with _shot_on_failure(page, lab.folder, "dark"):
        # the dark theme: still readable, from JupyterLab's variables
        page.evaluate("() => { window.jupyterapp.commands.execute('apputils:change-theme', "
                      "{theme: 'JupyterLab Dark'}); return true; }")
        page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'",
                               timeout=ACTION_S * 1000)
        page.wait_for_function("() => { const b = document.querySelector('.gpucache-inspector'); "
                               "const m = getComputedStyle(b).backgroundColor.match(/\\d+/g); "
                               "return m && Number(m[0]) < 100; }", timeout=ACTION_S * 1000)
        dark = page.evaluate(CONTRAST)
        assert dark["bgLuminance"] < 0.1 and dark["ratio"] >= 4.5, dark
        dark_shot = lab.folder / "inspector-dark.png"
        page.locator(".gpucache-inspector").first.screenshot(path=str(dark_shot), timeout=ACTION_S * 1000)
        print(f"\nscreenshots: {lab.folder}")


@pytest.mark.slow
def test_per_architecture_resources_in_the_inspector_screenshot(lab, tmp_path, capsys):
    """docs/inspector-fatbin.png: the inspector's entry view of a 4-target
    kernel's fatbin (what it holds, each architecture's resources side by
    side) and its "resources across variants" section, as the widget renders
    them, drawn by Chromium; every figure shown is checked against the
    compile's own.  Written to docs/ with GPUCACHE_UPDATE_DOCS=1."""
    from gpucache_ext import CompileConfig, KernelCache, samples
    from gpucache_ext.widgets import Inspector
    from gpucache_ext.views import STYLE

    matmul = samples.load(samples.MATMUL)["matmul"]
    cache = KernelCache()
    built = cache.compile_fatbin(matmul, samples.MATMUL_SIG, CompileConfig(), sms=(75, 80, 86, 90))
    cache.compile(matmul, samples.MATMUL_SIG, CompileConfig(sm=86, max_registers=32))  # a tuning step
    inspector = Inspector(cache)
    inspector.select("fatbin", built.fatbin_stage.token)
    page_html = (f"<!doctype html><html><head><meta charset='utf-8'>{STYLE}</head><body>"
                 f"<div class='gpucache-inspector' style='width:1100px'>{inspector.entry_view.value}"
                 f"{inspector.variants_view.value}</div></body></html>")
    page = lab.browser.new_page(viewport={"width": 1200, "height": 3000})  # (the module's browser)
    try:
        page.set_content(page_html, timeout=ACTION_S * 1000)
        shown = page.evaluate("""() => [...document.querySelectorAll('.gpucache-resource-variants')].map(
            t => [...t.querySelectorAll('tbody tr')].map(r => [r.dataset.arch, r.dataset.token,
              Object.fromEntries([...r.querySelectorAll('td[data-resource]')].map(
                c => [c.dataset.resource, c.dataset.value]))]))""")
        fatbin_table, variants_table = shown
        expected = {f"sm_{sm}": res for sm, res in built.resources_by_arch.items()}
        assert [arch for arch, _, _ in fatbin_table] == list(expected)
        for arch, token, cells in fatbin_table:
            assert token == built.per_target[int(arch[3:])].stages["cubin"].token
            for name in ("registers", "shared_bytes", "local_bytes", "constant_bytes", "cubin_bytes"):
                assert int(cells[name]) == expected[arch][name], (arch, name)
            assert cells["spills"] == f"{expected[arch]['spill_stores']}/{expected[arch]['spill_loads']}"
        assert len(variants_table) == 5  # the four targets and the max_registers=32 variant
        moves = page.evaluate("() => [...document.querySelectorAll('.gpucache-moves li')].map(l => l.textContent)")
        assert any("max_registers" in move for move in moves), moves
        section = page.locator(".gpucache-inspector").first
        shot = tmp_path / "inspector-fatbin.png"
        section.screenshot(path=str(shot), animations="disabled", caret="hide", timeout=ACTION_S * 1000)
        assert shot.stat().st_size < 600 * 1024
    finally:
        page.close()
    _publish(shot, capsys, f"moves: {moves}")


def _publish(shot: Path, capsys, note: str = "") -> None:
    """Print where a screenshot is; with GPUCACHE_UPDATE_DOCS=1, copy it to docs/ under its name."""
    if os.environ.get("GPUCACHE_UPDATE_DOCS"):
        shutil.copy(shot, ROOT / "docs" / shot.name)
    with capsys.disabled():
        print(f"\nscreenshot: {shot}" + (f"\n{note}" if note else ""))


@pytest.fixture(scope="module")
def tuning(lab):
    """notebooks/tuning.ipynb run top to bottom in JupyterLab, in a page and a
    workspace of its own, its inspector showing a cubin of the sweep (sm_86):
    the 18 variants' resources and occupancy under "resources across variants"."""
    shutil.copy(ROOT / "notebooks" / "tuning.ipynb", lab.server.root / "tuning.ipynb")
    page = lab.browser.new_page(viewport={"width": 1400, "height": 3000})
    page.set_default_timeout(PAGE_S * 1000)
    try:
        with _shot_on_failure(page, lab.folder, "tuning"):
            # (a workspace of its own, empty: the quickstart's tab is not opened again)
            page.goto(f"{lab.server.url}/lab/workspaces/tuning/tree/tuning.ipynb?reset&token={lab.server.token}",
                      wait_until="domcontentloaded", timeout=PAGE_S * 1000)
            page.wait_for_function(KERNEL_IDLE, timeout=PAGE_S * 1000, polling=250)
            lab.server.note_kernels()
            # the light theme, as in the docs' other screenshots (the dark theme's test may have run before)
            page.evaluate("() => { window.jupyterapp.commands.execute('apputils:change-theme', "
                          "{theme: 'JupyterLab Light'}); return true; }")
            page.wait_for_function("() => document.body.dataset.jpThemeLight === 'true'", timeout=ACTION_S * 1000)
            page.evaluate(RUN_ALL)
            page.wait_for_function(ALL_RAN, timeout=RUN_ALL_S * 1000, polling=500)
            assert page.evaluate(ERRORS) == []
            inspector = page.locator(".gpucache-inspector").first
            inspector.wait_for(state="visible", timeout=ACTION_S * 1000)
            select = inspector.locator(".gpucache-entries select")
            labels = [t.replace("\u00a0", " ") for t in select.locator("option").all_inner_texts()]
            index = next(i for i, text in enumerate(labels) if " cubin " in text and "sm_86" in text)
            select.select_option(index=index)
            inspector.locator(".gpucache-variants table.gpucache-resource-variants").wait_for(timeout=ACTION_S * 1000)
        yield SimpleNamespace(page=page, inspector=inspector)
    finally:
        page.close()


@pytest.mark.slow
def test_the_tuning_notebooks_variants_in_the_inspector_screenshot(lab, tuning, tmp_path, capsys):
    """notebooks/tuning.ipynb in JupyterLab: its inspector, a cubin of the
    sweep selected, shows the variants with their occupancy at the common
    block sizes, one best per architecture; docs/inspector-variants.png
    (written with GPUCACHE_UPDATE_DOCS=1)."""
    page = tuning.page
    with _shot_on_failure(page, lab.folder, "tuning-variants"):
        _at_width(page, 1400, height=3000)
        section = tuning.inspector.locator(".gpucache-variants")
        rows = page.evaluate("""() => [...document.querySelectorAll(
            '.gpucache-inspector .gpucache-variants table.gpucache-resource-variants tbody tr')].map(r => ({
              arch: r.dataset.arch, best: r.querySelector('td.gpucache-best').dataset.best === 'true',
              occupancy: [...r.querySelectorAll('td[data-block]')].map(c => [Number(c.dataset.block),
                                                                           Number(c.dataset.occupancy)])}))""")
        # the version selected: its variants on each architecture
        assert {row["arch"] for row in rows} == {"sm_80", "sm_86", "sm_90"} and len(rows) == 18, rows
        assert sum(row["best"] for row in rows) == 3
        assert all([block for block, _ in row["occupancy"]] == [128, 256, 512, 1024] for row in rows)
        assert all(0 < share <= 1 for row in rows for _, share in row["occupancy"])
        shot = tmp_path / "inspector-variants.png"
        section.screenshot(path=str(shot), animations="disabled", caret="hide", timeout=ACTION_S * 1000)
    _publish(shot, capsys)


# The inspector's prose and its variants table's key columns, as laid out (issue 35 item 7).
# Prose: every paragraph, caption, list item and heading, the box that scrolls it sideways if
# any (up to the inspector), its own overflow.  The variants table: its key header cells (best,
# arch, config, the occupancy per block size: "128" or "128 threads"), the first row's occupancy
# cells, and the part of the page they can be seen in without scrolling (the box that scrolls
# the table, within the inspector, at its scrolled-to-the-left place).
TEXT_LAYOUT = """() => {
  const rect = e => { const r = e.getBoundingClientRect();
                      return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, width: r.width}; };
  const box = document.querySelector('.gpucache-inspector'), frame = rect(box);
  const scroller = el => {
    for (let p = el.parentElement; p && p !== box; p = p.parentElement)
      if (['auto', 'scroll'].includes(getComputedStyle(p).overflowX)) return p;
    return null;
  };
  const prose = [...box.querySelectorAll('p, caption, li, h3, h4')].filter(e => rect(e).width > 0).map(e => {
    const s = scroller(e);
    return {text: e.textContent.trim().slice(0, 60), scrollWidth: e.scrollWidth, clientWidth: e.clientWidth,
            ...rect(e), scrolledBy: s && (s.className || s.tagName)};
  });
  const table = box.querySelector('.gpucache-variants table.gpucache-resource-variants');
  const around = scroller(table);
  const seen = around ? rect(around) : frame;
  const visible = {left: Math.max(seen.left, frame.left), right: Math.min(seen.right, frame.right)};
  const key = /^(best|arch|config|\\d+( threads)?)$/;
  const heads = [...table.querySelectorAll('thead th')].filter(th => key.test(th.textContent.trim()))
      .map(th => ({text: th.textContent.trim(), ...rect(th)}));
  const cells = [...table.querySelectorAll('tbody tr:first-child td[data-block]')].map(td => ({
      text: td.textContent.trim(), ...rect(td)}));
  const label = box.querySelector('.gpucache-compare-with label');
  const select = box.querySelector('.gpucache-compare-with select');
  const output = box.closest('.jp-OutputArea-output');
  return {viewport: window.innerWidth, output: output && rect(output), inspector: frame, prose, heads, cells,
          visible, scrollLeft: around ? around.scrollLeft : 0,
          label: label && {text: label.textContent, scrollWidth: label.scrollWidth, clientWidth: label.clientWidth,
                           ...rect(label), selectLeft: rect(select).left}};
}"""


@pytest.mark.slow
def test_inspector_layout_in_1000_and_1400_px_windows_prose_wraps_and_occupancy_shows(lab, tuning):
    """Issue 35 item 7: the tuning notebook's inspector (18 variants, a cubin
    compared with another) in JupyterLab with the file browser open, in 1000
    and 1400 px windows (outputs of about 570 and 970 px): no paragraph,
    caption, list item or heading is cut off or in a box that scrolls
    sideways; the variants table's best, arch, config and occupancy columns
    are in view without scrolling (what is wider scrolls in the table's own
    box); "compare with" reads whole.  Screenshots (written to docs/ with
    GPUCACHE_UPDATE_DOCS=1): layout-inspector-WIDTH.png (the inspector down to
    its entries) and layout-variants-WIDTH.png (resources across variants,
    down to "compare with")."""
    page, inspector = tuning.page, tuning.inspector
    with _file_browser_open(page):
        compare = inspector.locator(".gpucache-compare-with select")
        compare.select_option(index=1)  # (its two listings side by side, with their summary and caption)
        inspector.locator(".gpucache-compare-view .gpucache-compare-summary").wait_for(timeout=ACTION_S * 1000)
        problems = []  # (every width and check, so that one run shows all that is wrong)
        for width in (1000, 1400):
            with _shot_on_failure(page, lab.folder, f"layout-{width}"):
                _at_width(page, width, height=9000)  # (tall: the parts shot are in view)
                assert page.evaluate(FILE_BROWSER_OPEN)
                _layout_shots(page, inspector, lab.folder, width)
                found = page.evaluate(TEXT_LAYOUT)
                problems += _layout_problems(found, page.evaluate(STICKING_OUT))
        assert not problems, "\n".join(problems)


def _layout_shots(page, inspector, folder: Path, width: int) -> None:
    """layout-inspector-WIDTH.png (the inspector from its title down to its
    entries) and layout-variants-WIDTH.png (resources across variants down to
    "compare with"), in `folder`, /tmp/layout-shots and, with
    GPUCACHE_UPDATE_DOCS=1, docs/."""
    parts = {"inspector": (inspector, inspector.locator(".gpucache-entries-scroll")),
             "variants": (inspector.locator(".gpucache-variants"), inspector.locator(".gpucache-compare-with"))}
    for name, (first, last) in parts.items():
        first.evaluate("e => e.scrollIntoView({block: 'start'})")  # (the notebook scrolls, not the page)
        page.evaluate(SETTLED)
        frame, start, end = inspector.bounding_box(), first.bounding_box(), last.bounding_box()
        top = max(0, start["y"] - 4)
        shot = folder / f"layout-{name}-{width}.png"
        page.screenshot(path=str(shot), clip={"x": frame["x"], "y": top, "width": frame["width"],
                                              "height": end["y"] + end["height"] + 8 - top},
                        animations="disabled", caret="hide", timeout=ACTION_S * 1000)
        assert shot.stat().st_size < 400 * 1024, (shot, shot.stat().st_size)
        _share(shot)
        if os.environ.get("GPUCACHE_UPDATE_DOCS"):
            shutil.copy(shot, ROOT / "docs" / shot.name)


def _layout_problems(found, sticking_out) -> List[str]:
    """What `TEXT_LAYOUT` found wrong: prose cut off or in a box that scrolls
    sideways, a key column of the variants table out of view, "compare with"
    cut; [] where nothing is."""
    frame, width = found["inspector"], found["viewport"]
    what = f"{width} px window (output {found['output']['width']:.0f} px)"
    problems = []
    if frame["right"] > width + 1 or sticking_out:
        problems.append(f"{what}: the inspector is wider than the page: {frame} {sticking_out}")
    if len(found["prose"]) < 20:
        problems.append(f"{what}: too few texts found: {found['prose']}")
    for text in found["prose"]:
        if text["scrolledBy"] is not None:
            problems.append(f"{what}: prose in a box that scrolls sideways ({text['scrolledBy']}): {text['text']!r}")
        if text["scrollWidth"] > text["clientWidth"] + 1:
            problems.append(f"{what}: prose cut off inside its box: {text}")
        if text["left"] < frame["left"] - 1 or text["right"] > frame["right"] + 1:
            problems.append(f"{what}: prose past the inspector's edge ({frame['left']:.0f}-{frame['right']:.0f}): "
                            f"{text['left']:.0f}-{text['right']:.0f} {text['text']!r}")
    titles = [head["text"].split()[0] for head in found["heads"]]
    if titles != ["best", "arch", "config", "128", "256", "512", "1024"] or len(found["cells"]) != 4:
        problems.append(f"{what}: the variants table's key columns are not all there: {titles} {found['cells']}")
    visible = found["visible"]
    for box in found["heads"] + found["cells"]:
        if found["scrollLeft"] or box["left"] < visible["left"] - 1 or box["right"] > visible["right"] + 1:
            problems.append(f"{what}: a key column out of view ({visible['left']:.0f}-{visible['right']:.0f}, "
                            f"scrolled {found['scrollLeft']}): {box['text']!r} at {box['left']:.0f}-"
                            f"{box['right']:.0f}")
    label = found["label"]
    if (label is None or label["text"] != "compare with" or label["scrollWidth"] > label["clientWidth"] + 1
            or label["right"] > label["selectLeft"] + 1):
        problems.append(f"{what}: the compare label is cut: {label}")
    return problems
