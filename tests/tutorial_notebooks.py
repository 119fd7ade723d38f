"""Notebooks in the style of the public numba-cuda tutorials, for tests/notebook_diff.py.

Each is a list of cell sources, run as written and under the magic.  Their
outputs are deterministic on numba's simulator and on the recording
stand-in driver (where kernels compute nothing, so what is copied back is
what was copied in): the two runs must show the same, cell by cell.
"""

UFUNCS = [
    """\
import numpy as np
from numba import cuda, vectorize, guvectorize""",
    """\
@vectorize(["float32(float32, float32)", "float64(float64, float64)"], target="cuda")
def add_ufunc(x, y):
    return x + y""",
    """\
a = np.arange(8, dtype=np.float32)
add_ufunc(a, 2 * a)""",
    """\
@guvectorize(["void(float32[:], float32[:])"], "(n)->(n)", target="cuda")
def running_sum(x, out):
    total = 0.0
    for i in range(x.shape[0]):
        total += x[i]
        out[i] = total""",
    """\
running_sum(np.arange(6, dtype=np.float32).reshape(2, 3))""",
    """\
@cuda.jit(device=True)
def clamp(x, lo, hi):
    return min(max(x, lo), hi)

@vectorize(["float32(float32)"], target="cuda")
def clamped(x):
    return clamp(x, 1.0, 5.0)

clamped(np.arange(8, dtype=np.float32))""",
]

BASICS = [
    """\
import numpy as np
from numba import cuda""",
    """\
@cuda.jit
def add_kernel(x, y, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = x[i] + y[i]""",
    """\
n = 100
x = np.arange(n, dtype=np.float32)
y = 2 * x
out = np.zeros_like(x)
threads = 32
blocks = (n + threads - 1) // threads
add_kernel[blocks, threads](x, y, out)
print(blocks, threads)
out[:5]""",
    """\
@cuda.jit("void(float32[:], float32[:])")
def block_sums(x, sums):
    tile = cuda.shared.array(32, dtype=np.float32)
    i = cuda.grid(1)
    t = cuda.threadIdx.x
    tile[t] = x[i] if i < x.size else 0.0
    cuda.syncthreads()
    if t == 0:
        s = 0.0
        for k in range(32):
            s += tile[k]
        sums[cuda.blockIdx.x] = s""",
    """\
sums = cuda.device_array(blocks, dtype=np.float32)
block_sums[blocks, threads](cuda.to_device(x), sums)
sums.copy_to_host().shape""",
    """\
@cuda.jit
def histogram(values, bins):
    i = cuda.grid(1)
    if i < values.size:
        cuda.atomic.add(bins, values[i] % bins.size, 1)

bins = np.zeros(4, dtype=np.int32)
histogram[4, 32](np.arange(100, dtype=np.int32), bins)
bins;""",
    """\
sum_reduce = cuda.reduce(lambda a, b: a + b)
type(sum_reduce(np.arange(64, dtype=np.float64))).__name__""",
    """\
add_kernel.signatures if hasattr(add_kernel, "signatures") else None""",
    # typing as tutorials teach it; each line's type, less what names the cell's file and lines
    # (a %%gpukernel cell is a file of its own, its first line the magic's)
    """\
import io

def typed(kernel):
    if not hasattr(kernel, "inspect_types"):  # (numba's simulator has none)
        return None
    text = io.StringIO()
    kernel.inspect_types(file=text)  # (numba-cuda's takes only `file`)
    return [line.split("::")[-1].strip() for line in text.getvalue().splitlines() if "::" in line]

lazy, declared = typed(add_kernel), typed(block_sums)
print(len(lazy or ()), len(declared or ()))
(lazy or [])[:6], (declared or [])[-4:]""",
]

RANDOM_AND_STREAMS = [
    """\
import numpy as np
from numba import cuda
from numba.cuda.random import create_xoroshiro128p_states, xoroshiro128p_uniform_float32""",
    """\
@cuda.jit
def fill_random(states, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = xoroshiro128p_uniform_float32(states, i)""",
    """\
states = create_xoroshiro128p_states(64, seed=1)
samples = cuda.device_array(64, dtype=np.float32)
fill_random[2, 32](states, samples)
samples.shape, samples.dtype""",
    """\
@cuda.jit
def scale(a, factor):
    i = cuda.grid(1)
    if i < a.size:
        a[i] *= factor

stream = cuda.stream()
host = np.arange(16, dtype=np.float64)
device = cuda.to_device(host, stream=stream)
scale[1, 16, stream](device, 3.0)
back = device.copy_to_host(stream=stream)
stream.synchronize()
back[:4]""",
    """\
FACTOR = 2.0

@cuda.jit
def times_factor(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] = a[i] * FACTOR

d = cuda.to_device(np.ones(8))
times_factor[1, 8](d)
d.copy_to_host()""",
]

# The interval type of numba's "extending" tutorial, for CUDA.
INTERVAL = """
from numba.cuda import types, cgutils
from numba.cuda.extending import (typeof_impl, type_callable, models, register_model,
                                  make_attribute_wrapper, lower_builtin, overload_attribute)

class Interval:
    def __init__(self, lo, hi):
        self.lo = lo
        self.hi = hi

class IntervalType(types.Type):
    def __init__(self):
        super().__init__(name="Interval")

interval_type = IntervalType()

@typeof_impl.register(Interval)
def typeof_interval(val, c):
    return interval_type

@type_callable(Interval)
def type_interval(context):
    def typer(lo, hi):
        if isinstance(lo, types.Float) and isinstance(hi, types.Float):
            return interval_type
    return typer

@register_model(IntervalType)
class IntervalModel(models.StructModel):
    def __init__(self, dmm, fe_type):
        members = [("lo", types.float64), ("hi", types.float64)]
        models.StructModel.__init__(self, dmm, fe_type, members)

make_attribute_wrapper(IntervalType, "lo", "lo")
make_attribute_wrapper(IntervalType, "hi", "hi")

@lower_builtin(Interval, types.Float, types.Float)
def impl_interval(context, builder, sig, args):
    interval = cgutils.create_struct_proxy(sig.return_type)(context, builder)
    interval.lo, interval.hi = args
    return interval._getvalue()

@overload_attribute(IntervalType, "width")
def get_width(interval):
    def getter(interval):
        return (interval.hi - interval.lo) * WIDTH_SCALE
    return getter
"""

EXTENSION_TYPE = [
    """\
import numpy as np
from numba import cuda""",
    "WIDTH_SCALE = 1.0",
    INTERVAL,
    """\
@cuda.jit
def widths(lo, hi, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = Interval(lo[i], hi[i]).width""",
    """\
lo = np.arange(8, dtype=np.float64)
hi = lo * lo
out = np.zeros(8)
widths[1, 8](lo, hi, out)
out""",
    """\
widths.signatures""",
]

CELLS_THAT_FAIL = [
    """\
import numpy as np
from numba import cuda""",
    """\
@cuda.jit
def uses_a_missing_name(a):
    a[0] = not_defined_anywhere""",
    """\
uses_a_missing_name[1, 1](np.zeros(1))""",
    """\
@cuda.jit("void(float32[:])")
def fine(a):
    a[0] = 1.0

1 / 0""",
    """\
fine[1, 1](np.zeros(1, dtype=np.float32))
"launched\"""",
    """\
@cuda.jit("void(int32[:])")
def declared(a):
    a[0] = len(a)

declared[1, 1](np.zeros(6, dtype=np.int32)[::2])""",
    """\
print("still going")
42""",
]



def doc_examples_notebook(only=None):
    """numba-cuda's documentation examples (tests/test_doc_examples.py, sizes
    scaled for the simulator) as one notebook: their imports in a first cell,
    then each example's test body in a cell of its own, its own checks on
    ``self``, a TestCase."""
    from .test_doc_examples import doc_examples

    found = [(name, path, imports, body) for name, path, imports, body, _ in doc_examples()
             if only is None or name in only]
    imports = sorted({line for _, _, lines, _ in found for line in lines})
    first = "import unittest\nself = unittest.TestCase()\n" + "\n".join(
        f"try:\n    {line}\nexcept ImportError:  # (numba's test harness needs its test extras)\n    pass"
        for line in imports)
    # (``__file__``: the examples that link CUDA C++ find it beside their own file)
    return [first, *(f"# numba-cuda's documentation example {name}\n__file__ = {str(path)!r}\n{body}"
                     for name, path, _, body in found)]


# numba's extension API as notebooks use it, with the cases a second run in the same kernel
# used to compile again (issue 53): ``from numba import types`` before the first compile, an
# @intrinsic and its typing template's memo, overloads.  (Every registration enters every
# kernel's typing token: a kernel compiled before a later registration compiles once more
# when next launched, and in a second run; tests/test_adversarial_round5.py covers the
# registrations interleaved with kernels.)
EXTENDING_TWICE = [
    """\
import numpy as np
from numba import cuda, types
from numba.cuda.extending import intrinsic, overload, overload_method""",
    """\
@intrinsic
def halved(typingctx, x):
    from numba.cuda.typing import signature

    def codegen(context, builder, sig, args):
        return builder.fmul(args[0], context.get_constant(sig.args[0], 0.5))
    return signature(x, x), codegen""",
    """\
def twice(x):
    return x * 2

@overload(twice, target="cuda")
def twice_impl(x):
    return lambda x: x * 2

@overload_method(types.Array, "head", target="cuda")
def head(arr):
    return lambda arr: arr[0]""",
    """\
@cuda.jit
def first(r):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = twice(halved(r[i]))

r = np.arange(4, dtype=np.float64)
first[1, 4](r)
r""",
    """\
@cuda.jit
def second(r):
    tmp = cuda.local.array(2, types.float64)
    tmp[0] = twice(r.head())
    r[0] = tmp[0]

r = np.ones(4)
second[1, 1](r)
first[1, 4](r)
r""",
]

NOTEBOOKS = {
    "ufuncs": UFUNCS,
    "basics": BASICS,
    "random_and_streams": RANDOM_AND_STREAMS,
    "extension_type": EXTENSION_TYPE,
    "cells_that_fail": CELLS_THAT_FAIL,
    "extending_twice": EXTENDING_TWICE,
}
