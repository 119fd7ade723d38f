"""numba's extension API in user code: registrations are inputs of typing.

What a notebook registers with ``typeof_impl``, ``type_callable``,
``register_model``, ``make_attribute_wrapper``, ``lower_builtin``,
``lower_cast``, ``@overload``, ``@overload_method``, ``@overload_attribute``
and ``@intrinsic`` lives in numba's process-wide tables, so each test runs
its cells in fresh processes (the test process's tables stay as they are).
The proof is by difference: a sequence of cells, each followed by a compile
in one long-lived cache, must give at every step the artifacts a fresh
process gives for the same cells compiled once; a change to any
registration recompiles, an unchanged state hits, on disk too.
"""

import json

import pytest

from .helpers import run_python
from .tutorial_notebooks import INTERVAL  # numba's "extending" tutorial's interval type, for CUDA

WIDTHS = """
def widths(r, lo, hi):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = Interval(lo[i], hi[i]).width
"""
WIDTHS_SIG = "void(float64[:], float64[:], float64[:])"

# Compiles the kernel after each step's cells, in one cache ("long"), or once
# after all the cells ("fresh"); prints what each compile gave.
STEPS = r"""
import hashlib, json, sys
from tests.helpers import notebook_namespace, run_cell
from gpucache_ext import CompileConfig, KernelCache
steps, kernel, sig, mode = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
folder = sys.argv[5] if len(sys.argv) > 5 else None
ns = notebook_namespace()
cache = KernelCache(directory=folder, audit=False)
sha = lambda data: hashlib.sha256(data if isinstance(data, bytes) else data.encode()).hexdigest()
seen = []

def compile_now():
    result = cache.compile(ns[kernel], sig, CompileConfig(sm=86))
    seen.append({"ptx": sha(result.ptx), "cubin": sha(result.cubin), "text": result.ptx,
                 "hits": {s: layer.hit for s, layer in result.stages.items()},
                 "why": [" ".join(layer.reasons) for layer in result.stages.values()]})

for cells in steps:
    for source in cells:
        run_cell(ns, source)
    if mode == "long":
        compile_now()
if mode == "fresh":
    compile_now()
print(json.dumps(seen))
"""


def compiled(steps, kernel, sig, folder=None):
    """Each step's compile in one long-lived cache, and a fresh process's compile of each step's state."""
    long = run_python(STEPS, json.dumps(steps), kernel, sig, "long", *([folder] if folder else []), json_line=True)
    fresh = [run_python(STEPS, json.dumps(steps[:at + 1]), kernel, sig, "fresh", json_line=True)[0]
             for at in range(len(steps))]
    for at, (mine, theirs) in enumerate(zip(long, fresh)):
        assert (mine["ptx"], mine["cubin"]) == (theirs["ptx"], theirs["cubin"]), f"step {at}: stale"
    return long


@pytest.mark.slow  # seven processes; the quick suite's sample: the disk hit below
def test_the_interval_tutorial_compiles_and_every_edit_of_a_registration_recompiles():
    lowering_swapped = INTERVAL.replace("interval.lo, interval.hi = args", "interval.hi, interval.lo = args")
    steps = [
        [INTERVAL, "WIDTH_SCALE = 1.0", WIDTHS],  # the tutorial as written
        [],  # nothing changed: every stage hits
        ["WIDTH_SCALE = 2.5"],  # a global the @overload_attribute's implementation reads
        [lowering_swapped],  # the lowering redefined (a cell run again with an edit)
        [lowering_swapped],  # the same cell run once more
        [INTERVAL],  # the first lowering again, registered after the swapped one: it wins again
    ]
    seen = compiled(steps, "widths", WIDTHS_SIG)
    first, again, scaled, swapped, rerun, reverted = seen
    assert "sub.f64" in first["text"] or "sub.rn.f64" in first["text"]
    assert not any(first["hits"].values())
    assert all(again["hits"].values())
    assert scaled["ptx"] != first["ptx"] and "4004000000000000" in scaled["text"].upper()  # 2.5
    assert not swapped["hits"]["typing"] and swapped["ptx"] != scaled["ptx"]
    assert "numba extensions" in " ".join(swapped["why"])
    # registered again, the same: numba picks as before (extensions.without_repeats), so all hits
    assert all(rerun["hits"].values()) and rerun["ptx"] == swapped["ptx"]
    assert not reverted["hits"]["typing"] and reverted["ptx"] == scaled["ptx"]  # (and what a fresh process gives)


@pytest.mark.slow  # five processes; the quick suite's sample: the disk hit below
def test_user_overloads_methods_and_intrinsics_compile_and_track_their_edits():
    definitions = """
    import math
    from numba.cuda import types
    from numba.cuda.extending import intrinsic, overload, overload_method

    def triple(x):
        return x * 3

    @overload(triple, target="cuda")
    def triple_impl(x):
        return lambda x: x * FACTOR

    @intrinsic
    def passthrough(typingctx, x):
        from numba.cuda.typing import signature
        return signature(x, x), lambda context, builder, sig, args: args[0]

    @overload(math.perm, target="cuda")
    def perm_impl(n, k):
        return lambda n, k: n * k + OFFSET

    @overload_method(types.Array, "doubled_first", target="cuda")
    def doubled_first(arr):
        return lambda arr: arr[0] * 2
    """
    kernel = """
    def kernel(r):
        r[0] = triple(r[0]) + passthrough(r[1]) + math.perm(5, 2) + r.doubled_first()
    """
    seen = compiled([[definitions, "FACTOR = 3\nOFFSET = 0", kernel], ["FACTOR = 7"], ["OFFSET = 11"], []],
                    "kernel", "void(float32[:])")
    base, factor, offset, same = seen
    assert len({base["ptx"], factor["ptx"], offset["ptx"]}) == 3
    assert all(same["hits"].values())


@pytest.mark.slow  # two interpreters (the next test's new process hits as well, quick)
def test_a_new_process_with_the_same_registrations_hits_on_disk(tmp_path):
    steps = [[INTERVAL, "WIDTH_SCALE = 1.0", WIDTHS]]
    first = run_python(STEPS, json.dumps(steps), "widths", WIDTHS_SIG, "long", tmp_path, json_line=True)[0]
    second = run_python(STEPS, json.dumps(steps), "widths", WIDTHS_SIG, "long", tmp_path, json_line=True)[0]
    assert not any(first["hits"].values())
    assert all(second["hits"].values())  # (typing: not needed, the llvm entry on disk)
    assert second["cubin"] == first["cubin"]


def test_a_cached_compile_loads_none_of_numbas_declarations_and_keys_the_registrations_alike(tmp_path):
    """numba's contexts are not refreshed to read its tables: a process
    whose every stage is on disk loads none of numba's remaining declaration
    modules (hundreds of milliseconds at its first launch), and the
    registrations key the same whether a compile of numba's refreshed them
    or not: a new process hits what one that compiled another kernel first
    built."""
    script = STEPS.replace("for cells in steps:", """if mode == "refreshed":
    from tests import kernels
    KernelCache(audit=False).compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=86), force=True)
    mode = "fresh"
for cells in steps:""").replace("print(json.dumps(seen))", """from numba.cuda.descriptor import cuda_target
seen.append({"fp16": "numba.cuda.fp16" in sys.modules, "installed": len(cuda_target.typing_context._registries)})
print(json.dumps(seen))""")
    steps = json.dumps([[INTERVAL, "WIDTH_SCALE = 1.0", WIDTHS]])
    built, refreshed = run_python(script, steps, "widths", WIDTHS_SIG, "refreshed", tmp_path, json_line=True)
    assert not any(built["hits"].values()) and refreshed["fp16"] and refreshed["installed"]
    found, numbas = run_python(script, steps, "widths", WIDTHS_SIG, "fresh", tmp_path, json_line=True)
    assert all(found["hits"].values()) and found["cubin"] == built["cubin"]
    assert not numbas["fp16"] and numbas["installed"] == 0  # (nothing of numba's refreshed)


def test_without_registrations_in_user_code_tokens_are_as_before():
    seen = run_python("""
        import json
        from gpucache_ext import CompileConfig, KernelCache
        from gpucache_ext.backends.numba_cuda.extensions import extensions_component, user_registrations
        from tests import kernels
        tokens = KernelCache().tokens(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=86))
        print(json.dumps({"component": extensions_component() is None, "registrations": len(user_registrations()),
                          "names": sorted(tokens["typing"].components)}))
        """, json_line=True)
    assert seen["component"] and seen["registrations"] == 0
    assert "numba extensions" not in seen["names"]


@pytest.mark.slow  # an IPython shell in a fresh process, and one more to compare with
def test_the_tutorial_in_cells_under_the_magic_recompiles_after_an_edit_and_agrees_with_a_fresh_process():
    script = r"""
    import json, hashlib, sys
    from IPython.testing.globalipapp import start_ipython
    cells = json.loads(sys.argv[1])
    ip = start_ipython()
    ip.run_line_magic("load_ext", "gpucache_ext")
    seen = []
    for cell in cells:
        result = ip.run_cell(cell)
        result.raise_error()
        if cell.startswith("%%gpukernel"):
            last = ip.user_ns["widths"].last
            seen.append({"ptx": hashlib.sha256(last.ptx.encode()).hexdigest(),
                         "hits": {s: layer.hit for s, layer in last.stages.items()}})
    print(json.dumps(seen))
    """
    kernel = ("%%gpukernel --sm 86 --quiet\nfrom numba import cuda\n"
              "@cuda.jit('" + WIDTHS_SIG + "')" + WIDTHS)
    edited = INTERVAL.replace("* WIDTH_SCALE", "* WIDTH_SCALE + 1.0")
    cells = ["from numba import cuda\n" + INTERVAL, "WIDTH_SCALE = 1.0", kernel, kernel, edited, kernel]
    first, again, after_edit = run_python(script, json.dumps(cells), json_line=True)
    assert all(again["hits"].values()) and not after_edit["hits"]["typing"]
    assert after_edit["ptx"] != first["ptx"]
    # a fresh process given the same cells, compiling only at the end, agrees
    fresh, = run_python(script, json.dumps(cells[:2] + cells[4:]), json_line=True)
    assert fresh["ptx"] == after_edit["ptx"] and not any(fresh["hits"].values())


def test_user_code_is_found_however_a_registered_value_holds_it():
    """The walk's shortcuts (values looked up without raising, library
    classes not walked) still find user code wherever a value can hold it:
    an instance's ``py_func``, a class property, ``__getattr__``, a closure,
    a numba-made class around it; and a library's own values stay library."""
    import numpy as np
    from numba.cuda.typing.templates import AbstractTemplate

    from gpucache_ext.sources.usercode import touches_user_code
    from .helpers import notebook_namespace, run_cell

    ns = notebook_namespace()
    run_cell(ns, """
        def user(x):
            return x
        class Held:
            pass
        def closing():
            return lambda: user
    """)
    user = ns["user"]

    class ByInstance:  # (a dispatcher: py_func in the instance's dict)
        def __init__(self):
            self.py_func = user

    class ByProperty:
        @property
        def _defn(self):  # (an @intrinsic's, as a property)
            return user

    class ByGetattr:
        def __getattr__(self, name):
            if name == "py_func":
                return user
            raise AttributeError(name)

    class Slotted:
        __slots__ = ("py_func",)

        def __init__(self):
            self.py_func = user

    made = type("Template", (AbstractTemplate,), {"key": ns["closing"]()})  # numba's type()'d template
    # the shortcuts once the walk has met a library's classes and functions: a library function's
    # closure (numba's lowering wrappers), a static method in a template made around user code, a
    # library class's instance holding a user function
    import numba.cuda.cudaimpl as library_module
    from numba.cuda import types as nbtypes

    library_code = {}
    exec(compile("def wrap(f):\n    def lowered(*args):\n        return f(*args)\n    return lowered\n",
                 library_module.__file__, "exec"), library_code)
    wrapped = library_code["wrap"](user)
    library_only = library_code["wrap"](len)
    static = type("StaticTemplate", (AbstractTemplate,), {"key": len, "generic": staticmethod(user),
                                                         "other": staticmethod(library_code["wrap"])})
    held_by_library = Slotted()  # (a slotted class: its py_func slot is read)
    touches = (user, ns["Held"], ByInstance(), ByProperty(), ByGetattr(), held_by_library, (1, ("a", made)), made,
               wrapped, (AbstractTemplate, library_only, wrapped), static, (nbtypes.float32, static))
    plain = (np.add, {"k": user}, AbstractTemplate, (AbstractTemplate, np.float32, 3), len, "user", library_only,
             (nbtypes.int64, AbstractTemplate, staticmethod(library_code["wrap"])),
             nbtypes.Function(type("LibraryTemplate", (AbstractTemplate,), {"key": len})))
    for _ in range(2):  # (the second time, with every memo of the first)
        for value in touches:
            assert touches_user_code(value), value
        for value in plain:
            assert not touches_user_code(value), value  # (a dict is not walked, as before)


READS_SCRIPT = '''
import json
from gpucache_ext import CompileConfig, KernelCache
from gpucache_ext.backends.numba_cuda import extensions
from tests.helpers import notebook_namespace, run_cell

namespace = notebook_namespace()
run_cell(namespace, """
from numba.cuda.extending import intrinsic

@intrinsic
def passthrough_twice(typingctx, x):
    from numba.cuda.typing import signature
    return signature(x, x), lambda context, builder, sig, args: args[0]

def kernel(r):
    r[0] = passthrough_twice(r[1])
""")
cache = KernelCache()
config = CompileConfig(sm=86)
cache.compile(namespace["kernel"], "void(float32[:])", config)  # (the tables looked at once)
reads = []
real = extensions._containers
extensions._containers = lambda: reads.append(1) or real()
other = cache.compile(namespace["kernel"], "void(float32[:])", config.replace(fastmath=True))  # lowers
built = [len(reads), other.stages["llvm"].hit]
reads.clear()
again = cache.compile(namespace["kernel"], "void(float32[:])", config.replace(fastmath=True))
hit = [len(reads), again.hit]
fresh = KernelCache().compile(namespace["kernel"], "void(float32[:])", config.replace(fastmath=True))
print(json.dumps({"built": built, "hit": hit,
                  "same_token": fresh.stages["llvm"].token == other.stages["llvm"].token}))
'''


def test_a_compile_reads_numbas_tables_once_a_hit_and_again_only_around_numbas_own_runs():
    """What numba registers during a compile is derived (left out of the
    tokens); the tables are read for that only once numba's pipeline is about
    to run, so an exact repeat reads them once (its token), and a compile
    that types and lowers still tells what numba registered meanwhile (the
    intrinsic's lowering, registered as numba types it): its repeat hits.
    In a new process: the intrinsic stays registered in the process that
    defined it, and other tests' tokens must not see it."""
    found = run_python(READS_SCRIPT, json_line=True)
    assert found["built"] == [1 + 2, False]  # the token; before and after numba ran
    assert found["hit"] == [1, True]  # the token alone
    assert found["same_token"]  # (nothing numba derived became an input)


def test_numbas_modules_are_read_again_only_where_they_changed_and_the_registries_are_those_a_full_read_finds():
    seen = run_python("""
        import json, sys, types
        from gpucache_ext.backends.numba_cuda import extensions
        from numba.cuda.typing.templates import Registry

        def fresh():  # every module read again
            extensions._FOUND_REGISTRIES = None
            extensions._MODULE_REGISTRIES.clear()
            return [id(r) for r, _ in extensions._registries()]

        def again():  # as a compile after a cell reads them
            extensions._FOUND_REGISTRIES = None
            return [id(r) for r, _ in extensions._registries()]

        first = fresh()
        held = dict(extensions._MODULE_REGISTRIES)
        probe = sys.modules["numba_cuda._gpucache_probe"] = types.ModuleType("numba_cuda._gpucache_probe")
        import numba.cuda.fp16  # noqa: F401  (modules loaded since: read then)
        loaded = again()
        # (a module whose namespace is as it was is not read again: its entry is the one held)
        kept = all(extensions._MODULE_REGISTRIES[name] is entry for name, entry in held.items()
                   if len(sys.modules[name].__dict__) == entry[1])
        loaded_alike = loaded == fresh()
        probe.registry = Registry()  # a module's namespace grew since it was read
        grown = again()
        print(json.dumps({"first": len(first), "loaded": loaded_alike, "kept": kept, "new": len(loaded) > len(first),
                          "grown": grown == fresh() and id(probe.registry) in grown}))
        """, json_line=True)
    assert seen == {"first": seen["first"], "loaded": True, "kept": True, "new": True, "grown": True}
    assert seen["first"] > 0
