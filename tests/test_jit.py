"""``gpucache_ext.jit``: numba's decorator forms, kernels through the cache,
the disk tier across processes (on the simulator here)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

import gpucache_ext
from gpucache_ext import Kernel, KernelCache, LaunchError, UnsupportedKernelError

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def cache(monkeypatch):
    """A memory-only default cache for this test."""
    fresh = KernelCache()
    monkeypatch.setattr(gpucache_ext.defaults, "_default_cache", fresh)
    return fresh


def _body(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = x[i] + 1


def test_every_decorator_form_makes_a_cached_kernel(cache):
    lazy = gpucache_ext.jit(_body)
    assert isinstance(lazy, Kernel) and not lazy.results  # compiled at its first launch
    r, x = np.zeros(8), np.arange(8.0)
    lazy[1, 8](r, x)
    assert list(r) == list(x + 1) and lazy.last.stages["cubin"].outcome.value == "miss"

    declared = gpucache_ext.jit("void(float32[:], float32[:])", fastmath=True)(_body)
    assert declared.config.fastmath and len(declared.results) == 1  # compiled when decorated
    several = gpucache_ext.jit(["void(float32[:], float32[:])", "void(int64[:], int64[:])"])(_body)
    assert len(several.results) == 2
    with pytest.raises(LaunchError, match="no signature accepts"):  # as numba: only the declared launch
        several[1, 4](np.zeros(4, np.complex64), np.zeros(4, np.complex64))
    assert gpucache_ext.jit()(_body).options == {} and gpucache_ext.jit(cache=True)(_body).options == {
        "cache": True}
    # the same variant, whatever the form: the second is a hit in the same cache
    again = gpucache_ext.jit("void(float32[:], float32[:])", fastmath=True)(_body)
    assert again.last.stages["cubin"].hit and again.last.cubin == declared.last.cubin


def test_one_signature_is_specialized_as_numbas_and_a_list_is_dispatched(cache):
    one = gpucache_ext.jit("void(float64[:], float64[:])")(_body)
    listed = gpucache_ext.jit(["void(float64[:], float64[:])"])(_body)
    assert one.specialized and not listed.specialized
    r = np.zeros(4)
    one[1, 4](r, np.arange(4.0))  # launched without dispatch, as numba launches it
    assert list(r) == [1, 2, 3, 4]
    with pytest.raises(LaunchError, match=r"_body takes 2 arguments \(float64\[:\], float64\[:\]\), not 1"):
        one[1, 4](r)
    with pytest.raises(RuntimeError, match="already specialized"):
        one.specialize(r, r)


def test_bad_input_is_refused_as_numba_refuses_it(cache):
    with pytest.raises(UnsupportedKernelError, match="unknown option nonsense"):
        gpucache_ext.jit(nonsense=1)(_body)
    with pytest.raises(UnsupportedKernelError, match="boundscheck"):
        gpucache_ext.jit(boundscheck=True)(_body)
    with pytest.raises(TypeError, match="takes a function or a signature"):
        gpucache_ext.jit(42)
    with pytest.raises(UnsupportedKernelError, match=r"@gpucache_ext.jit\(device=True"):
        gpucache_ext.jit(device=True, nonsense=1)(_body)


def test_device_functions_are_numbas_and_typed_per_calling_kernel(cache):
    from numba.cuda.dispatcher import CUDADispatcher

    twice = gpucache_ext.jit(device=True)(lambda v: 2 * v)
    assert isinstance(twice, CUDADispatcher) and not isinstance(twice, Kernel)

    def doubled(r, x):
        i = cuda.grid(1)
        if i < r.size:
            r[i] = twice(x[i])

    kernel = gpucache_ext.jit(doubled)
    r, x = np.zeros(4, np.int64), np.arange(4, dtype=np.int64)
    kernel[1, 4](r, x)
    assert list(r) == [0, 2, 4, 6]


def test_inspector_works_without_the_extension(cache):
    widget = gpucache_ext.inspector(cache)
    assert type(widget).__name__ == "Inspector"


@pytest.mark.slow
def test_a_script_hits_on_disk_in_a_new_process_and_sees_an_edit_in_another_module(tmp_path):
    """numba's cache=True keys neither options nor device functions in other
    modules; the disk tier keys both."""
    (tmp_path / "helpers.py").write_text(textwrap.dedent("""
        import gpucache_ext

        @gpucache_ext.jit(device=True)
        def bump(v):
            return v + 1
    """))
    (tmp_path / "main.py").write_text(textwrap.dedent("""
        import numpy as np
        from numba import cuda

        import gpucache_ext
        from helpers import bump

        @gpucache_ext.jit("void(int64[:])")
        def fill(r):
            i = cuda.grid(1)
            if i < r.size:
                r[i] = bump(i)

        r = np.zeros(4, np.int64)
        fill[1, 4](r)
        print(r.tolist(), fill.last.stages["cubin"].outcome.value, fill.last.stages["cubin"].tier)
    """))
    env = {**os.environ, "GPUCACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}

    def run():
        done = subprocess.run([sys.executable, "main.py"], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert run() == "[1, 2, 3, 4] miss None"
    assert run() == "[1, 2, 3, 4] hit disk"
    (tmp_path / "helpers.py").write_text((tmp_path / "helpers.py").read_text().replace("v + 1", "v + 10"))
    assert run() == "[10, 11, 12, 13] miss None"


@pytest.mark.slow
def test_the_example_script_runs_and_hits_on_its_second_run(tmp_path):
    env = {**os.environ, "GPUCACHE_DIR": str(tmp_path)}
    outputs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, str(ROOT / "examples" / "script.py")], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert "cubin miss" in outputs[0] and "hit (disk)" not in outputs[0]
    assert outputs[1].count("cubin hit (disk)") == 2 and "miss," not in outputs[1]
