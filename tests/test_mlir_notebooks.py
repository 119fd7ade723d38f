"""A notebook of numba-cuda-mlir kernels (a tutorial's cells with the import
swapped: ``from numba_cuda_mlir import cuda``) runs the same plain and under
the magic, on the recording stand-in driver: every cell shows the same, the
driver is called the same, images included, and a second run of the cells in
the same kernel compiles nothing.  (numba-cuda-mlir has no simulator: the
stand-in runs no kernel, so the cells show shapes, types and launches, not
numbers.)"""

import pytest

pytest.importorskip("numba_cuda_mlir", reason="numba-cuda-mlir is not installed (gpucache_ext[mlir]: Python 3.11+)")

from . import fakecuda, notebook_diff  # noqa: E402

pytestmark = pytest.mark.slow

CELLS = [
    "import numpy as np\nfrom numba_cuda_mlir import cuda\nimport math",
    # a first kernel, launched on host arrays (copied in and back)
    '''@cuda.jit
def axpy(r, a, x, y):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = a * x[i] + y[i]

n = 1024
x = np.arange(n, dtype=np.float32)
y = np.ones(n, dtype=np.float32)
r = np.zeros(n, dtype=np.float32)
axpy[(n + 255) // 256, 256](r, np.float32(2.0), x, y)
print(r.shape, r.dtype)''',
    # device arrays, a global the kernel reads, a shared-memory reduction
    '''SCALE = np.float32(0.5)
TPB = 128

@cuda.jit
def block_sums(out, x):
    tile = cuda.shared.array(TPB, dtype=np.float32)
    i = cuda.grid(1)
    t = cuda.threadIdx.x
    tile[t] = x[i] * SCALE if i < x.size else np.float32(0)
    cuda.syncthreads()
    if t == 0:
        s = np.float32(0)
        for k in range(TPB):
            s += tile[k]
        out[cuda.blockIdx.x] = s

dx = cuda.to_device(x)
out = cuda.device_array(n // TPB, dtype=np.float32)
block_sums[n // TPB, TPB](out, dx)
out.copy_to_host().shape''',
    # a 2-D kernel on a stream
    '''@cuda.jit
def wave(c, a):
    i, j = cuda.grid(2)
    if i < c.shape[0] and j < c.shape[1]:
        c[i, j] = math.sin(a[i, j]) * math.exp(-a[i, j])

stream = cuda.stream()
a = cuda.to_device(np.ones((64, 64)), stream=stream)
c = cuda.device_array((64, 64), stream=stream)
wave[(8, 8), (8, 8), stream](c, a)
stream.synchronize()
type(c).__name__, c.shape''',
]


@pytest.fixture(scope="module", autouse=True)
def stand_in():
    reason = fakecuda.skip_reason()
    if reason:
        pytest.skip(reason)


@pytest.mark.parametrize("mode", ["magic", "auto"])
def test_the_notebook_runs_the_same_plain_and_under_the_magic(tmp_path, mode):
    plain = notebook_diff.run(CELLS, "plain", "fakecuda", tmp_path / "plain")
    assert all(cell.error is None for cell in plain.cells), [cell.error for cell in plain.cells]
    under = notebook_diff.run(CELLS, mode, "fakecuda", tmp_path / mode, again=True)
    assert notebook_diff.differences(plain, under) == []
    launches = [call for call in plain.calls if call["call"] == "cuLaunchKernel"]
    assert len(launches) == 3
    # the driver calls of the first pass: numba-cuda-mlir's own, the images loaded included (its cubins)
    first = under.calls[:len(plain.calls)]
    assert first == plain.calls
    # the second pass in the same kernel: the same cells show the same, and nothing compiles
    assert [(c.error, c.stdout, c.result) for c in under.again] == [(c.error, c.stdout, c.result)
                                                                   for c in under.cells]
    assert under.misses and not any(under.misses.values()), under.misses


def swapped(cells):
    """A numba-cuda tutorial notebook's cells with the migration's one change: the import."""
    return [cell.replace("from numba import cuda", "from numba_cuda_mlir import cuda") for cell in cells]


@pytest.mark.parametrize("name", ["basics", "random_and_streams"])
def test_a_tutorial_notebook_with_the_import_swapped_runs_the_same_under_the_magic(tmp_path, name):
    """tests/tutorial_notebooks.py's numba-cuda tutorials, moved to numba-cuda-mlir by
    their import: plain and under the magic, every cell shows the same (what fails
    plainly fails alike), the first pass makes numba-cuda-mlir's own driver calls,
    and a second pass in the same kernel compiles nothing."""
    from .tutorial_notebooks import NOTEBOOKS

    cells = swapped(NOTEBOOKS[name])
    assert cells != NOTEBOOKS[name]
    plain = notebook_diff.run(cells, "plain", "fakecuda", tmp_path / "plain")
    assert sum(cell.error is None for cell in plain.cells) >= len(cells) // 2, [c.error for c in plain.cells]
    under = notebook_diff.run(cells, "magic", "fakecuda", tmp_path / "magic", again=True)
    assert notebook_diff.differences(plain, under) == []
    assert any(call["call"] == "cuLaunchKernel" for call in plain.calls)
    assert under.calls[:len(plain.calls)] == plain.calls
    assert [(c.error, c.stdout, c.result) for c in under.again] == [(c.error, c.stdout, c.result)
                                                                   for c in under.cells]
    assert under.misses and not any(n for stage, n in under.misses.items() if stage != "typing"), under.misses
