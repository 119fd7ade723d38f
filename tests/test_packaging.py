"""What the package tells tools about itself: one version, its licence, its types."""

import re
from importlib import metadata
from pathlib import Path

import pytest

import gpucache_ext

ROOT = Path(__file__).resolve().parent.parent


def test_one_version_source():
    pyproject = (ROOT / "pyproject.toml").read_text()
    project = pyproject.split("[project]", 1)[1].split("\n[", 1)[0]
    assert not re.search(r"^version\s*=", project, re.M), "the version lives in gpucache_ext.__version__"
    assert re.search(r'^version = \{attr = "gpucache_ext.__version__"\}', pyproject, re.M)
    assert metadata.version("gpucache_ext") == gpucache_ext.__version__


def test_the_licence_file_says_what_the_metadata_says():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("BSD 2-Clause License") and "Redistributions in binary form" in text
    assert metadata.metadata("gpucache_ext")["License"] == "BSD-2-Clause"


def test_the_package_declares_its_inline_types():
    assert (Path(gpucache_ext.__file__).parent / "py.typed").is_file()
    assert 'gpucache_ext = ["py.typed"]' in (ROOT / "pyproject.toml").read_text()


@pytest.mark.smoke
def test_the_core_imports_no_ipython():
    import subprocess
    import sys

    # every module outside the IPython and widget layers
    package = ROOT / "gpucache_ext"
    core = sorted(".".join(path.relative_to(package).with_suffix("").parts).removesuffix(".__init__")
                  for path in package.rglob("*.py")
                  if path.relative_to(package).parts[0] not in ("ipython", "widgets", "__main__.py", "__init__.py"))
    assert {"pipeline.cache", "queries", "views", "backends.numba_cuda.launch.kernel", "store.disk", "toolchain",
            "cli"} <= set(core)
    import importlib.util

    if importlib.util.find_spec("numba_cuda_mlir") is None:  # (its compiler's modules need it: Python 3.11+)
        core = [name for name in core if not name.startswith(("backends.numba_cuda_mlir.compiler",
                                                               "backends.numba_cuda_mlir.launch"))]
    code = ("import sys\n" + "".join(f"import gpucache_ext.{name}\n" for name in core)
            + "print(sorted(m for m in ('IPython', 'ipywidgets', 'traitlets') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=300).stdout
    assert out.strip() == "[]"
    # the IPython layer is a package of its own
    shown = subprocess.run([sys.executable, "-c", "import sys, gpucache_ext.ipython.magic; "
                            "print('IPython' in sys.modules)"], capture_output=True, text=True,
                           check=True, timeout=300).stdout
    assert shown.strip() == "True"


def test_the_text_report_imports_no_ipywidgets():
    """A cell's text report (a multi-target kernel, with its per-architecture
    resources and a tier's security line) and ``%gpucache explain``'s
    resource moves render without ipywidgets: only the inspector needs it."""
    import subprocess
    import sys

    code = """
import sys
from gpucache_ext import CompileConfig, KernelCache
from gpucache_ext.ipython.report import CellReport
from gpucache_ext.queries import resource_moves, resource_rows
from gpucache_ext.views import resource_moves_text
from tests import kernels
cache = KernelCache(audit=False)
results = [cache.compile_fatbin(kernels.axpy, kernels.AXPY_SIG, CompileConfig(), sms=(80, 86)),
           cache.compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=86, max_registers=32))]
text = repr(CellReport(results, explain=True, tiers=cache.tier_info(),
                       refused={"disk": {"unsigned": 2}}))
moves = resource_moves_text(resource_moves(resource_rows(cache, results[0].kernel)))
print("per architecture" in text, "refused in this cell" in text, bool(moves))
print(sorted(m for m in ("ipywidgets", "IPython") if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=600, cwd=ROOT).stdout.splitlines()
    assert out[-2:] == ["True True True", "[]"]


def _module_graph():
    import importlib.util

    spec = importlib.util.spec_from_file_location("module_graph", ROOT / "scripts" / "module_graph.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_module_imports_another_that_imports_it_back():
    """No import cycle, whichever way a module reaches another: an import at
    module level or inside a function, one under ``if TYPE_CHECKING:``, or its
    name handed to `lazy_module` or looked up in ``sys.modules``
    (scripts/module_graph.py shows the graph and each edge's kind)."""
    graph = _module_graph()
    modules, edges, _ = graph.graph()
    kinds = [kind for targets in edges.values() for kind in targets.values()]
    assert len(modules) > 30 and len(kinds) > 100  # the graph was read
    assert {"import", "function", "lazy", "type"} <= set(kinds)  # each way was seen
    assert graph.cycles(modules, edges) == []
    # a planted cycle is found: the check can fail
    planted = {name: dict(targets) for name, targets in edges.items()}
    planted.setdefault("gpucache_ext.keys.config", {})["gpucache_ext.pipeline.cache"] = "import"
    assert any("gpucache_ext.pipeline.cache" in cycle for cycle in graph.cycles(modules, planted))


@pytest.mark.parametrize("source, kind", [
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..pipeline.cache import KernelCache\n", "type"),
    ("cache = lazy_module('gpucache_ext.pipeline.cache')\n", "lazy"),
    ("import sys\ndef cache():\n    return sys.modules.get('gpucache_ext.pipeline.cache')\n", "lazy"),
    ("import sys\ndef cache():\n    return sys.modules['gpucache_ext.pipeline.cache']\n", "lazy"),
    ("import importlib\ncache = importlib.import_module('gpucache_ext.pipeline.cache')\n", "lazy"),
    ("def cache():\n    from ..pipeline import cache\n    return cache\n", "function"),
])
def test_a_back_edge_of_any_kind_makes_a_cycle(source, kind):
    """An edge read from source, of whichever kind, closes a cycle with the
    edges the package has: config, which the cache imports, reaching back."""
    graph = _module_graph()
    modules, edges, _ = graph.graph()
    back, _ = graph.module_edges("gpucache_ext.keys.config", source, modules)
    assert back == {"gpucache_ext.pipeline": kind, "gpucache_ext.pipeline.cache": kind}  # (its package's too)
    planted = {**edges, "gpucache_ext.keys.config": {**edges.get("gpucache_ext.keys.config", {}), **back}}
    assert any({"gpucache_ext.pipeline.cache", "gpucache_ext.keys.config"} <= set(cycle)
               for cycle in graph.cycles(modules, planted))


def test_importing_a_module_reaches_its_packages_too():
    """Importing gpucache_ext.backends.numba_cuda.numba_compat runs the
    packages' __init__ first: a package that imports back is a cycle at
    run time (the toolchain imports numba_compat; were numba_cuda's __init__
    to import the toolchain, the import would fail half done)."""
    graph = _module_graph()
    modules, edges, _ = graph.graph()
    found, _ = graph.module_edges("gpucache_ext.toolchain", "from ..backends.numba_cuda import numba_compat\n",
                                  modules, is_package=True)
    assert found == {"gpucache_ext.backends": "import", "gpucache_ext.backends.numba_cuda": "import",
                     "gpucache_ext.backends.numba_cuda.numba_compat": "import"}
    back, _ = graph.module_edges("gpucache_ext.backends.numba_cuda", "from ...toolchain import numba_settings\n",
                                 modules, is_package=True)
    planted = {**edges, "gpucache_ext.backends.numba_cuda": back}
    assert any({"gpucache_ext.toolchain", "gpucache_ext.backends.numba_cuda"} <= set(cycle)
               for cycle in graph.cycles(modules, planted))
    # the packages a module is in ran before it: no edge to them
    own, _ = graph.module_edges("gpucache_ext.backends.numba_cuda.backend", "from ..base import Backend\n", modules)
    assert own == {"gpucache_ext.backends.base": "import"}


def test_no_module_or_class_is_too_long_to_read_as_one_thing():
    """No module over 900 lines, no class over 400 (issue 33; ``scripts/module_graph.py --sizes``)."""
    graph = _module_graph()
    modules, _, _ = graph.graph()
    module_sizes, class_sizes = graph.sizes(modules)
    assert len(module_sizes) == len(modules) and class_sizes and module_sizes[0][0] > 300  # they were read
    assert [m for m in module_sizes if m[0] > graph.MAX_MODULE_LINES] == []
    assert [c for c in class_sizes if c[0] > graph.MAX_CLASS_LINES] == []


def _layer_callables_held_by_the_core() -> list:
    """Functions and methods of the IPython and widget layers that a core
    module's globals hold (directly, or in a dict, list, set or tuple there):
    how a layer hands the core a callback."""
    import sys

    layers = ("gpucache_ext.ipython", "gpucache_ext.widgets")
    found = []
    for name, module in list(sys.modules.items()):
        if not name.startswith("gpucache_ext") or name.startswith(layers) or module is None:
            continue
        for attr, value in list(vars(module).items()):
            values = list(value.values()) + list(value) if isinstance(value, dict) else \
                list(value) if isinstance(value, (list, set, tuple)) else [value]
            for each in values:
                owner = getattr(each, "__module__", None) or ""
                if callable(each) and not isinstance(each, type) and owner.startswith(layers):
                    found.append(f"{name}.{attr}")
    return found


def test_the_ipython_layer_hands_the_core_no_callbacks(ip):
    """With the extension loaded and a cell run, no core module holds a
    function of the IPython or widget layers (issue 33: the core asked two
    global callbacks of the IPython layer, the cell resolver and the session
    lookup); the session is attached as a value, its places held by it."""
    from gpucache_ext import sessions

    ip.run_cell("x = 1").raise_error()
    assert sessions.current_session() is not None
    assert _layer_callables_held_by_the_core() == []
    from gpucache_ext.ipython.session import current

    sessions._planted = [current]  # (the check sees a callback handed over)
    try:
        assert _layer_callables_held_by_the_core() == ["gpucache_ext.sessions._planted"]
    finally:
        del sessions._planted


def test_the_store_imports_nothing_above_it():
    """The tiers (store/) know entries and bytes: nothing of the cache, the
    stages, launching or the IPython layers, so they can be read alone
    (the ``gpucache`` command does)."""
    modules, edges, _ = _module_graph().graph()
    above = ("gpucache_ext.pipeline.cache", "gpucache_ext.pipeline.driver", "gpucache_ext.backends",
             "gpucache_ext.launch", "gpucache_ext.ipython", "gpucache_ext.widgets", "gpucache_ext.queries")
    store = {name: edges.get(name, {}) for name in modules if name.startswith("gpucache_ext.store.")}
    assert len(store) == 11 and sum(map(len, store.values())) > 10  # the store's imports were read (11: index)
    def is_above(target):  # (a package, or a module of it)
        return any(target == name or target.startswith(name + ".") for name in above)

    assert {name: [t for t in targets if is_above(t)] for name, targets in store.items()} == \
        {name: [] for name in store}
    assert is_above("gpucache_ext.backends.numba_cuda.stages") and not is_above("gpucache_ext.pipeline.results")


def test_no_module_imports_another_modules_private_names():
    modules, edges, private = _module_graph().graph()
    assert private == [], "private names imported across modules: " + ", ".join(
        f"{source} imports {base}.{name}" for source, base, name in private)


def test_no_exception_is_swallowed_silently():
    """Each ``except Exception`` logs why (``log.debug(..., exc_info=True)`` at
    least), re-raises, warns, or uses what it caught."""
    import ast

    silent = []
    for path in sorted((ROOT / "gpucache_ext").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ExceptHandler) and node.type is not None \
                    and ast.unparse(node.type) in ("Exception", "BaseException"):
                body = ast.Module(body=node.body, type_ignores=[])
                text = ast.unparse(body)
                handled = ("log." in text or "logging." in text or "warn" in text
                           or any(isinstance(n, ast.Raise) for n in ast.walk(body))
                           or (node.name is not None and node.name in text))
                if not handled:
                    silent.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert silent == [], "except Exception that says nothing: " + ", ".join(silent)


def test_every_warning_has_a_category_of_the_package():
    """What users must see is a `GpuCacheWarning` subclass (security, tiers,
    audits, displays), so it can be filtered or made an error by category;
    diagnostics go to the logger.  Deprecations stay DeprecationWarnings."""
    import ast

    import gpucache_ext
    from gpucache_ext import errors

    categories = {name for name in dir(errors) if name.endswith("Warning")} | {"AuditWarning"}
    assert all(issubclass(getattr(gpucache_ext, name), gpucache_ext.GpuCacheWarning) for name in categories)
    found, wrong = 0, []
    for path in sorted((ROOT / "gpucache_ext").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "warnings.warn":
                found += 1
                given = [ast.unparse(arg) for arg in node.args[1:2]] + \
                    [ast.unparse(kw.value) for kw in node.keywords if kw.arg == "category"]
                if not given or given[0] not in categories | {"DeprecationWarning"}:
                    wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} ({given[0] if given else 'no category'})")
    assert found >= 8  # the calls were read
    assert wrong == [], "warnings without a gpucache_ext category: " + ", ".join(wrong)


def test_a_module_has_one_name():
    """No old names kept for modules that moved into subpackages before any
    release (``gpucache_ext.disk`` is only ``gpucache_ext.store.disk``)."""
    import importlib

    for old in ("disk", "codec", "kernel", "sass", "widgets.render"):
        with pytest.raises(ImportError):
            importlib.import_module("gpucache_ext." + old)
    assert not hasattr(gpucache_ext, "MOVED")


@pytest.mark.smoke
def test_a_lazy_import_that_fails_says_its_cause_and_where():
    """numpy 2.5 removed ``row_stack``, which numba-cuda 0.30 registers at
    import: ``from gpucache_ext import KernelCache`` then said only "cannot
    import name".  Take ``row_stack`` away as numpy 2.5 does: the cache and
    ``Kernel`` open without numba-cuda's compiler (as under numba's
    simulator, and for a compile every stage serves from a cache), and the
    first compile, through a cache or ``jit``, says the cause and where."""
    from .helpers import run_python

    seen = run_python("""
        import json, numpy
        del numpy.row_stack
        from gpucache_ext import CompileConfig, Kernel, KernelCache, jit  # (none needs numba's compiler)
        from tests import kernels
        seen = {}
        for what, attempt in (("jit", lambda: jit(kernels.COPY_SIG)(kernels.copy)),
                              ("compile", lambda: KernelCache().compile(kernels.copy, kernels.COPY_SIG,
                                                                        CompileConfig(sm=86)))):
            try:
                attempt()
            except ImportError as error:
                seen[what] = {"message": str(error), "cause": type(error.__cause__).__name__}
        print(json.dumps(seen))
        """, json_line=True, env={"GPUCACHE_DIR": "off", "GPUCACHE_SM": "86"})
    assert set(seen) == {"jit", "compile"}
    for what in ("jit", "compile"):
        assert seen[what]["cause"] == "AttributeError"
        message = seen[what]["message"]
        assert "cannot import name" not in message
        assert message.startswith("gpucache_ext.backends.numba_cuda.stages could not be imported: "
                                  "AttributeError: "), message
        assert "has no attribute 'row_stack'" in message
        assert re.search(r"numba/cuda/np/arrayobj\.py, line \d+\)", message), message  # where it failed


def test_a_failed_import_names_the_installed_versions_the_requirements_exclude(monkeypatch):
    from importlib import metadata

    from gpucache_ext import importing

    assert importing._unmet_requirements() == []  # this environment is what pip installed
    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "2.5.5" if name == "numpy" else real(name))
    unmet = importing._unmet_requirements()
    assert len(unmet) == 1 and unmet[0].startswith("numpy 2.5.5 installed, needs ") and "<2.5" in unmet[0]
    message = importing._import_failure("gpucache_ext.KernelCache", AttributeError("x"))
    assert "do not meet gpucache_ext's requirements: numpy 2.5.5 installed" in message


@pytest.mark.smoke
def test_the_supported_pythons_are_said_once_in_each_place():
    """requires-python, the classifiers and the README name the same versions."""
    meta = metadata.metadata("gpucache_ext")
    from packaging.specifiers import SpecifierSet

    requires = SpecifierSet(meta["Requires-Python"])
    supported = [f"3.{minor}" for minor in range(40) if requires.contains(f"3.{minor}")]
    assert not requires.contains("3.40") and supported == [f"3.{m}" for m in range(10, 10 + len(supported))]
    classified = [c.rsplit(" :: ", 1)[1] for c in meta.get_all("Classifier")
                  if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
    assert classified == supported
    readme = (ROOT / "README.md").read_text()
    said = re.search(r"Python\s+(3\.\d+) to (3\.\d+)", readme)
    assert said and said.groups() == (supported[0], supported[-1]), "the README names the supported Pythons"
    import sys

    assert f"{sys.version_info[0]}.{sys.version_info[1]}" in supported
