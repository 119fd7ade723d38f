"""Device functions (and kernels) declared with argument-only signatures.

numba-cuda accepts ``cuda.jit(["(int64, int64)", "(float64, float64)"],
device=True)``: it compiles the function once per signature, inferring each
return type, turns compiling off, and types every call against those
signatures (arguments converted; of several equally good ones the first
declared).  Of several signatures with the same argument types, the first
alone counts: numba compiles it, then finds those arguments compiled and
skips the others (dispatcher.py ``compile_device``).  The magic and
``gpucache_ext.jit(..., device=True)`` keep the function lazy but record the
signatures; every kernel here is compared with numba-cuda's own compile of the
same code for sm_86 (tests/equivalence.py).
"""

from __future__ import annotations

import types

import pytest
from numba.cuda import types as nbtypes

import gpucache_ext
from gpucache_ext import CompileConfig, KernelCache

from . import corpus
from .equivalence import normalise_ptx, numba_ptx, stand_in_gpu
from .helpers import notebook_namespace, run_cell

SM86 = CompileConfig(sm=86)


def add(a, b):
    return a + b


def div(a, b):
    return a / b


def call(r, x, y):
    r[0] = dev(x, y)  # noqa: F821 (the device function, bound per test)


def calling(device):
    """`call` reading `device` as its global ``dev``."""
    return types.FunctionType(call.__code__, {"dev": device}, "call")


def numbas(pyfunc, sigs, kernel_sig):
    """numba-cuda's PTX for `call` calling ``cuda.jit(sigs, device=True)(pyfunc)``
    (compiled at once, for a stand-in sm_86 GPU), and that dispatcher."""
    from numba import cuda

    with stand_in_gpu():
        device = cuda.jit(sigs, device=True)(pyfunc)
    return normalise_ptx(numba_ptx(calling(device), kernel_sig)), device


def ours(pyfunc, sigs, kernel_sig, cache=None):
    """The PTX of `call` calling ``gpucache_ext.jit(sigs, device=True)(pyfunc)``, compiled for sm_86."""
    device = gpucache_ext.jit(sigs, device=True)(pyfunc)
    return normalise_ptx((cache or KernelCache()).compile(calling(device), kernel_sig, SM86).ptx)


def magic(ip, body, line="--sm 86 --quiet"):
    """Run a ``%%gpukernel`` cell (``from numba import cuda`` first); raise what it raised."""
    ip.run_cell(f"%%gpukernel {line}\nfrom numba import cuda\n{body}").raise_error()
    return ip.user_ns


DEVICE = """
@cuda.jit({sigs}device=True)
def add(a, b):
    return a {op} b
"""

# kernel -> its signature; each stores what add returns
KERNELS = {"as_int": "void(int64[:], int64, int64)",
           "as_float": "void(float64[:], float64, float64)",
           # float32 arguments take the float64 signature (converted, as numba converts them)
           "converted": "void(float64[:], float32, float32)"}


def add_cell(sigs, op="+", decorated=True):
    """A cell of `add` (`sigs`: the decorator's first arguments) and the `KERNELS`
    calling it, decorated with their signatures (else plain functions)."""
    kernels = "".join((f'@cuda.jit("{sig}")\n' if decorated else "") + f"def {name}(r, x, y):\n    r[0] = add(x, y)\n\n"
                      for name, sig in KERNELS.items())
    return DEVICE.format(sigs=sigs, op=op) + "\n" + kernels


def numbas_cell(sigs, op="+"):
    """numba-cuda's PTX of each of `KERNELS` in `add_cell` run as a plain cell
    (its device function compiled at once, for a stand-in sm_86 GPU)."""
    ns = notebook_namespace()
    with stand_in_gpu():
        run_cell(ns, add_cell(sigs, op, decorated=False))
    return {name: normalise_ptx(numba_ptx(ns[name], sig)) for name, sig in KERNELS.items()}


INT_AND_FLOAT = '["(int64, int64)", "(float64, float64)"], '


def test_int64_and_float64_argument_only_signatures_compile_as_numba_compiles(ip):
    ns = magic(ip, add_cell(INT_AND_FLOAT))
    expected = numbas_cell(INT_AND_FLOAT)
    for name in KERNELS:
        assert normalise_ptx(ns[name].ptx) == expected[name], name
    assert "add.s64" in ns["as_int"].ptx and "add.f64" in ns["as_float"].ptx
    assert "cvt.f64.f32" in ns["converted"].ptx and "add.f64" in ns["converted"].ptx


def test_an_inferred_return_type_other_than_the_arguments_is_numbas():
    # int32 / int32 is float64: numba infers that return type, and the kernel stores it unconverted
    sigs, kernel_sig = ["(int32, int32)"], "void(float64[:], int32, int32)"
    expected, device = numbas(div, sigs, kernel_sig)
    assert device.overloads[(nbtypes.int32, nbtypes.int32)].signature.return_type == nbtypes.float64
    assert ours(div, sigs, kernel_sig) == expected
    assert "div.rn.f64" in expected and "cvt.rn.f64.s32" in expected
    # stored into an int32 array, the float64 result is converted by the caller, as in numba
    kernel_sig = "void(int32[:], int32, int32)"
    expected, _ = numbas(div, sigs, kernel_sig)
    assert ours(div, sigs, kernel_sig) == expected and "cvt.rzi.s32.f64" in expected


@pytest.mark.parametrize("sigs, kernel_sig", [
    # a full and an argument-only signature, each call taking its own
    (["float32(float32, float32)", "(int64, int64)"], "void(float64[:], float32, float32)"),
    (["float32(float32, float32)", "(int64, int64)"], "void(int64[:], int64, int64)"),
    # the same argument types twice: numba keeps the first, its return type declared or inferred
    (["float64(int64, int64)", "(int64, int64)"], "void(float64[:], int64, int64)"),
    (["(int64, int64)", "float64(int64, int64)"], "void(float64[:], int64, int64)"),
    (["(int64, int64)", "float64(int64, int64)", "(float64, float64)"], "void(int64[:], float32, float32)"),
])
def test_full_and_argument_only_signatures_mixed_compile_as_numba_compiles(sigs, kernel_sig):
    expected, _ = numbas(add, sigs, kernel_sig)
    assert ours(add, sigs, kernel_sig) == expected


def test_through_gpucache_ext_jit_for_each_declared_type():
    sigs = ["(int64, int64)", "(float64, float64)"]
    cache = KernelCache()
    for kernel_sig in ["void(int64[:], int64, int64)", "void(float64[:], float64, float64)",
                       "void(int64[:], float64, float64)"]:  # (an unsafe conversion numba makes all the same)
        expected, _ = numbas(add, sigs, kernel_sig)
        assert ours(add, sigs, kernel_sig, cache) == expected, kernel_sig


def test_an_edit_of_the_device_function_recompiles(ip):
    first = magic(ip, add_cell(INT_AND_FLOAT))["as_int"].last
    assert "add.s64" in first.ptx
    again = magic(ip, add_cell(INT_AND_FLOAT))["as_int"].last
    assert again.hit and again.cubin == first.cubin
    edited = magic(ip, add_cell(INT_AND_FLOAT, "-"))["as_int"].last
    assert not edited.stages["typing"].hit
    assert "device function add: code changed" in edited.stages["typing"].reasons
    assert "sub.s64" in edited.ptx and "add.s64" not in edited.ptx
    assert normalise_ptx(edited.ptx) == numbas_cell(INT_AND_FLOAT, "-")["as_int"]


def test_the_declared_signatures_are_in_the_token_as_written(ip):
    def compiled(sigs):
        return magic(ip, add_cell(sigs))["as_int"].last

    int_only = compiled('["(int64, int64)"], ')
    both = compiled(INT_AND_FLOAT)
    # another set of signatures is another typing token, named as the user wrote it (no "None(...)")
    assert not both.stages["typing"].hit
    assert both.stages["typing"].reasons == (
        "device function add: declared signatures (int64, int64) -> (int64, int64); (float64, float64)",)
    full = compiled('["int64(int64, int64)", "(float64, float64)"], ')
    assert full.stages["typing"].token != both.stages["typing"].token
    undeclared = compiled("")
    assert undeclared.stages["typing"].token not in {int_only.stages["typing"].token, both.stages["typing"].token}
    # a signature numba skips (its argument types declared before) changes nothing
    skipped = compiled('["(int64, int64)", "(float64, float64)", "float32(int64, int64)"], ')
    assert skipped.hit and skipped.stages["typing"].token == both.stages["typing"].token


KERNEL_CELL = '''
@cuda.jit("(float32[:], float32)")
def scaled(r, a):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = r[i] * a
'''


def test_kernels_with_argument_only_signatures_compile_as_numba_compiles(ip):
    ns = magic(ip, KERNEL_CELL)
    expected = numba_ptx(ns["scaled"].py_func, "(float32[:], float32)")
    assert normalise_ptx(ns["scaled"].ptx) == normalise_ptx(expected)

    def scaled(r, a):
        r[0] = r[0] * a

    kernel = gpucache_ext.jit("(float32[:], float32)")(scaled)  # (compiled now, for the current GPU or sm_86)
    sm = kernel.last.config.sm
    assert normalise_ptx(kernel.ptx) == normalise_ptx(numba_ptx(scaled, "void(float32[:], float32)",
                                                                cc=divmod(sm, 10)))


@pytest.mark.slow
def test_numbas_explicit_signature_device_tests_are_equivalent():
    # numba-cuda's test_explicit_signatures_device* kernels, through the corpus harness
    records = corpus.collect(["numba.cuda.tests.cudapy.test_dispatcher"], "default")
    print(corpus.table(records))
    usecases = [r for r in records if (r.get("kernel") or "").startswith("TestDispatcher.add_device_usecase")]
    assert len(usecases) >= 4, records
    assert all(r["outcome"] == "equivalent" for r in usecases), usecases



@pytest.mark.parametrize("decorate", ["numba", "gpucache_ext"])
def test_the_compile_api_given_a_device_function_says_what_to_compile_instead(decorate):
    """numba-cuda's ``add`` device function with its argument-only signature,
    handed to `KernelCache.compile` (which compiles kernels): refused by name
    with the fix, not a typing error about a return value; nothing is cached."""
    from numba import cuda

    jit = cuda.jit if decorate == "numba" else gpucache_ext.jit
    device = jit(device=True)(add)
    cache = KernelCache()
    with pytest.raises(gpucache_ext.UnsupportedKernelError, match=r"add is a device function .*compile a kernel "
                                                                    r"that calls add"):
        cache.compile(device, "(int64, int64)", SM86)
    assert sum(stats.entries for stats in cache.stats().stages.values()) == 0
