"""Adversarial round 5 (issue 53): classes of edits earlier rounds did not list.

What a kernel reads through a library module, keyed by what it is now
(a builtin rebound, a numpy scalar or array of an installed package
reassigned or written in place, a class, a numba type or an enum member
rebound) ...

Each compiles the edit sequence through one long-lived cache and must equal
a compile of the same final state in a brand-new `KernelCache` (and, where
the edit changes the code, differ from the first compile).  Every case here
failed on main before this round's fixes.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import operator
import sys
import types

import numpy as np
import pytest

from numba import cuda

from gpucache_ext import CompileConfig, KernelCache, UnsupportedKernelError

from .files import write_source
from .helpers import assert_fresh, reading, run_python

SM86 = CompileConfig(sm=86)
F32 = "void(float32[:])"
F64 = "void(float64[:])"


def check(cache, kernel, sig=F32, config=SM86, before=None):
    """The cache's compile equals a fresh one (and differs from `before`'s cubin)."""
    return assert_fresh(cache, kernel, sig, config, differs_from=before)


@contextlib.contextmanager
def edited(kernel, sig=F32):
    """Compile `kernel` in a long-lived cache; after the block's edit, the cache's compile
    must equal a fresh one and differ from the first."""
    cache = KernelCache()
    before = cache.compile(kernel, sig, SM86)
    yield
    check(cache, kernel, sig=sig, before=before)


# ---------------------------------------------------------------------------
# Values reached through a library module: keyed by what they are now

@pytest.fixture
def patched(monkeypatch):
    """Rebind a library module's attribute for one test (undone after it)."""
    return monkeypatch.setattr


# what is rebound: (module, attribute, the kernel's expression, its signature, the value compiled
# first (None: as the module has it), the value compiled next)
REBOUND = {
    "math.sin = math.cos": (math, "sin", "math.sin(r[0])", F32, None, math.cos),  # (another libdevice call)
    # equal to Python at float32, another constant at float64; then another numpy scalar
    "math.e as numpy scalars": (math, "e", "math.e", F64, np.float32(math.e), np.float32(2.5)),
    "np.sin = np.cos": (np, "sin", "np.sin(r[0])", F32, None, np.cos),
    "np.pi as numpy scalars": (np, "pi", "np.pi", F64, np.float32(3.0), np.float32(2.0)),
    "operator.add = operator.sub": (operator, "add", "operator.add(r[0], 1.0)", F64, None, operator.sub),
}


@pytest.mark.parametrize("case", [pytest.param(case, marks=() if case == "math.sin = math.cos" else pytest.mark.slow)
                                  for case in REBOUND])  # (the quick suite's sample: the builtin)
def test_an_attribute_of_a_library_module_rebound(patched, case):
    module, attribute, expression, sig, first, then = REBOUND[case]
    _, kernel = reading(f"import {module.__name__}\nimport numpy as np\ndef kernel(r):\n    r[0] = {expression}\n")
    cache = KernelCache()
    if first is not None:
        patched(module, attribute, first)
    before = cache.compile(kernel, sig, SM86)
    patched(module, attribute, then)
    check(cache, kernel, sig=sig, before=before)


CONFIG_LIBRARY = """\
import enum
import numpy as np
from numba.cuda import types

SCALE = np.float32(2.5)
TABLE = np.arange(4, dtype=np.float32)
PAIR = (np.float32(1.5), 2)
KIND = types.float32
CAST = np.float32

class Mode(enum.IntEnum):
    FAST = 1
    SLOW = 2

MODE = Mode.FAST
"""


@pytest.fixture
def cfglib(site_library, request):
    """An installed configuration module (a library's file): constants, a table, a type."""
    name = "cfglib_r5_" + request.node.name.split("[")[0][-10:]
    write_source(site_library / name / "__init__.py", CONFIG_LIBRARY)
    yield name, importlib.import_module(name)
    sys.modules.pop(name, None)


def compiled_reading(name, expression, sig=F32):
    _, kernel = reading(f"import {name} as lib\ndef kernel(r):\n    r[0] = {expression}\n")
    cache = KernelCache()
    return cache, kernel, cache.compile(kernel, sig, SM86)


@pytest.mark.slow  # (the quick suite's sample of the class: the builtin, the table, lib.dev)
def test_a_librarys_numpy_scalar_reassigned(cfglib):
    name, lib = cfglib
    cache, kernel, before = compiled_reading(name, "r[0] * lib.SCALE")
    lib.SCALE = np.float32(3.25)
    check(cache, kernel, before=before)


def test_a_librarys_table_written_in_place(cfglib):
    name, lib = cfglib
    cache, kernel, before = compiled_reading(name, "r[0] + lib.TABLE[1]")
    lib.TABLE[1] = 3.25
    before = check(cache, kernel, before=before)
    lib.TABLE = lib.TABLE.astype(np.float64)  # (the same values, another dtype)
    check(cache, kernel, before=before)


@pytest.mark.slow  # (the quick suite's sample of the class: the builtin, the table, lib.dev)
def test_a_librarys_tuple_of_numpy_scalars_reassigned(cfglib):
    name, lib = cfglib
    cache, kernel, before = compiled_reading(name, "r[0] * lib.PAIR[0]")
    lib.PAIR = (np.float32(4.5), 2)
    check(cache, kernel, before=before)


@pytest.mark.slow  # (the quick suite's sample of the class: the builtin, the table, lib.dev)
def test_a_librarys_class_rebound(cfglib):
    """``lib.CAST = np.float64``: the kernel converts to another type."""
    name, lib = cfglib
    cache, kernel, before = compiled_reading(name, "lib.CAST(r[0]) / 3", sig=F64)
    lib.CAST = np.float16
    check(cache, kernel, sig=F64, before=before)


@pytest.mark.slow  # (the quick suite's sample of the class: the builtin, the table, lib.dev)
def test_a_librarys_numba_type_rebound(cfglib):
    from numba.cuda import types

    name, lib = cfglib
    _, kernel = reading(f"import {name} as lib\nfrom numba import cuda\n"
                        "def kernel(r):\n    a = cuda.local.array(2, lib.KIND)\n    a[0] = r[0] / 3\n"
                        "    r[0] = a[0]\n")
    with edited(kernel, F64):
        lib.KIND = types.float64


@pytest.mark.slow  # (the quick suite's sample of the class: the builtin, the table, lib.dev)
def test_a_librarys_enum_member_rebound(cfglib):
    name, lib = cfglib
    cache, kernel, before = compiled_reading(name, "1.0 if lib.MODE == lib.Mode.FAST else 2.0")
    lib.MODE = lib.Mode.SLOW
    check(cache, kernel, before=before)


def installed(site_library, name, text):
    write_source(site_library / name / "__init__.py", text)
    return importlib.import_module(name)


@pytest.fixture
def installs(site_library):
    """Install modules into the site folder for one test (forgotten after it)."""
    names = []

    def install(name, text):
        names.append(name)
        return installed(site_library, name, text)

    yield install
    for name in names:
        sys.modules.pop(name, None)


def test_a_users_device_function_put_into_a_library_module_reads_a_global(installs):
    """``lib.dev = dev``: numba compiles it from the globals it reads, so they key it."""
    holder = installs("holder_r5", "dev = None\n")
    ns, _ = reading("@cuda.jit(device=True)\ndef dev(x):\n    return x * G\n", name="dev", G=2.5)
    holder.dev = ns["dev"]
    _, kernel = reading("import holder_r5\ndef kernel(r):\n    r[0] = holder_r5.dev(r[0])\n")
    with edited(kernel, F64):
        ns["G"] = 3.25


@pytest.mark.slow  # (the quick suite's sample of the class: the builtin, the table, lib.dev)
def test_an_intrinsic_held_by_a_library_module_rebound(installs):

    library = installs("index_r5", "from numba import cuda\nindex = cuda.grid\n")
    _, kernel = reading("import index_r5\ndef kernel(r):\n    r[0] = index_r5.index(1)\n")
    with edited(kernel, F64):
        library.index = cuda.gridsize


@pytest.mark.slow  # (the quick suite's sample of the class: the builtin, the table, lib.dev)
def test_a_library_modules_getattr_serving_a_numpy_scalar_that_changes(installs):
    """A PEP 562 ``__getattr__`` of an installed module: its answer now, not the module's version."""
    library = installs("served_r5", "import numpy as np\nVALUE = [np.float32(2.5)]\n"
                       "def __getattr__(name):\n    if name == 'SCALE':\n        return VALUE[0]\n"
                       "    raise AttributeError(name)\n")
    _, kernel = reading("import served_r5\ndef kernel(r):\n    r[0] = r[0] * served_r5.SCALE\n")
    with edited(kernel):
        library.VALUE[0] = np.float32(3.25)


@pytest.mark.slow  # (the quick suite's sample of the class: the builtin, the table, lib.dev)
def test_a_librarys_dtype_rebound(installs):
    library = installs("dtype_r5", "import numpy as np\nDT = np.dtype('float32')\n")
    _, kernel = reading("import dtype_r5\nfrom numba import cuda\ndef kernel(r):\n"
                        "    a = cuda.local.array(2, dtype_r5.DT)\n    a[0] = r[0] / 3\n    r[0] = a[0]\n")
    with edited(kernel, F64):
        library.DT = np.dtype("float64")


@pytest.mark.slow  # (the quick suite's sample of the class: the builtin, the table, lib.dev)
def test_a_users_array_put_into_a_library_module_written_in_place(installs):
    library = installs("table_r5", "TABLE = None\n")
    mine = np.arange(4, dtype=np.float32)
    library.TABLE = mine
    _, kernel = reading("import table_r5\ndef kernel(r):\n    r[0] = table_r5.TABLE[1]\n")
    with edited(kernel):
        mine[1] = 9.5


@pytest.mark.slow
def test_a_librarys_table_baked_into_constant_memory_written_in_place(cfglib):
    """``cuda.const.array_like(lib.TABLE)``: numba bakes the values, the token must hold them."""
    name, lib = cfglib
    _, kernel = reading(f"import {name} as lib\nfrom numba import cuda\ndef kernel(r):\n"
                        "    t = cuda.const.array_like(lib.TABLE)\n    r[0] = t[1]\n")
    with edited(kernel):
        lib.TABLE[1] = 7.75


@pytest.mark.slow
def test_a_librarys_module_attribute_rebound_to_another_module(installs):
    """``lib.m = othermath`` after ``lib.m = math``: what ``lib.m.cos`` reaches is another function."""
    library = installs("modattr_r5", "import math as m\n")
    other = installs("othermath_r5", "from math import sin as cos\n")
    _, kernel = reading("import modattr_r5\ndef kernel(r):\n    r[0] = modattr_r5.m.cos(r[0])\n")
    with edited(kernel, F64):
        library.m = other


@pytest.mark.slow
def test_a_closure_over_a_library_module_whose_value_changes(cfglib):
    name, lib = cfglib
    ns, _ = reading(f"def make():\n    import {name} as m\n    def kernel(r):\n        r[0] = r[0] * m.SCALE\n"
                    "    return kernel\n", name="make")
    kernel = ns["make"]()
    with edited(kernel):
        lib.SCALE = np.float32(6.5)


@pytest.mark.slow
def test_a_device_functions_read_through_a_library_module(cfglib):
    name, lib = cfglib
    _, kernel = reading(f"import {name} as lib\n@cuda.jit(device=True)\ndef dev(x):\n    return x * lib.SCALE\n"
                        "def kernel(r):\n    r[0] = dev(r[0])\n")
    with edited(kernel):
        lib.SCALE = np.float32(6.5)


@pytest.mark.slow
def test_a_librarys_numpy_float64_a_float_subclass_reassigned(cfglib):
    """``np.float64`` is a subclass of ``float``: by its value, as a numpy scalar."""
    name, lib = cfglib
    lib.SCALE = np.float64(2.5)
    cache, kernel, before = compiled_reading(name, "r[0] * lib.SCALE", sig=F64)
    lib.SCALE = np.float64(3.25)
    check(cache, kernel, sig=F64, before=before)


def test_a_function_importing_a_user_module_in_its_body_is_refused_with_the_fix(tmp_path, monkeypatch):
    """An @overload generator's ``import cfg``: what it reads there is no global; refused, naming the fix."""
    from gpucache_ext.sources import identify

    (tmp_path / "cfg_r5.py").write_text("SCALE = 2.5\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ns, generator = reading("def generator(x):\n    import math\n    import cfg_r5\n    s = cfg_r5.SCALE\n"
                            "    return lambda x: x * s\n", name="generator")
    with pytest.raises(UnsupportedKernelError, match="imports user module cfg_r5 in its body.*import cfg_r5 at "
                                                     "the top of the cell"):
        identify(generator, False)
    _, library_only = reading("def generator(x):\n    from numba.cuda.typing import signature\n"
                              "    return signature\n", name="generator")
    identify(library_only, False)  # (a library's module: keyed by its version)
    sys.modules.pop("cfg_r5", None)


# ---------------------------------------------------------------------------
# Registrations in numba's extension tables made by code that is no installed
# package's file: generated code, and a library's factory closing over the
# caller's value.  numba's tables are process-wide, so each case runs its cells
# in new processes (`test_extensions.compiled`: one long-lived cache against a
# fresh process at every step).

# a lowering for a stub function `op` that multiplies by a constant
OP_LOWERING = """
from numba.cuda import types
from numba.cuda.extending import type_callable, lower_builtin
def op(x):
    pass
@type_callable(op)
def type_op(context):
    def typer(x):
        return x
    return typer
@lower_builtin(op, types.float64)
def lower_op(context, builder, sig, args):
    return builder.fmul(args[0], context.get_constant(types.float64, {k}))
"""
GENERATED = ("import types as _types\nTEMPLATE = " + repr(OP_LOWERING) + "\n{prepare}\n"
             'exec(compile(TEMPLATE.format(k={k}), "<generated>", "exec"), {namespace})\nop = {found}\n')
USES_OP = "def kernel(r):\n    r[0] = op(r[0])\n"
INTO = {
    "a module without a file": ("gen = _types.ModuleType('gen')", "gen.__dict__", "gen.op"),
    "a plain dict": ("gen = {}", "gen", "gen['op']"),
    "the notebook's namespace": ("", "globals()", "op"),
}


def generated(where, k):
    prepare, namespace, found = INTO[where]
    return GENERATED.format(prepare=prepare, namespace=namespace, found=found, k=k)


@pytest.mark.slow  # six processes a case
@pytest.mark.parametrize("where", sorted(INTO))
def test_a_lowering_generated_from_a_template_run_again_with_another_constant(where):
    from .test_extensions import compiled

    seen = compiled([[generated(where, 2.5), USES_OP], [generated(where, 3.25)], [generated(where, 2.5)]],
                    "kernel", F64)
    assert seen[1]["ptx"] != seen[0]["ptx"]


# a library whose factory makes a stub `op`, types it, and registers a lowering (`lower`:
# the caller's value `k` in a closure, or in code it generates from `template`)
OPLIB = '''
from numba.cuda import types
from numba.cuda.extending import type_callable, lower_builtin
{template}

def make_op(k):
    def op(x):
        pass

    @type_callable(op)
    def type_op(context):
        def typer(x):
            return x
        return typer

{lower}
    return op
'''
CLOSING_OVER_K = OPLIB.format(template="", lower='''    @lower_builtin(op, types.float64)
    def lower_op(context, builder, sig, args):
        return builder.fmul(args[0], context.get_constant(types.float64, k))
''')
FACTORY_CELLS = '''
import sys
sys.path.insert(0, {site!r})
import oplib_r5
op = oplib_r5.make_op({k})
'''


@pytest.mark.slow  # four processes
def test_a_librarys_factory_registering_a_lowering_over_the_callers_value(site_library):
    from .test_extensions import compiled

    write_source(site_library / "oplib_r5" / "__init__.py", CLOSING_OVER_K)
    cells = [FACTORY_CELLS.format(site=str(site_library), k=k) for k in (2.5, 3.25)]
    seen = compiled([[cells[0], USES_OP], [cells[1]]], "kernel", F64)
    assert seen[1]["ptx"] != seen[0]["ptx"]


INTRINSIC = '''
from numba.cuda.extending import intrinsic

@intrinsic
def passthrough(typingctx, x):
    from numba.cuda.typing import signature
    return signature(x, x), lambda context, builder, sig, args: args[0]
'''
USES_INTRINSIC = "def kernel(r):\n    r[0] = passthrough(r[0]) * 2\n"


@pytest.mark.slow  # three processes
def test_a_user_intrinsic_leaves_the_typing_token_alone_in_the_process_and_on_disk(tmp_path):
    """numba's template for an ``@intrinsic`` holds its keyword arguments in a
    mapping proxy and fills an ``_overload_cache`` as it types: neither may
    make the next compile, or a new process's, miss."""
    from .test_extensions import STEPS

    steps = json.dumps([[INTRINSIC, USES_INTRINSIC], [], [INTRINSIC, USES_INTRINSIC]])
    first = run_python(STEPS, steps, "kernel", F64, "long", tmp_path, json_line=True)
    assert not any(first[0]["hits"].values())
    assert all(all(step["hits"].values()) for step in first[1:]), [step["hits"] for step in first]
    again = run_python(STEPS, json.dumps([[INTRINSIC, USES_INTRINSIC]]), "kernel", F64, "long", tmp_path,
                       json_line=True)
    assert all(again[0]["hits"].values()) and again[0]["cubin"] == first[0]["cubin"]


def test_what_counts_as_user_code_for_numbas_tables(site_library):
    """The quick suite's sample of the cases above, in-process: code from a
    string is the user's unless run in a library's module; a library's
    function closing over values is keyed by them; numba's own are numba's."""
    from gpucache_ext.sources.usercode import touches_user_code, user_function

    made = {}
    exec(compile("def op(x):\n    return x\n", "<generated>", "exec"), made)
    module = types.ModuleType("gen_r5")
    exec(compile("def op(x):\n    return x\n", "<generated>", "exec"), module.__dict__)
    numbas = {"__name__": "numba.cuda.typing.templates"}
    exec(compile("def op(x):\n    return x\n", "<generated>", "exec"), numbas)
    assert user_function(made["op"]) and user_function(module.op) and not user_function(numbas["op"])
    write_source(site_library / "factory_r5" / "__init__.py",
                 "def make(k):\n    def impl(x):\n        return x * k\n    return impl\n")
    library = importlib.import_module("factory_r5")
    try:
        assert not user_function(library.make) and touches_user_code(library.make(2.5))
    finally:
        sys.modules.pop("factory_r5", None)
    from numba.cuda import cudaimpl

    closures = [entry[0] for entry in cudaimpl.registry.functions
                if isinstance(entry[0], types.FunctionType) and entry[0].__closure__]
    assert closures and not any(touches_user_code(f) for f in closures)


# ---------------------------------------------------------------------------
# A notebook run twice in one kernel compiles nothing the second time

IMPORTS_TYPES = "from numba import types\n"
USES_TYPES = ("def kernel(r):\n    a = cuda.local.array(2, types.float64)\n    a[0] = r[0] / 3\n"
              "    r[0] = a[0]\n")


@pytest.mark.slow  # two processes
def test_from_numba_import_types_run_again_after_the_first_compile_hits():
    """numba binds ``numba.types`` to its redirect module as its compiler
    loads: the import cell run again binds another module object, the same
    types; a library module is keyed by the module it is, not by the name it
    was reached by."""
    from .test_extensions import compiled

    seen = compiled([[IMPORTS_TYPES, USES_TYPES], [IMPORTS_TYPES, USES_TYPES]], "kernel", F64)
    assert all(seen[1]["hits"].values()), seen[1]["why"]


# ---------------------------------------------------------------------------
# numba's simulator turned on inside a cell

FLIPS_THE_SIMULATOR = """
import numpy as np
from numba import cuda, config
before = config.ENABLE_CUDASIM
config.ENABLE_CUDASIM = 1
try:
    @cuda.jit
    def fill(r):
        r[0] = 5

    r = np.zeros(1)
    fill[1, 1](r)
finally:
    config.ENABLE_CUDASIM = before
kind = type(fill).__name__
"""


def test_the_simulator_turned_on_inside_a_cell_is_honoured_from_there_on(ip):
    """numba's ``cuda.jit`` reads the switch as it decorates: a cell that turns
    it on gets simulator kernels, under the magic as without it."""
    kinds = []
    for magic in ("", "%%gpukernel --sm 80 --quiet\n"):
        result = ip.run_cell(magic + FLIPS_THE_SIMULATOR)
        assert result.success, result.error_in_exec
        kinds.append((ip.user_ns["kind"], list(ip.user_ns["r"])))
    assert kinds == [("FakeCUDAKernel", [5.0])] * 2


# ---------------------------------------------------------------------------
# An @overload_method registered again, with another body, reached through a
# device function or a library's function: what either typed under the first
# registration is not reused (in the same process, the same cache)

OVERLOADS_AGAIN = r'''
import hashlib, importlib, json, sys
from tests.helpers import notebook_namespace, run_cell
from numba import cuda

from gpucache_ext import CompileConfig, KernelCache, UnsupportedKernelError

sys.path.insert(0, sys.argv[1])
FIRST = """
from numba.cuda import types
from numba.cuda.extending import overload_method
@overload_method(types.Array, "first_r5", target="cuda")
def one(arr):
    return lambda arr: arr[0] * 2.5
"""
AGAIN = """
@overload_method(types.Array, "first_r5", target="cuda")
def two(arr):
    def impl(arr):
        return arr[1] + 7.0
    return impl
"""
KERNELS = {
    "device function": "@cuda.jit(device=True)\ndef dev(r):\n    return r.first_r5()\n"
                       "def kernel(r):\n    r[0] = dev(r)\n",
    "library function": "import methodlib_r5\ndef kernel(r):\n    r[0] = methodlib_r5.first(r)\n",
    "kernel": "def kernel(r):\n    r[0] = r.first_r5()\n",
}
config = CompileConfig(sm=86)
sha = lambda result: hashlib.sha256(result.ptx.encode()).hexdigest()
namespaces = {}
for name, source in KERNELS.items():
    namespaces[name] = notebook_namespace()
    run_cell(namespaces[name], FIRST if name == "device function" else "from numba.cuda import types")
    run_cell(namespaces[name], source)
cache = KernelCache()
before = {name: sha(cache.compile(ns["kernel"], "void(float64[:])", config)) for name, ns in namespaces.items()}
run_cell(namespaces["device function"], AGAIN)
seen = {}
for name, ns in namespaces.items():
    again = cache.compile(ns["kernel"], "void(float64[:])", config)
    fresh = KernelCache().compile(ns["kernel"], "void(float64[:])", config)
    seen[name] = [before[name] != sha(again), sha(again) == sha(fresh)]
print(json.dumps(seen))
'''
METHODLIB = "import numba\n\n@numba.njit\ndef first(r):\n    return r.first_r5()\n"


@pytest.mark.slow  # a process of its own (numba's tables)
def test_an_overload_method_registered_again_through_device_and_library_functions(site_library):
    write_source(site_library / "methodlib_r5" / "__init__.py", METHODLIB)
    seen = run_python(OVERLOADS_AGAIN, site_library, json_line=True)
    assert seen == {name: [True, True] for name in ("device function", "library function", "kernel")}, seen


# ---------------------------------------------------------------------------
# Registrations collapsed only where numba's choice cannot change: proven on
# tables of every shape (numba picks a key's first fitting registration as it
# types functions and attributes, the last as it types globals and lowers)

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

TABLES = st.lists(st.tuples(st.sampled_from(["user", "user", "user", "library"]), st.integers(0, 3),
                            st.integers(0, 2)), max_size=14)


def _as_extensions_sees(table):
    """The user entries of `table` as `extensions.without_repeats` gets them:
    (description, key, how many library entries precede it), with their places."""
    seen, libraries = [], 0
    for place, (who, described, key) in enumerate(table):
        if who == "library":
            libraries += 1
        else:
            seen.append((place, ([described, key], key, libraries)))
    return seen


def _picks(table):
    """Per key, the entry first-fit and last-fit pick (as described)."""
    keys = {key for _, _, key in table}
    return {key: ([(w, d) for w, d, k in table if k == key][0], [(w, d) for w, d, k in table if k == key][-1])
            for key in keys}


@settings(max_examples=300, deadline=None)
@given(TABLES)
def test_a_tables_repeats_are_left_out_only_where_no_pick_changes(table):
    from gpucache_ext.backends.numba_cuda.extensions import kept_entries

    users = _as_extensions_sees(table)
    kept = {users[at][0] for at in kept_entries([entry for _, entry in users])}
    reduced = [entry for place, entry in enumerate(table) if entry[0] == "library" or place in kept]
    assert _picks(reduced) == _picks(table)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2)), max_size=8), st.integers(1, 3))
def test_a_notebook_of_registrations_run_again_gets_the_first_runs_token(cells, runs):
    """With no library registering in between, running the same registrations
    again (and again) leaves the description as after the first run."""
    from gpucache_ext.backends.numba_cuda.extensions import without_repeats

    once = [([d, k], k, 0) for d, k in cells]
    assert without_repeats(once * runs) == without_repeats(once)


TWICE = """
from numba.cuda.extending import overload
def twice(x):
    return x * 2
@overload(twice, target="cuda")
def twice_impl(x):
    return lambda x: x * 2.0
"""
THRICE = """
def thrice(x):
    return x * 3
@overload(thrice, target="cuda")
def thrice_impl(x):
    return lambda x: x * 3.0
"""
USES_TWICE = "def kernel(r):\n    r[0] = twice(r[0])\n"
LOWERS = OP_LOWERING
LOWERS_AGAIN = """
@lower_builtin(op, types.float64)
def lower_op(context, builder, sig, args):
    return builder.fmul(args[0], context.get_constant(types.float64, {k}))
"""


@pytest.mark.slow  # seven processes
def test_registrations_interleaved_with_a_kernel_a_notebook_run_twice_hits():
    """``twice``, the kernel, ``thrice``; then the same cells again: the second
    ``twice`` changes no lookup, so its kernel hits what the first run built."""
    from .test_extensions import compiled

    seen = compiled([[TWICE, USES_TWICE], [THRICE], [TWICE, USES_TWICE], [THRICE]], "kernel", F64)
    assert not any(seen[0]["hits"].values())
    assert all(step["hits"]["typing"] and step["hits"]["llvm"] for step in seen[2:]), [s["hits"] for s in seen]


@pytest.mark.slow  # eight processes
def test_a_lowering_registered_again_after_another_for_its_key_is_kept():
    """2.5, 3.25, then 2.5 again for the same function: numba lowers with the
    last, so the third is not a repeat of the first."""
    from .test_extensions import compiled

    seen = compiled([[LOWERS.format(k=2.5), "def kernel(r):\n    r[0] = op(r[0])\n"],
                     [LOWERS_AGAIN.format(k=3.25)], [LOWERS_AGAIN.format(k=2.5)], [LOWERS_AGAIN.format(k=2.5)]],
                    "kernel", F64)
    assert seen[1]["ptx"] != seen[0]["ptx"] and seen[2]["ptx"] == seen[0]["ptx"]
    assert all(seen[3]["hits"].values())


# ---------------------------------------------------------------------------
# What code numba runs reads of the environment: an @overload generator
# reading a variable, in one process after another on one disk folder, and
# the variable changed in the process

READS_ENVIRONMENT = r'''
import hashlib, json, os, sys
from tests.helpers import notebook_namespace, run_cell
from numba import cuda

from gpucache_ext import CompileConfig, KernelCache, UnsupportedKernelError

folder, changes = sys.argv[1], json.loads(sys.argv[2])
ns = notebook_namespace()
run_cell(ns, """
import os
from numba.cuda.extending import overload

def scaled(x):
    return x

@overload(scaled, target="cuda")
def scaled_impl(x):
    s = float(os.environ.get("GPUCACHE_TEST_SCALE_R5", "2.5"))
    return lambda x: x * s

def kernel(r):
    r[0] = scaled(r[0])
""")
cache = KernelCache(directory=folder, audit=False)
seen = []
if len(changes) > 1:  # (the typed IR alone, asked first: it types again, as a compile does, without an error)
    os.environ["GPUCACHE_TEST_SCALE_R5"] = changes[0]
    KernelCache(audit=False).typed(ns["kernel"], "void(float64[:])", CompileConfig(sm=86))
for value in changes:
    os.environ["GPUCACHE_TEST_SCALE_R5"] = value
    result = cache.compile(ns["kernel"], "void(float64[:])", CompileConfig(sm=86))
    seen.append({"ptx": hashlib.sha256(result.ptx.encode()).hexdigest(),
                 "hits": [layer.hit for layer in result.stages.values()]})
print(json.dumps(seen))
'''


@pytest.mark.slow  # four processes
def test_an_overload_generator_reading_an_environment_variable(tmp_path):
    """Each process and each value compiles what a brand-new process with no
    cache compiles for that value; the same value hits on disk."""
    def run(folder, *values):
        return run_python(READS_ENVIRONMENT, folder, json.dumps(values), json_line=True)

    first = run(tmp_path / "shared", "2.5")[0]
    other = run(tmp_path / "shared", "3.25")[0]
    again = run(tmp_path / "shared", "2.5")[0]
    in_process = run(tmp_path / "own", "2.5", "3.25", "2.5")
    fresh = {value: run(tmp_path / f"fresh-{value}", value)[0]["ptx"] for value in ("2.5", "3.25")}
    assert first["ptx"] == again["ptx"] == fresh["2.5"] != other["ptx"] == fresh["3.25"]
    assert not any(other["hits"]) and again["hits"][1:] == [True, True, True]
    assert [step["ptx"] for step in in_process] == [fresh["2.5"], fresh["3.25"], fresh["2.5"]]


def test_what_is_recorded_of_the_environment_inside_numbas_pipeline():
    """The quick suite's sample: a read by user code (through ``os.getenv``,
    ``get``, ``in``) is recorded and restarts the compile once; numba's own
    re-read of every variable (its settings) is not."""
    import os

    from numba.core import config as numba_config

    from gpucache_ext.backends.numba_cuda import environment

    names = ["GPUCACHE_TEST_R5_GETENV", "GPUCACHE_TEST_R5_GET", "GPUCACHE_TEST_R5_IN"]
    try:
        with pytest.raises(environment.NewEnvironmentReads, match="GPUCACHE_TEST_R5_GET, GPUCACHE_TEST_R5_GETENV"):
            with environment.recorded():
                numba_config.reload_config()
                os.getenv(names[0])
                os.environ.get(names[1])
                _ = names[2] in os.environ
        assert set(names) <= set(environment.known()) and "PATH" not in environment.known()
        with environment.recorded():  # (known now: no restart)
            os.getenv(names[0])
        assert "environment GPUCACHE_TEST_R5_GET" in environment.environment_components()  # (a miss names it)
    finally:
        environment._KNOWN.difference_update(names)


def test_a_read_through_a_library_is_whoever_called_its():
    """A library (platformdirs, the standard library's frozen posixpath)
    reads for its caller: the package's own reads through them inside
    numba's pipeline are not the kernel's (the first ``supported_ccs`` of a
    process, asked during a compile, put HOME into the typing token: tokens
    then followed the order of a process's first calls); user code's are."""
    import os

    from gpucache_ext.backends.numba_cuda import environment
    from gpucache_ext.store.disk import configured_directory

    known = set(environment.known())
    try:
        with environment.recorded():
            configured_directory()  # (the package -> platformdirs -> posixpath -> os.environ)
        assert set(environment.known()) == known
        if "HOME" not in known:
            with pytest.raises(environment.NewEnvironmentReads, match="HOME"):
                with environment.recorded():
                    os.path.expanduser("~")  # (user code -> posixpath -> os.environ)
    finally:
        environment._KNOWN.difference_update(set(environment.known()) - known)


TEMPLATING_LIBRARY = OPLIB.format(template='''
TEMPLATE = """
def lower_op(context, builder, sig, args):
    return builder.fmul(args[0], context.get_constant(types.float64, {k}))
"""
''', lower='''    namespace = {"types": types}
    exec(compile(TEMPLATE.format(k=k), __file__, "exec"), namespace)  # (under the library's own file name)
    lower_builtin(op, types.float64)(namespace["lower_op"])
''')


@pytest.mark.slow  # four processes
def test_a_librarys_factory_registering_a_lowering_it_generates_under_its_own_file_name(site_library):
    """No closure holds the caller's value: the generated code does.  A
    function a library makes as it runs is keyed by its code."""
    from .test_extensions import compiled

    write_source(site_library / "oplib_r5" / "__init__.py", TEMPLATING_LIBRARY)
    cells = [FACTORY_CELLS.format(site=str(site_library), k=k) for k in (2.5, 3.25)]
    seen = compiled([[cells[0], USES_OP], [cells[1]]], "kernel", F64)
    assert seen[1]["ptx"] != seen[0]["ptx"]
