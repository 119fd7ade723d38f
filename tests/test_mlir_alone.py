"""An install of numba-cuda-mlir alone (``gpucache_ext[mlir-cu12]``: no numba,
numba-cuda or llvmlite): the package imports, the magic loads, cells of
numba-cuda-mlir kernels compile and hit, ``gpucache_ext.jit`` makes its
kernels, a new process reads the disk tier, the CLI explains its entries,
and every token is the one a full install computes.

Each test runs its program in a new process where numba, numba-cuda and
llvmlite cannot be imported (`numba_cuda_absent`); CI also runs this module
in an environment where they are not installed at all.
"""

import pytest

pytest.importorskip("numba_cuda_mlir", reason="numba-cuda-mlir is not installed (gpucache_ext[mlir]: Python 3.11+)")

from . import numba_cuda_absent  # noqa: E402

SIG = "void(float32[:], float32, float32[:], float32[:])"
KERNEL = '''@cuda.jit
def axpy(r, a, x, y):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = a * x[i] + y[i] * ALPHA'''


@pytest.mark.slow
@pytest.mark.smoke
def test_without_numba_cuda_the_magic_compiles_caches_and_explains_an_mlir_cell(tmp_path):
    found = numba_cuda_absent.answer(f'''
import json
from IPython.testing.globalipapp import start_ipython
ip = start_ipython()
ip.run_line_magic("load_ext", "gpucache_ext")
cell = "from numba_cuda_mlir import cuda\\nimport numpy as np\\nALPHA = np.float32(2)\\n" + {KERNEL!r}
hits = []
for line in ("--sm 86", "--sm 86", "--sm 86 --opt 0"):
    ip.run_cell_magic("gpukernel", line + " --sig '{SIG}'", cell)
    hits.append({{stage: s.hit for stage, s in ip.user_ns["axpy"].last.stages.items()}})
import sys
import gpucache_ext
from gpucache_ext import CompileConfig, ConfigError, KernelCache

@gpucache_ext.jit("void(float32[:])")
def plain(r):
    r[0] = 1.0

try:
    KernelCache().compile(plain.py_func, "void(float32[:])", CompileConfig(sm=86, backend="numba-cuda"))
    refused = None
except ConfigError as error:
    refused = str(error)
print(json.dumps({{"hits": hits, "kernel": type(ip.user_ns["axpy"]).__name__,
                  "backend": ip.user_ns["axpy"].last.config.backend, "jit": type(plain).__name__,
                  "jit backend": plain.last.config.backend, "refused": refused,
                  "numba imported": sorted(m for m in sys.modules if m.partition(".")[0] in ("numba", "llvmlite"))}}))
''', env={"GPUCACHE_DIR": str(tmp_path), "GPUCACHE_SM": "86"})
    cold, repeat, opt0 = found["hits"]
    assert list(cold) == ["typing", "mlir", "ptx", "cubin"] and not any(cold.values())
    assert all(repeat.values())
    assert opt0 == {"typing": True, "mlir": False, "ptx": False, "cubin": False}
    assert (found["kernel"], found["backend"], found["jit"], found["jit backend"]) == (
        "MlirKernel", "mlir", "MlirKernel", "mlir")
    assert "numba-cuda, which is not installed" in found["refused"] and "gpucache_ext[cu12]" in found["refused"]
    assert found["numba imported"] == []


@pytest.mark.slow
def test_without_numba_cuda_a_new_process_reads_the_disk_tier_and_the_cli_explains_it(tmp_path):
    compile_axpy = f'''
import hashlib, json
from gpucache_ext import CompileConfig, KernelCache
from tests import mlir_kernels as mk
result = KernelCache.from_environment().compile(mk.axpy, "{SIG}", CompileConfig(sm=86))
print(json.dumps({{"hits": {{stage: s.hit for stage, s in result.stages.items()}},
                  "cubin": hashlib.sha256(result.cubin).hexdigest()}}))
'''
    env = {"GPUCACHE_DIR": str(tmp_path)}
    first, second = numba_cuda_absent.answer(compile_axpy, env), numba_cuda_absent.answer(compile_axpy, env)
    assert not any(first["hits"].values())
    assert all(second["hits"][stage] for stage in ("mlir", "ptx", "cubin")) and second["cubin"] == first["cubin"]
    shown = numba_cuda_absent.run(f'''
import sys
from gpucache_ext.cli import main
code = main(["explain", "axpy", "--dir", {str(tmp_path)!r}])
code = code or main(["ls", "--dir", {str(tmp_path)!r}])
sys.exit(code)
''').stdout
    assert "mlir    built" in shown and "root cause: first compile of axpy (mlir)" in shown, shown
    assert "llvm" not in shown.split("root cause")[0], shown  # (the entry's chain: numba-cuda-mlir's)
    assert sum(line.startswith(("mlir ", "ptx ", "cubin ")) for line in shown.splitlines()) == 3, shown


@pytest.mark.slow
def test_every_token_is_the_one_a_full_install_computes():
    """The toolchain's files are found through numba-cuda-mlir's copy of
    numba-cuda's front end where numba-cuda is absent, through numba-cuda's
    where present: the same files, so the same tokens (a cache folder shared
    by both installs serves each the other's mlir entries)."""
    pytest.importorskip("numba_cuda", reason="numba-cuda is not installed: nothing to compare with")
    from gpucache_ext import CompileConfig, KernelCache

    from . import mlir_kernels as mk

    here = {stage: s.token for stage, s in KernelCache().compile(mk.axpy, SIG, CompileConfig(sm=86)).stages.items()}
    alone = numba_cuda_absent.answer(f'''
import json
from gpucache_ext import CompileConfig, KernelCache
from tests import mlir_kernels as mk
result = KernelCache().compile(mk.axpy, "{SIG}", CompileConfig(sm=86))
print(json.dumps({{stage: s.token for stage, s in result.stages.items()}}))
''')
    assert alone == here


def test_both_front_ends_find_the_same_toolchain_files():
    """What `importing.front_end` rests on: numba-cuda-mlir's copy of
    numba-cuda's file search finds the files numba-cuda's finds."""
    pytest.importorskip("numba_cuda", reason="numba-cuda is not installed: nothing to compare with")
    from numba.cuda.cudadrv import libs as numba_libs
    from numba_cuda_mlir.numba_cuda.cudadrv import libs as mlir_libs

    from gpucache_ext.importing import front_end, installed

    assert front_end() == "numba.cuda" and installed("numba_cuda_mlir") and not installed("no_such_package_here")
    assert mlir_libs.get_libdevice() == numba_libs.get_libdevice()
    assert mlir_libs.get_cudalib("cudadevrt", static=True) == numba_libs.get_cudalib("cudadevrt", static=True)


@pytest.mark.slow
def test_the_mlir_tour_tells_the_truth_on_the_first_and_the_second_run(tmp_path, monkeypatch):
    """examples/quickstart.py --backend mlir (its default where numba-cuda-mlir
    is installed alone): each %%gpukernel cell's report is what its text says,
    twice over, and the user's cache folder is left alone."""
    import os
    import re
    import subprocess
    import sys

    import nbformat

    from .helpers import ROOT

    user_cache = tmp_path / "user-cache"
    monkeypatch.setenv("GPUCACHE_DIR", str(user_cache))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))))
    stages = ("typing", "mlir", "ptx", "cubin")
    patterns = []
    for run in (1, 2):
        saved = tmp_path / f"run{run}.ipynb"
        printed = subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py"), "--backend", "mlir",
                                  "--save", str(saved)], cwd=ROOT, capture_output=True, text=True, timeout=600,
                                 check=True).stdout
        notebook = nbformat.read(saved, as_version=4)
        outputs = {cell.source: "\n".join(filter(None, (o.get("text") or o.get("data", {}).get("text/plain", "")
                                                        for o in cell.get("outputs", []))))
                   for cell in notebook.cells if cell.cell_type == "code"}
        assert not [o for c in notebook.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
        rows = []
        for source, text in outputs.items():
            if not source.startswith("%%gpukernel"):
                continue
            assert text.strip() in printed
            header, line = [each for each in text.splitlines() if each.strip()][:2]
            starts = [m.start() for m in re.finditer(r"\S+", header)]
            row = {name: line[a:b].strip() for name, a, b in zip(header.split(), starts, starts[1:] + [None])}
            rows.append(([stage for stage in stages if row[stage] == "MISS"], row["why"]))
        cold, repeat, opt0, retarget = rows
        assert cold[0] == list(stages) and "first compile of axpy" in cold[1]
        assert repeat[0] == []
        assert opt0[0] == ["mlir", "ptx", "cubin"] and "opt 3 -> 0" in opt0[1]
        assert {"mlir", "ptx", "cubin"} <= set(retarget[0]) and "sm 80 -> 86" in retarget[1]
        assert "gpu.module" in printed and ".target sm_86" in printed and "'registers'" in printed
        assert "needs an NVIDIA GPU" in printed or "[1. 3. 5. 7. 9.]" in printed
        patterns.append(rows)
    assert patterns[0] == patterns[1]
    assert not any(p.is_file() for p in user_cache.rglob("*"))  # (the tour keeps its own cache)
