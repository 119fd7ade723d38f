"""A Kernel offers what numba-cuda's dispatcher offers users (on the simulator here)."""

import numpy as np
import pytest

from gpucache_ext import CompileConfig, Kernel, KernelCache, LaunchError
from gpucache_ext.pipeline.results import SassUnavailable

from .helpers import notebook_namespace, run_cell

SOURCE = """
import numpy as np

TABLE = np.arange(4, dtype=np.float32)

def add_table(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = x[i] + TABLE[i % 4]
"""


@pytest.fixture
def kernel():
    ns = notebook_namespace()
    run_cell(ns, SOURCE)
    return Kernel(ns["add_table"], [], CompileConfig(sm=80), KernelCache(), simulate=True)


def arrays(n=10):
    return np.zeros(n, np.float32), np.arange(n, dtype=np.float32)


def test_forall_and_configure_launch_like_numbas(kernel):
    r, x = arrays()
    kernel.forall(r.size)(r, x)
    assert np.array_equal(r, x + np.arange(r.size) % 4)
    r[:] = 0
    kernel.configure(2, 8)(r, x)
    assert np.array_equal(r, x + np.arange(r.size) % 4)
    r[:] = -1
    kernel.forall(0)(r, x)
    assert (r == -1).all()
    with pytest.raises(ValueError, match="negative"):
        kernel.forall(-1)


def test_specialize_keeps_the_whole_spec_of_its_kernel():
    """A sweep's variants, the block sizes, the dynamic shared memory and
    --force reach the specialization (`specialize` dropped them)."""
    ns = notebook_namespace()
    run_cell(ns, SOURCE)
    base = CompileConfig(sm=80)
    kernel = Kernel(ns["add_table"], [], base, KernelCache(), simulate=True, force=True, blocks=(128, 256),
                    dynamic_shared=1024, variants=[base, base.replace(max_registers=32)])
    kernel.use(max_registers=32)
    special = kernel.specialize(*arrays())
    assert special.spec == kernel.spec.replace(config=kernel.config)
    assert special.config.max_registers == 32 and set(special.sweep) == set(kernel.sweep) and len(special.sweep) == 2
    assert (special.blocks, special.dynamic_shared, special.force, special.simulate) == ((128, 256), 1024, True, True)
    assert [v.config.max_registers for v in special.variants] == [32, None]
    with pytest.raises(TypeError, match="not both"):
        Kernel(ns["add_table"], [], base, spec=kernel.spec)


def test_specialize_overloads_and_per_signature_getters(kernel):
    r, x = arrays()
    special = kernel.specialize(r, x)
    assert special.specialized and not kernel.specialized
    assert list(special.overloads) == special.signatures and len(special.signatures) == 1
    assert special.definitions == special.overloads
    with pytest.raises(RuntimeError, match="already specialized"):
        special.specialize(r, x)
    result = special.last
    assert special.get_regs_per_thread() == result.resources["registers"] > 0
    assert special.get_shared_mem_per_block() == 0
    assert special.get_local_mem_per_thread() == result.resources["local_bytes"]
    assert special.get_const_mem_size() == result.resources["user_constant_bytes"] >= 16  # TABLE
    # a kernel with several signatures answers per signature, as numba's
    kernel.compile("void(float32[:], float32[:])")
    kernel.compile("void(float64[:], float64[:])")
    per_signature = kernel.get_regs_per_thread()
    assert isinstance(per_signature, dict) and len(per_signature) == 2
    f64 = next(sig for sig in per_signature if "float64" in str(sig[0]))
    assert kernel.inspect_asm(f64) == kernel.overloads[f64].ptx
    assert kernel.inspect_asm("void(float64[:], float64[:])") == kernel.overloads[f64].ptx
    assert set(kernel.inspect_llvm()) == set(per_signature)
    with pytest.raises(LaunchError, match="lto"):
        kernel.inspect_lto_ptx(f64)


def test_what_needs_hardware_or_is_left_out_says_so(kernel):
    kernel.compile("void(float32[:], float32[:])")
    with pytest.raises(LaunchError, match="needs a GPU"):
        kernel.get_max_threads_per_block()
    with pytest.raises(AttributeError, match="does not offer numba's stats"):
        _ = kernel.stats
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        _ = kernel.nonsense
    try:
        sass = kernel.inspect_sass()
    except SassUnavailable as exc:  # no nvdisasm here: the error says where to get it
        assert "nvidia-cuda-nvdisasm" in str(exc)
    else:
        assert kernel.last.entry_name in next(iter(sass.values()))


def numbas_annotation(pyfunc, argtypes, debug=False):
    """numba-cuda's own type annotation of `pyfunc` (compiled for sm_80, no GPU needed)."""
    from numba.cuda import types
    from numba.cuda.compiler import compile_cuda

    return str(compile_cuda(pyfunc, types.void, argtypes, debug=debug, cc=(8, 0)).type_annotation).rstrip("\n")


def printed_annotations(kernel, **kwargs) -> dict:
    """What ``inspect_types`` printed: {header line: annotation} per variant."""
    import io

    out = io.StringIO()
    kernel.inspect_types(file=out, **kwargs)
    found = {}
    for block in out.getvalue().split("=" * 80 + "\n"):
        if block.strip():
            header, rule, annotation = block.split("\n", 2)
            assert rule == "-" * 80
            found[header] = annotation.rstrip("\n")
    return found


@pytest.mark.parametrize("debug", [False, True], ids=["default", "debug"])
def test_inspect_types_prints_numbas_own_annotation_per_variant(kernel, debug):
    from numba.cuda import types

    if debug:
        kernel = Kernel(kernel.py_func, [], CompileConfig(sm=80, debug=True, opt=0), KernelCache(), simulate=True)
    f32, f64 = (types.float32[:], types.float32[:]), (types.float64[:], types.float64[:])
    kernel.compile("void(float32[:], float32[:])")
    kernel.compile("void(float64[:], float64[:])")
    shown = printed_annotations(kernel)
    assert len(shown) == 2
    for argtypes in (f32, f64):
        variant = kernel.overloads[tuple(argtypes)]
        header = f"{variant.entry_name} {variant.argument_types}"  # numba-cuda's heading of a variant
        assert shown[header] == numbas_annotation(kernel.py_func, argtypes, debug=debug)
    # numba's general form: one signature, or the pretty one Jupyter shows
    one = printed_annotations(kernel, signature=tuple(f64))
    assert list(one.values()) == [numbas_annotation(kernel.py_func, f64, debug=debug)]
    pretty = kernel.inspect_types(pretty=True)
    assert "add_table" in pretty._repr_html_() and type(pretty).__name__ == "Annotate"


def test_inspect_types_types_again_where_the_typed_ir_is_no_longer_cached(kernel, tmp_path):
    """After a restart a disk hit holds no typed IR: inspect_types types the
    kernel again, and prints what it printed before."""
    from numba.cuda import types

    first = Kernel(kernel.py_func, [], CompileConfig(sm=80), KernelCache(directory=tmp_path), simulate=True)
    first.compile("void(float32[:], float32[:])")
    before = list(printed_annotations(first).values())
    cache = KernelCache(directory=tmp_path)  # a new process's cache: every stage on disk
    again = Kernel(kernel.py_func, [], CompileConfig(sm=80), cache, simulate=True)
    again.compile("void(float32[:], float32[:])")
    assert again.last.stages["typing"].outcome.value == "not needed" and cache.stats()["typing"].misses == 0
    assert list(printed_annotations(again).values()) == before == [
        numbas_annotation(kernel.py_func, (types.float32[:], types.float32[:]))]
    assert cache.stats()["typing"].misses == 1  # typed once more, for the annotation
    printed_annotations(again)
    assert cache.stats()["typing"].misses == 1  # and kept on the variant


def test_inspect_types_of_a_signature_not_compiled_is_numbas_key_error(kernel):
    from numba.cuda import types

    with pytest.raises(KeyError):
        kernel.inspect_types(signature=(types.int32[:], types.int32[:]))


CAPTURE = '''%%gpukernel --sm 80 --quiet
import numpy as np
from numba import cuda

@cuda.jit
def scaled(r):
    r[0] = SCALE
'''


def test_simulated_launches_keep_the_values_compiled_in(ip):
    ip.run_cell("SCALE = 2.0").raise_error()
    ip.run_cell(CAPTURE + '''
first = np.zeros(1)
scaled[1, 1](first)
SCALE = 5.0          # as on a GPU, the compiled kernel keeps 2.0 until the cell ends
second = np.zeros(1)
scaled[1, 1](second)
''').raise_error()
    assert ip.user_ns["first"][0] == ip.user_ns["second"][0] == 2.0
    ip.run_cell("third = np.zeros(1)\nscaled[1, 1](third)").raise_error()  # a new cell: recompiled
    assert ip.user_ns["third"][0] == 5.0


def test_device_arrays_read_as_globals_are_captured_by_pointer(ip):
    ip.run_cell('''%%gpukernel --sm 80 --quiet
import numpy as np
from numba import cuda

PRICES = cuda.to_device(np.array([1.0, 2.0], dtype=np.float32))

@cuda.jit
def read(r):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = PRICES[i]

out = np.zeros(2, dtype=np.float32)
read[1, 2](out)
PRICES.copy_to_device(np.array([7.0, 8.0], dtype=np.float32))   # the same pointer
after = np.zeros(2, dtype=np.float32)
read[1, 2](after)
''').raise_error()
    ns = ip.user_ns
    assert list(ns["out"]) == [1.0, 2.0] and list(ns["after"]) == [7.0, 8.0]
    kernel = ns["read"]
    token = kernel.last.stages["typing"].token
    assert "inttoptr" in kernel.llvm_ir  # the pointer, not the contents, is in the code
    ip.run_cell("PRICES = cuda.to_device(np.array([1.0, 2.0], dtype=np.float32))\n"
                "read[1, 2](np.zeros(2, dtype=np.float32))").raise_error()
    assert kernel.last.stages["typing"].token != token  # another array: another pointer


def test_grid_synchronising_kernels_simulate_in_one_block_only(ip):
    ip.run_cell('''%%gpukernel --sm 80 --quiet
import numpy as np
from numba import cuda

@cuda.jit
def shift(a):
    i = cuda.grid(1)
    g = cuda.cg.this_grid()
    v = a[(i + 1) % a.size]
    g.sync()
    a[i] = v
''').raise_error()
    a = np.arange(8, dtype=np.int64)
    ip.user_ns["shift"].forall(8)(a)  # one block of 8 threads on the simulator
    assert list(a) == [1, 2, 3, 4, 5, 6, 7, 0]
    with pytest.raises(LaunchError, match="within one block"):
        ip.user_ns["shift"][2, 4](a)


def test_shared_memory_carveout_is_a_launch_option_checked_as_numba_checks_it():
    from gpucache_ext import UnsupportedKernelError

    ns = notebook_namespace()
    run_cell(ns, SOURCE)
    cache = KernelCache()
    sig = "void(float32[:], float32[:])"
    plain = Kernel(ns["add_table"], [sig], CompileConfig(sm=80), cache, simulate=True).compile(sig)
    carved = Kernel(ns["add_table"], [sig], CompileConfig(sm=80), cache,
                    {"shared_memory_carveout": "MaxL1"}, simulate=True)
    # it is set on the loaded kernel (on a GPU), never part of the code
    result = carved.compile(sig)
    assert result.cubin == plain.cubin and result.hit
    r, x = arrays()
    carved[1, 16](r, x)
    assert np.array_equal(r, x + np.arange(r.size) % 4)
    with pytest.raises(UnsupportedKernelError, match="Carveout must be between -1 and 100"):
        Kernel(ns["add_table"], [sig], CompileConfig(sm=80), cache,
               {"shared_memory_carveout": 101}, simulate=True)


def test_extensions_prepare_the_arguments_of_each_launch_as_numbas_do():
    ns = notebook_namespace()
    run_cell(ns, SOURCE)
    sig = "void(float32[:], float32[:])"

    r, x = arrays()

    class Scaled:
        """numba's extension protocol: rewrite an argument before the launch."""

        def prepare_args(self, ty, val, **kwargs):
            return ty, (val * 10 if val is x else val)

    cache = KernelCache()
    plain = Kernel(ns["add_table"], [sig], CompileConfig(sm=80), cache, simulate=True).compile(sig)
    extended = Kernel(ns["add_table"], [sig], CompileConfig(sm=80), cache,
                      {"extensions": [Scaled()]}, simulate=True)
    assert extended.compile(sig).cubin == plain.cubin  # the code does not change
    extended[1, 16](r, x)
    assert np.array_equal(r, x * 10 + np.arange(r.size) % 4)
    # a specialized kernel keeps its decorator's options
    special = extended.specialize(r, x)
    r[:] = 0
    special[1, 16](r, x)
    assert np.array_equal(r, x * 10 + np.arange(r.size) % 4)


def test_signatures_are_written_as_numba_writes_them():
    from numba.cuda import types

    from gpucache_ext.pipeline.results import short_type

    ns = notebook_namespace()
    run_cell(ns, SOURCE)
    kernel = Kernel(ns["add_table"], ["void(float32[::1], float32[:])"], CompileConfig(sm=80), KernelCache(),
                    simulate=True)
    result = kernel.compile("void(float32[::1], float32[:])")
    assert result.stages["typing"].components["signature"].shown == "float32[::1], float32[:]"
    assert "(float32[::1], float32[:])" in repr(kernel) and "array(" not in repr(kernel)
    with pytest.raises(LaunchError, match=r"no signature accepts \(int64\[::1\], int64\[::1\]\); "
                                          r"declared: \(float32\[::1\], float32\[:\]\)"):
        kernel[1, 4](np.zeros(4, np.int64), np.zeros(4, np.int64))
    assert short_type(types.Array(types.float32, 2, "F", readonly=True)) == "readonly float32[::1, :]"


def test_a_declared_signature_that_failed_to_compile_is_tried_again_and_still_binds():
    """A kernel's declared signature fails at its first launch (a global it
    calls is missing); once that is fixed the next launch compiles it, and the
    kernel still accepts its declared signatures only."""
    from numba import cuda

    from gpucache_ext import CompileError

    namespace = {"__name__": "declared_retry"}
    exec("from numba import cuda\n"
         "def k(r):\n"
         "    i = cuda.grid(1)\n"
         "    if i < r.size:\n"
         "        r[i] = helper(i)\n", namespace)
    kernel = Kernel(namespace["k"], ["void(float32[:])"], CompileConfig(sm=86), KernelCache())
    r = np.zeros(4, np.float32)
    with pytest.raises(CompileError, match="typing stage failed"):
        kernel.result_for(r)
    namespace["helper"] = cuda.jit(device=True)(lambda i: i * 2.0)
    assert kernel.result_for(r).signature == kernel.declared[0]
    with pytest.raises(LaunchError, match=r"no signature accepts \(float64"):
        kernel.result_for(np.zeros(4, np.float64))
