"""Every patch of numba-cuda is declared in gpucache_ext.backends.numba_cuda.numba_compat, applied
once (on the first compile), and checked against numba's signatures: an
upgrade that changes a patched function fails here, before it can change what
the cache builds.  So is every other value gpucache_ext gives numba's state
(`SWAPS`, `SETTINGS`): its attribute must still be there, each swap gives
numba's value back, and no other module assigns to numba's state."""

import ast
import inspect
from pathlib import Path

import pytest

from gpucache_ext.backends.numba_cuda import numba_compat
from gpucache_ext.backends.numba_cuda import stages

from .helpers import run_python


@pytest.mark.parametrize("patch", numba_compat.PATCHES, ids=lambda p: p.target.split(":")[1])
def test_numbas_signature_is_the_one_the_patch_was_written_against(patch):
    assert numba_compat.numba_signature(patch.target) == patch.signature, (
        f"numba-cuda changed {patch.target}; read its new code, then update the replacement "
        f"in gpucache_ext.backends.numba_cuda.stages and the patch ({patch.why})")


def test_every_patch_is_installed_once_and_keeps_numbas_original():
    stages.install_patches()  # (what the first compile does)
    installed = numba_compat.installed()
    assert set(installed) == {patch.target for patch in numba_compat.PATCHES}
    for patch in numba_compat.PATCHES:
        owner, attribute = numba_compat._owner(patch.target)
        current = inspect.getattr_static(owner, attribute)
        assert numba_compat._unwrap(current, patch.kind) is not installed[patch.target]  # replaced
        assert numba_compat.original(patch.target) is installed[patch.target]
    before = {patch.target: inspect.getattr_static(*numba_compat._owner(patch.target))
              for patch in numba_compat.PATCHES}
    numba_compat.install({patch.target: (lambda original: original) for patch in numba_compat.PATCHES})
    after = {patch.target: inspect.getattr_static(*numba_compat._owner(patch.target))
             for patch in numba_compat.PATCHES}
    assert before == after  # a second install changes nothing


def test_a_missing_replacement_is_refused_before_anything_is_patched():
    with pytest.raises(ValueError, match="no replacement given for"):
        numba_compat.install({})


def test_importing_the_pipeline_patches_nothing_the_first_compile_patches_all():
    seen = run_python("""
        import json
        from gpucache_ext import CompileConfig
        from gpucache_ext.backends.numba_cuda import numba_compat
        from gpucache_ext.backends.numba_cuda import stages
        before = sorted(numba_compat.installed())

        def kernel(out):
            out[0] = 1.0

        stages.run_typing(kernel, stages.normalize_signature("void(float32[:])"), CompileConfig(sm=80),
                          kernel=True)
        print(json.dumps({"before": before, "after": sorted(numba_compat.installed())}))
    """, json_line=True)
    assert seen == {"before": [], "after": sorted(patch.target for patch in numba_compat.PATCHES)}


@pytest.mark.parametrize("swap", numba_compat.SWAPS + numba_compat.SETTINGS, ids=lambda s: s.target)
def test_each_attribute_given_a_value_of_ours_is_still_numbas(swap):
    assert numba_compat.swap_target_exists(swap), (
        f"numba-cuda has no {swap.target} any more; read its new code, then update "
        f"numba_compat.{swap.by} and the swap ({swap.why})")
    assert callable(getattr(numba_compat, swap.by))


def _swapped(name):
    """The context manager of swap `name`, given a value of ours; what reads
    numba's value now; the value it must have inside the block."""
    import numba.cuda
    from numba.cuda import cudaimpl
    from numba.cuda.core import config, ir_utils
    from numba.cuda.cudadrv import nvrtc
    from numba.cuda.descriptor import cuda_target

    ours = object()
    return {
        "jit_replaced": (numba_compat.jit_replaced(ours), lambda: numba.cuda.jit, ours),
        "nrt_off": (numba_compat.nrt_off(), lambda: config.CUDA_ENABLE_NRT, False),
        "smem_ids_named": (numba_compat.smem_ids_named(ours), lambda: cudaimpl._get_unique_smem_id, ours),
        "nvrtc_program_captured": (numba_compat.nvrtc_program_captured(ours), lambda: nvrtc.Program, ours),
        "numbered_afresh": (numba_compat.numbered_afresh(ours),
                            lambda: (ir_utils._unique_var_count, ir_utils._the_max_label._value,
                                     cuda_target.target_context.cached_internal_func), (0, 0, ours)),
    }[name]


@pytest.mark.parametrize("name", ["jit_replaced", "nrt_off", "smem_ids_named", "nvrtc_program_captured",
                                  "numbered_afresh"])
def test_a_swap_holds_inside_its_block_and_gives_numbas_value_back(name):
    manager, now, inside = _swapped(name)
    before = now()
    with pytest.raises(KeyError):  # (given back when the block fails too)
        with manager:
            assert now() == inside
            raise KeyError
    if name == "numbered_afresh":  # numba's counters go on from the highest number reached
        assert now()[0] >= before[0] and now()[1] >= before[1] and now()[2] is before[2]
    else:
        assert now() == before


def test_the_simulators_memory_api_is_given_and_taken_back_whole():
    import numba.cuda

    if numba_compat._memory_api_saved:
        pytest.skip("the simulator's memory API is in place already (a session turned it on)")
    ours = object()
    before = {name: getattr(numba.cuda, name) for name in numba_compat.MEMORY_API}
    try:
        numba_compat.simulator_memory_api(True, lambda name: None if name == "event" else ours)
        numba_compat.simulator_memory_api(True, lambda name: 1 / 0)  # (enabled: nothing asked again)
        assert {name: getattr(numba.cuda, name) is ours for name in before} == \
            {name: name != "event" for name in before}
    finally:
        numba_compat.simulator_memory_api(False)
    assert {name: getattr(numba.cuda, name) for name in numba_compat.MEMORY_API} == before


# -- nothing outside numba_compat assigns to numba's state -------------------------

_NUMBA_PACKAGES = ("numba", "llvmlite")
# calls that return a module by its name, as an import would bind it
_MODULE_LOOKUPS = ("sys.modules.get", "importlib.import_module", "import_module", "__import__")
_SETATTRS = ("setattr", "delattr", "builtins.setattr", "builtins.delattr",
             "object.__setattr__", "object.__delattr__", "type.__setattr__", "type.__delattr__")


def _is_numba_module(name):
    return bool(name) and name.split(".")[0] in _NUMBA_PACKAGES


def _finds_numba_module(node):
    """True for ``sys.modules.get("numba...")``, ``importlib.import_module("numba...")``
    and ``sys.modules["numba..."]``: a numba module found by its name."""
    if isinstance(node, ast.Call) and ast.unparse(node.func) in _MODULE_LOOKUPS and node.args:
        key = node.args[0]
    elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "sys.modules":
        key = node.slice
    else:
        return False
    return isinstance(key, ast.Constant) and isinstance(key.value, str) and _is_numba_module(key.value)


def _numba_names(tree):
    """The names a module binds, at any depth (imports inside functions too),
    to numba's or llvmlite's modules and the objects imported from them."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.asname or alias.name.split(".")[0]
                         for alias in node.names if _is_numba_module(alias.name))
        elif isinstance(node, ast.ImportFrom) and not node.level and _is_numba_module(node.module):
            names.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None \
                and _finds_numba_module(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(target.id for target in targets if isinstance(target, ast.Name))
    return names


def _root(node):
    """The name an attribute chain (``a.b[c].d``) starts from, or None (a call's
    result, a literal: an object made at run time)."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def numba_state_changes(tree):
    """(line, code) of each change to numba's or llvmlite's state in a module:
    an attribute stored (assigned, augmented, in a tuple or ``for`` target) or
    deleted, or a setattr / delattr, on an attribute chain that starts from a
    name the module bound to numba or llvmlite.  Objects that came from numba
    at run time (a local bound to a numba object) cannot be known statically
    and are not counted."""
    names = _numba_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            owner = node
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in _SETATTRS and node.args:
            owner = node.args[0]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("__setattr__", "__delattr__"):
            owner = node.func.value
        else:
            continue
        if _root(owner) in names:
            found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def test_no_other_module_changes_numbas_state():
    """Outside numba_compat, no module of gpucache_ext assigns to (or deletes)
    an attribute of numba or llvmlite, for good or for the length of a call:
    each change is declared there (`PATCHES`, `SWAPS`, `SETTINGS`)."""
    root = Path(numba_compat.__file__).parent
    found = [f"{path.relative_to(root).as_posix()}:{line}: {code}"
             for path in sorted(root.rglob("*.py")) if path != Path(numba_compat.__file__)
             for line, code in numba_state_changes(ast.parse(path.read_text(), str(path)))]
    assert not found, "changes numba's state outside numba_compat (declare it there):\n" + "\n".join(found)


@pytest.mark.parametrize("code", [
    "import numba.cuda\nnumba.cuda.jit = 1",
    "import numba.cuda as nc\nnc.jit += 1",
    "from numba.cuda.cudadrv import nvvm\nnvvm.LibDevice._cache_ = None",
    "def f():\n    from numba.cuda.core import ir_utils\n    ir_utils._the_max_label._value = 0",
    "from numba.cuda.core import ir_utils\nir_utils.a, x = 0, 1",
    "from numba.cuda import cudaimpl\ndel cudaimpl._get_unique_smem_id",
    "import numba.cuda\nsetattr(numba.cuda, 'to_device', None)",
    "from llvmlite import binding\ndelattr(binding, 'x')",
    "import sys\nnvvm = sys.modules.get('numba.cuda.cudadrv.nvvm')\nnvvm.LibDevice._cache_ = None",
    "from numba.cuda.descriptor import cuda_target\ncuda_target.target_context.cached_internal_func = {}",
], ids=lambda code: code.splitlines()[-1].strip())
def test_the_check_sees_each_form_of_change(code):
    assert numba_state_changes(ast.parse(code))


@pytest.mark.parametrize("code", [
    "import numba.cuda\nx = numba.cuda.jit\nx.y = 1",  # a local: not known statically
    "from numba.cuda import types\ntypes.void(1).x = 1",  # an object made at run time
    "import math\nmath.x = 1",
    "from . import numba_compat\nnumba_compat.x = 1",
    "import numba.cuda\nnumba = 1",  # the name rebound, not an attribute stored
])
def test_the_check_leaves_other_assignments_alone(code):
    assert not numba_state_changes(ast.parse(code))
