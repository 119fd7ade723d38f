"""numba-cuda-mlir kernels launch through numba-cuda-mlir's own dispatcher and
launcher, with the cubins the pipeline built (its cache hook answered by a
`KernelCache`): on the recording stand-in driver, the same program makes the
same driver calls as numba-cuda-mlir alone, images included, compiled cold
and read from disk; a kernel whose global changed compiles again at its first
launch after a cell; without a GPU a launch says so, and compiles still work.
"""

import numpy as np
import pytest

pytest.importorskip("numba_cuda_mlir", reason="numba-cuda-mlir is not installed (gpucache_ext[mlir]: Python 3.11+)")

from gpucache_ext import CompileConfig, KernelCache  # noqa: E402
from gpucache_ext.backends.numba_cuda_mlir.launch import MlirKernel, config_of, jit  # noqa: E402
from gpucache_ext.errors import GpuCacheError, UnsupportedKernelError  # noqa: E402
from gpucache_ext.launch import registry  # noqa: E402

from . import fakecuda, mlir_kernels as mk  # noqa: E402
from .helpers import ROOT  # noqa: E402

from numba_cuda_mlir import cuda as mlir_cuda  # noqa: E402

PINNED = CompileConfig(sm=86, backend="mlir")


def test_its_dispatcher_loads_the_cached_cubin_without_a_gpu():
    cache = KernelCache()
    kernel = jit(mk.axpy, cache=cache, config=PINNED)
    assert isinstance(kernel, MlirKernel)
    loaded = kernel.compile(mk.AXPY_SIG)  # (numba-cuda-mlir's own compile(), its cache hook answered)
    result = kernel.last
    assert loaded.metadata["cubin"] == result.cubin and loaded.metadata["func_name"] == result.entry_name
    assert result.entry_name in result.ptx
    again = cache.compile(mk.axpy, mk.AXPY_SIG, PINNED)  # (the same entries: every stage a hit)
    assert again.cubin == result.cubin and all(stage.hit for stage in again.stages.values())


def test_a_global_changed_since_is_compiled_again_at_the_first_launch_after_a_cell(monkeypatch):
    kernel = jit(mk.scaled, cache=KernelCache(), config=PINNED)
    kernel.compile(mk.UNARY_SIG)
    before = kernel.last
    monkeypatch.setattr(mk, "ALPHA", np.float32(7.0))
    kernel._recheck()  # (what the first launch after registry.refresh_all does)
    assert not kernel.results and not kernel.overloads
    kernel.compile(mk.UNARY_SIG)
    assert kernel.last.ptx != before.ptx and "0f40E00000" in kernel.last.ptx  # (7.0 as PTX writes it)
    kernel._recheck()  # nothing changed since: kept
    assert kernel.results


def test_a_launch_without_a_gpu_says_so():
    registry.refresh_all()
    kernel = jit(mk.axpy, cache=KernelCache())
    with pytest.raises(GpuCacheError, match="needs an NVIDIA GPU and its driver.*numba-cuda-mlir has no simulator"):
        kernel[1, 32](np.zeros(32, np.float32), np.float32(1), np.ones(32, np.float32), np.ones(32, np.float32))


def test_the_kernels_options_are_its_config_and_what_cannot_be_keyed_is_refused():
    @mlir_cuda.jit(fastmath=True, lineinfo=True, max_registers=32, launch_bounds=128)
    def options(r):
        r[0] = 1.0

    config = config_of(options.targetoptions, 80)
    assert (config.sm, config.fastmath, config.lineinfo, config.max_registers, config.launch_bounds,
            config.backend) == (80, True, True, 32, (128,), "mlir")

    @mlir_cuda.jit(ptxas_options="-O1")
    def unkeyed(r):
        r[0] = 1.0

    with pytest.raises(UnsupportedKernelError, match="ptxas_options='-O1' is not keyed"):
        config_of(unkeyed.targetoptions, 80)


@pytest.fixture(scope="module")
def stand_in():
    reason = fakecuda.skip_reason()
    if reason:
        pytest.skip(reason)


@pytest.mark.slow
@pytest.mark.parametrize("cc", ["9.0", "8.6"])
def test_the_driver_calls_are_numba_cuda_mlirs_own(stand_in, tmp_path, cc):
    script = ROOT / "tests" / "mlir_launches.py"

    def run(mode):
        done = fakecuda.run(script, cc=(cc,), args=[mode, tmp_path / "cache"])
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    plain, cold, warm = run("plain"), run("cached"), run("cached")
    assert any(call["call"] == "cuLaunchKernel" for call in plain.calls)
    # call for call, the images loaded included: the cubins are numba-cuda-mlir's own
    assert cold.calls == plain.calls
    assert warm.calls == plain.calls
    import json

    outcomes = json.loads(warm.stdout.strip().splitlines()[-1])
    assert outcomes and all(stages["cubin"] == "HIT" and stages["mlir"] == "HIT" for stages in outcomes.values())


# -- in a %%gpukernel cell -------------------------------------------------------

MLIR_CELL = '''
from numba_cuda_mlir import cuda
import math

@cuda.jit(lineinfo=True)
def wave(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = math.sin(x[i]) * SCALE
'''


def test_a_cell_of_numba_cuda_mlir_kernels_compiles_them_through_the_cache(ip):
    from .helpers import cell

    ip.user_ns["SCALE"] = 2.0
    cell(ip, "--sm 86 --opt 0 --sig 'void(float32[:], float32[:])'", MLIR_CELL)
    kernel = ip.user_ns["wave"]
    assert isinstance(kernel, MlirKernel)
    result = kernel.last
    # the line's flags over the kernel's own options (lineinfo), its target pinned
    assert (result.config.sm, result.config.opt, result.config.lineinfo, result.config.backend) == (86, 0, True, "mlir")
    assert list(result.stages) == ["typing", "mlir", "ptx", "cubin"] and not any(s.hit for s in result.stages.values())
    shown = ip.user_ns["_"] if "_" in ip.user_ns else None  # (the report is displayed, not returned)
    del shown
    # run again: every stage a hit; a global it reads changed: compiled again from typing
    cell(ip, "--sm 86 --opt 0 --sig 'void(float32[:], float32[:])'", MLIR_CELL)
    assert all(stage.hit for stage in ip.user_ns["wave"].last.stages.values())
    ip.user_ns["SCALE"] = 3.0
    cell(ip, "--sm 86 --opt 0 --sig 'void(float32[:], float32[:])'", MLIR_CELL)
    again = ip.user_ns["wave"].last
    assert again.stages["typing"].outcome.name == "MISS" and again.ptx != result.ptx
    assert "SCALE" in " ".join(again.stages["typing"].reasons[0].split()) or again.stages["typing"].reasons


def test_a_cell_refuses_a_sweep_of_numba_cuda_mlir_kernels_by_name(ip):
    from .helpers import cell

    ip.user_ns["SCALE"] = 2.0
    with pytest.raises(UnsupportedKernelError, match="one target and one config in a cell"):
        cell(ip, "--sm 86 --opt 2,3", MLIR_CELL)


def test_gpucache_ext_jit_takes_the_mlir_backend(monkeypatch):
    import gpucache_ext

    monkeypatch.setenv("GPUCACHE_SM", "80")

    @gpucache_ext.jit("void(float32[:], float32[:])", backend="mlir", fastmath=True, cache=KernelCache())
    def halve(r, x):
        i = mlir_cuda.grid(1)
        if i < r.size:
            r[i] = x[i] / 2

    assert isinstance(halve, MlirKernel)  # (compiled when decorated: no GPU here, so GPUCACHE_SM's target)
    assert (halve.last.config.sm, halve.last.config.fastmath, halve.last.config.backend) == (80, True, "mlir")
    assert gpucache_ext.jit(mk.axpy, cache=KernelCache()).source is mk.axpy  # (a numba_cuda_mlir kernel given)


def test_backend_on_a_cells_line_is_refused_saying_the_import_decides(ip):
    from IPython.core.error import UsageError

    from .helpers import cell

    ip.user_ns["SCALE"] = 2.0
    with pytest.raises(UsageError, match="--backend: in a cell the import decides the compiler"):
        cell(ip, "--sm 86 --backend mlir", MLIR_CELL)
    assert "wave" not in ip.user_ns  # (refused before the cell ran)


def test_gpucache_auto_runs_a_cell_of_numba_cuda_mlir_kernels_as_a_gpukernel_cell(ip):
    from gpucache_ext.ipython.auto import defines_cuda_kernels

    assert defines_cuda_kernels(MLIR_CELL, {})
    assert defines_cuda_kernels("@cuda.jit\ndef k(r):\n    pass\n", {"cuda": mlir_cuda})
    assert not defines_cuda_kernels("def k(r):\n    pass\n", {"cuda": mlir_cuda})
    ip.user_ns["SCALE"] = 2.0
    ip.run_line_magic("gpucache", "auto")
    try:
        result = ip.run_cell(MLIR_CELL)
        assert result.success, result.error_in_exec
        assert isinstance(ip.user_ns["wave"], MlirKernel)
    finally:
        ip.run_line_magic("gpucache", "auto off")


WARMED_MODULE = '''
import gpucache_ext
from numba_cuda_mlir import cuda


@gpucache_ext.jit("void(float32[:], float32[:])")
def double(r, x):
    for i in range(cuda.grid(1), r.size, cuda.gridsize(1)):
        r[i] = 2 * x[i]


@gpucache_ext.jit("void(float32[:])")
def one(r):
    r[0] = 1.0
'''


def test_gpucache_ext_jit_of_a_function_takes_the_compiler_its_import_names(tmp_path, monkeypatch):
    """The import decides, as in a cell: a function that reads numba-cuda-mlir's
    cuda, or whose module imports it alone (`one` reads no cuda), becomes its
    kernel; KernelCache compiles such a function with it too."""
    import importlib

    monkeypatch.setenv("GPUCACHE_SM", "86")
    (tmp_path / "mlir_jit_module.py").write_text(WARMED_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("mlir_jit_module")
    assert isinstance(module.double, MlirKernel) and isinstance(module.one, MlirKernel)
    assert module.double.last.config.backend == module.one.last.config.backend == "mlir"

    def plain(r):
        r[mlir_cuda.grid(1)] = 1.0

    assert KernelCache().compile(plain, "void(float32[:])", CompileConfig(sm=86)).config.backend == "mlir"


@pytest.mark.slow
def test_gpucache_warm_builds_numba_cuda_mlir_kernels_of_a_module_and_a_notebook(tmp_path):
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from .helpers import gpucache

    module = tmp_path / "warmed_mlir.py"
    module.write_text(WARMED_MODULE)
    cache = tmp_path / "cache"
    for expected in ("4 built, 0 already cached", "0 built, 4 already cached"):
        out = gpucache("warm", "--sm", "80,86", "--fastmath", "on", module, "--dir", cache).stdout
        assert expected in out and "fastmath=True backend=mlir" in out, out
    notebook = tmp_path / "mlir.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell("%load_ext gpucache_ext"), new_code_cell("SCALE = 2.0"),
                                       new_code_cell("%%gpukernel --sig 'void(float32[:], float32[:])'\n" + MLIR_CELL)],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}), notebook)
    for expected in ("3 entries built, 0 already cached", "0 entries built, 3 already cached"):
        out = gpucache("warm", "--sm", "86", notebook, "--dir", cache).stdout
        assert "1 %%gpukernel cells run; " + expected in out, out


def test_the_inspector_lists_shows_and_explains_mlir_entries(ip):
    """The inspector over numba-cuda-mlir's entries: listed with their stage,
    the MLIR shown as an artifact, why each was built along its own chain,
    and the mlir stage in the summary."""
    import gpucache_ext

    from .test_widgets import cell, listed, part  # (cells numbered, as a notebook's are)

    ip.user_ns["SCALE"] = 2.0
    cell(ip, "--sm 86 --sig 'void(float32[:], float32[:])'", MLIR_CELL)
    cell(ip, "--sm 86 --opt 0 --sig 'void(float32[:], float32[:])'", MLIR_CELL)
    result = ip.user_ns["wave"].last
    inspector = gpucache_ext.inspector()
    labels, values = listed(inspector)
    assert ("mlir", result.stages["mlir"].token) in values and not any(stage == "llvm" for stage, _ in values)
    inspector.select("mlir", result.stages["mlir"].token)
    page = part(inspector, "gpucache-entry-view").get_state()["value"]
    assert "gpu.module" in page and "opt 3 -&gt; 0" in page and "<script" not in page
    inspector.select("ptx", result.stages["ptx"].token)
    page = part(inspector, "gpucache-entry-view").get_state()["value"]
    assert "mlir input changed" in page and ".target sm_86" in page
    summary = part(inspector, "gpucache-summary").get_state()["value"]
    assert ">mlir<" in summary


EAGER_CELL = '''
from numba_cuda_mlir import cuda
from numba_cuda_mlir.cuda import jit as alias

@cuda.jit("void(float32[:], float32[:])")
def double(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = 2 * x[i]

@alias("void(float32[:])")
def one(r):
    r[0] = 1.0
'''


def test_a_cells_kernel_with_a_signature_in_its_decorator_compiles_through_the_cache_with_no_driver(ip):
    """numba-cuda-mlir compiles such a kernel when decorated, asking a driver
    for the host's GPU; in a cell its cuda.jit stands in, so the decorator's
    signature compiles through the cache (no driver here), and the kernel
    takes that signature alone, as numba-cuda-mlir's does."""
    import numba_cuda_mlir.cuda
    from numba_cuda_mlir.decorators import mlir_jit

    from .helpers import cell

    cell(ip, "--sm 86", EAGER_CELL)
    double, one = ip.user_ns["double"], ip.user_ns["one"]
    assert isinstance(double, MlirKernel) and isinstance(one, MlirKernel)
    assert not double._can_compile and len(double.overloads) == 1 and double.last.config.sm == 86
    assert not any(s.hit for s in double.last.stages.values())
    assert numba_cuda_mlir.cuda.jit is mlir_jit  # (numba-cuda-mlir's own again after the cell)
    cell(ip, "--sm 86", EAGER_CELL)
    assert all(s.hit for s in ip.user_ns["double"].last.stages.values())
    kept = ip.user_ns["alias"]  # (the stand-in, bound by the cell's import: numba-cuda-mlir's own outside a cell)
    assert type(kept(lambda r: None)).__name__ == "MLIRDispatcher"


def test_the_import_that_decides_is_a_compilers_package_not_a_name_that_begins_alike():
    import types

    from gpucache_ext.backends import imported_backend

    namespace = {"cuda": mlir_cuda, "numba_cuda_helpers": types.ModuleType("numba_cuda_helpers")}
    exec("def kernel(r):\n    r[0] = 1.0\n", namespace)
    assert imported_backend(namespace["kernel"], module=True) == "mlir"
    namespace["cuda"] = types.ModuleType("numba_cuda_mlirish")
    assert imported_backend(namespace["kernel"], module=True) is None
