"""Module-level memos and process state, each registered once
(`gpucache_ext.memos`): a module-level container that starts empty, or a
``functools.lru_cache``, is either a memo (dropped by `memos.forget`, as a
new process starts) or state (kept, with why).  Dropping every memo changes
no result: a compile after `forget` gives what it gave before."""

import ast
import importlib
import pkgutil
import re

import gpucache_ext
from gpucache_ext import CompileConfig, KernelCache, memos

from . import kernels

_CONTAINERS = {"dict", "set", "list", "OrderedDict", "defaultdict", "Counter", "deque", "WeakKeyDictionary",
               "WeakValueDictionary", "WeakSet"}


def _module_level_holders():
    """(module, name) of every module-level name bound to an empty container
    or a container made by a call, and of every lru_cache'd function."""
    for info in pkgutil.walk_packages(gpucache_ext.__path__, "gpucache_ext."):
        if info.name.endswith("__main__") or info.name == "gpucache_ext.memos":  # (running it runs the command)
            continue
        module = importlib.import_module(info.name)
        tree = ast.parse(open(module.__file__).read())
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                value = node.value
                empty = isinstance(value, (ast.Dict, ast.Set, ast.List)) and not (
                    getattr(value, "keys", None) or getattr(value, "elts", None))
                made = isinstance(value, ast.Call) and (
                    ast.unparse(value.func).rpartition(".")[2] in _CONTAINERS and not value.args
                    or ast.unparse(value.func) in ("memos.memo", "memos.state"))
                if empty or made:
                    for target in targets:
                        if isinstance(target, ast.Name):
                            yield module, target.id
            elif isinstance(node, ast.FunctionDef) and any(
                    re.search(r"\b(lru_cache|cache|cached)\b", ast.unparse(d)) for d in node.decorator_list):
                yield module, node.name


def test_every_module_level_memo_or_state_is_registered():
    found = list(_module_level_holders())
    assert len(found) > 40  # (the package was read)
    registered = set(memos.registered())
    unregistered = [f"{module.__name__}.{name}" for module, name in found
                    if id(getattr(module, name)) not in registered]
    assert unregistered == [], "register each with memos.memo(...) or memos.state(..., why)"
    assert all(why for _, why in memos.states().values())


def test_forgetting_every_memo_changes_no_result(tmp_path):
    config = CompileConfig(sm=86, fastmath=True)
    before = KernelCache(audit=False).compile(kernels.copy, kernels.COPY_SIG, config)
    assert any(len(holder) for holder in memos.memos().values() if hasattr(holder, "__len__"))
    memos.forget()
    assert all(len(holder) == 0 for holder in memos.memos().values() if hasattr(holder, "__len__"))
    after = KernelCache(audit=False).compile(kernels.copy, kernels.COPY_SIG, config)
    assert {s: r.token for s, r in after.stages.items()} == {s: r.token for s, r in before.stages.items()}
    assert (after.llvm_ir, after.ptx, after.cubin) == (before.llvm_ir, before.ptx, before.cubin)


def test_forgetting_every_memo_changes_no_result_of_device_functions_and_helpers():
    """Device functions (one inlined by numba itself), numba's helpers (a
    power, a cmath call) and a global: what the numbering, the proxies and
    the helper tables remember."""
    from .helpers import notebook_namespace, run_cell

    ns = notebook_namespace()
    run_cell(ns, """
import cmath
SCALE = 2.5

@cuda.jit(device=True, inline="always")
def twice(x):
    return 2 * x

@cuda.jit(device=True)
def bump(x):
    return x ** 3 + abs(cmath.exp(complex(x, 1.0)))

def kernel(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = SCALE * twice(bump(x[i]))
""")
    sig, config = "void(float64[:], float64[:])", CompileConfig(sm=80, lineinfo=True)
    before = KernelCache(audit=False).compile(ns["kernel"], sig, config)
    memos.forget()
    after = KernelCache(audit=False).compile(ns["kernel"], sig, config)
    assert {s: r.token for s, r in after.stages.items()} == {s: r.token for s, r in before.stages.items()}
    assert (after.ptx, after.cubin) == (before.ptx, before.cubin)
