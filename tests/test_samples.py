"""The sample kernels (gpucache_ext/samples.py) are written once and loaded
fresh wherever they are used."""

import json
import re
from pathlib import Path

from gpucache_ext import samples

ROOT = Path(__file__).resolve().parent.parent
SKIP = {".venv", ".git", "build", "dist", "node_modules", "site-packages", "__pycache__"}
# another project's kernels, vendored as they are (numba-cuda's documented fast_matmul, whence
# samples.MATMUL came, is among them): theirs, not a copy of ours
VENDORED = {"tests/mlir_corpus.py"}


def body_lines(source):
    """The lines of a sample's kernels long enough to say where they came from."""
    lines = (re.sub(r"\s+", " ", line).strip() for line in source.splitlines())
    return {line for line in lines if len(line) >= 24 and not line.startswith(("from ", "import ", "@"))}


def copies(source, text):
    """How many of `source`'s kernel lines `text` repeats (a notebook's JSON strings included)."""
    found = {re.sub(r"\s+", " ", line).strip() for line in text.replace("\\n", "\n").splitlines()}
    found |= {line.strip(' ",') for line in found}
    return len(body_lines(source) & found)


def test_samples_are_not_copied_elsewhere():
    """A copy drifts (there were six tiled matmuls, in four variants): use
    gpucache_ext.samples, and derive a variant from it with .replace()."""
    files = [p for pattern in ("*.py", "*.ipynb", "*.md") for p in ROOT.rglob(pattern)
             if not SKIP & set(p.relative_to(ROOT).parts)
             and p != Path(samples.__file__).resolve() and str(p.relative_to(ROOT)) not in VENDORED]
    assert any(p.name == "demo.py" for p in files)
    found = {str(p.relative_to(ROOT)): n for p in files
             if (n := copies(samples.MATMUL, p.read_text(errors="replace"))) >= 2}
    assert not found, f"lines of gpucache_ext.samples.MATMUL written out again: {found}"


def test_the_copy_check_finds_a_copy():
    assert len(body_lines(samples.MATMUL)) >= 6
    pasted = "def mm(A, B, C):\n" + samples.MATMUL.split("def matmul(A, B, C):\n")[1]
    assert copies(samples.MATMUL, pasted) == len(body_lines(samples.MATMUL))
    notebook = json.dumps({"source": samples.MATMUL.splitlines(True)})  # as a notebook holds it
    assert copies(samples.MATMUL, notebook) == len(body_lines(samples.MATMUL))


def test_load_gives_new_functions_with_their_own_globals():
    one, two = samples.load(samples.MATMUL), samples.load(samples.MATMUL)
    assert one["matmul"] is not two["matmul"] and one["matmul"].py_func is not two["matmul"].py_func
    one["TPB"] = 8
    assert two["TPB"] == 16 and one["matmul"].py_func.__globals__["TPB"] == 8
    assert one["matmul"].py_func.__module__ == "gpucache_ext.samples"
    # not a file path: user code to the cache wherever gpucache_ext is installed
    assert not Path(one["matmul"].py_func.__code__.co_filename).is_absolute()
    assert samples.load(samples.AXPY, module="m")["fused"].py_func.__module__ == "m"


def test_a_variant_is_its_own_source():
    variant = samples.MATMUL.replace("TPB = 16\n", "TPB = 4\n")
    assert variant != samples.MATMUL
    ns = samples.load(variant)
    assert ns["TPB"] == 4
    filename = ns["matmul"].py_func.__code__.co_filename
    assert filename != samples.load(samples.MATMUL)["matmul"].py_func.__code__.co_filename
    import linecache

    assert "TPB = 4" in "".join(linecache.getlines(filename))
