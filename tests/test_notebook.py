"""notebooks/quickstart.ipynb runs top to bottom in a real Jupyter kernel
(nbclient, ipykernel) and shows what it promises."""

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a Jupyter kernel

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

import quickstart  # noqa: E402  (examples/quickstart.py)


def test_quickstart_notebook_executes_and_shows_hits_and_misses():
    notebook = quickstart.run()
    code_cells = [c for c in notebook.cells if c.cell_type == "code"]
    texts = ["\n".join(quickstart.text_of(o) for o in c.get("outputs", [])) for c in code_cells]
    errors = [o for c in code_cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors

    first, rerun, retarget = (t for t, c in zip(texts, code_cells) if c.source.startswith("%%gpukernel"))
    assert "first compile of axpy" in first and first.count("MISS") == 4
    assert "MISS" not in rerun and rerun.count("hit") == 4
    assert "sm 80 -> 86" in retarget and retarget.count("MISS") == 2
    # the HTML form is what a notebook shows
    html = [o["data"]["text/html"] for c in code_cells for o in c.get("outputs", [])
            if "text/html" in o.get("data", {})]
    assert any("gpucache-miss" in page for page in html)
    assert any(".target sm_86" in t for t in texts)
    assert any("'registers'" in t for t in texts)
    assert any("array([1., 3., 5., 7., 9.]" in t for t in texts)
