"""The inspector after a tuning session in JupyterLab, as a screenshot.

The session users tried (issue 23): a device function and a kernel in
separate cells, `--max-registers 32` and `--sm 80,86,90`; then edits to the
device function and to a global it reads, the kernel cell run again with
`--fastmath`, launches in between, a kernel restart and the notebook run
again; then the inspector, with the kernel's cubin entry selected.  Cells are
edited in place (they keep their ids), as a user edits them.

    python scripts/session_screenshots.py OUT.png [--checkout PATH]

``--checkout``: the gpucache_ext the Jupyter kernel imports (default: this
one), e.g. a worktree of an earlier commit, to compare before and after.
Needs Chromium (/usr/bin/chromium) and playwright, as the browser tests do.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests import test_browser as lab  # noqa: E402  (the browser tests' JupyterLab and page scripts)

CELLS = [
    "%load_ext gpucache_ext\nimport numpy as np\nimport gpucache_ext",
    "ALPHA = 1.5",
    "%%gpukernel --sm 86\nfrom numba import cuda\n\n@cuda.jit(device=True)\ndef activate(x):\n"
    "    return max(x, 0.0) * ALPHA",
    "%%gpukernel --sm 80,86,90 --max-registers 32\n"
    "@cuda.jit(\"void(float32[:, :], float32[:, :], float32[:, :])\")\n"
    "def matmul_act(c, a, b):\n    i, j = cuda.grid(2)\n    if i < c.shape[0] and j < c.shape[1]:\n"
    "        total = 0.0\n        for k in range(a.shape[1]):\n            total += a[i, k] * b[k, j]\n"
    "        c[i, j] = activate(total)",
    "a = np.ones((16, 16), np.float32); b = np.ones((16, 16), np.float32); c = np.zeros((16, 16), np.float32)\n"
    "matmul_act[(1, 1), (16, 16)](c, a, b)\nc[0, :4]",
    "gpucache_ext.inspector()",
]
# (cell index, its new source): each edit, then the cells run after it
EDITS = [
    (2, CELLS[2].replace("max(x, 0.0) * ALPHA", "max(x, 0.0) * ALPHA + 1.0"), (2, 4)),
    (1, "ALPHA = 3.0", (1, 4)),
    (3, CELLS[3].replace("--max-registers 32", "--max-registers 32 --fastmath"), (3, 4)),
]

RUN_CELLS = """async (indices) => {
  const w = window.jupyterapp.shell.currentWidget;
  for (const i of indices) {
    w.content.activeCellIndex = i;
    await window.jupyterapp.commands.execute('notebook:run-cell');
    const s = w.sessionContext.session;
    while (s.kernel.status !== 'idle' || !Number.isInteger(w.content.widgets[i].model.executionCount))
      await new Promise(done => setTimeout(done, 200));
  }
  return true;
}"""
SET_SOURCE = """([i, text]) => {
  window.jupyterapp.shell.currentWidget.content.widgets[i].model.sharedModel.setSource(text); return true; }"""
RESTART = """async () => { await window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.restart();
  return true; }"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the PNG to write")
    parser.add_argument("--checkout", type=Path, default=ROOT, help="the checkout the kernel imports")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    lab.ROOT = args.checkout.resolve()  # (what the kernel's PYTHONPATH names)
    with tempfile.TemporaryDirectory() as folder:
        workdir = Path(folder)
        server = lab.JupyterLab(workdir)
        name = "session.ipynb"
        notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS], metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
        nbformat.write(notebook, server.root / name)
        try:
            server.wait_ready()
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=str(lab.CHROMIUM), headless=True,
                                                     args=lab.CHROMIUM_ARGS, timeout=60_000)
                try:
                    page = browser.new_page(viewport={"width": 1400, "height": 3000})
                    page.set_default_timeout(lab.PAGE_S * 1000)
                    page.goto(f"{server.url}/lab/tree/{name}?token={server.token}", wait_until="domcontentloaded")
                    page.wait_for_function(lab.KERNEL_IDLE, polling=250)
                    page.evaluate(RUN_CELLS, list(range(len(CELLS) - 1)))
                    for index, source, then in EDITS:
                        page.evaluate(SET_SOURCE, [index, source])
                        page.evaluate(RUN_CELLS, list(then))
                    page.evaluate(RESTART)
                    page.wait_for_function(lab.KERNEL_IDLE, polling=250)
                    page.evaluate(RUN_CELLS, list(range(len(CELLS))))
                    inspector = page.locator(".gpucache-inspector").first
                    inspector.wait_for(state="visible", timeout=lab.ACTION_S * 1000)
                    select = inspector.locator(".gpucache-entries select")
                    labels = [t.replace("\u00a0", " ") for t in select.locator("option").all_inner_texts()]
                    cubins = [i for i, text in enumerate(labels) if " cubin " in text]
                    if cubins:
                        select.select_option(index=cubins[0])
                        page.wait_for_timeout(1500)
                    page.evaluate(lab.SETTLED)
                    args.out.parent.mkdir(parents=True, exist_ok=True)
                    # from its title down to the selected entry's whys: the names, the list, the actions
                    box = inspector.bounding_box()
                    why = inspector.locator(".gpucache-entry-view section").first.bounding_box()
                    bottom = why["y"] + why["height"] if why else box["y"] + box["height"]
                    page.screenshot(path=str(args.out), timeout=lab.ACTION_S * 1000, clip={
                        "x": box["x"], "y": box["y"], "width": box["width"], "height": bottom - box["y"] + 8})
                    print(json.dumps({"screenshot": str(args.out), "entries": labels}, indent=1))
                finally:
                    browser.close()
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
