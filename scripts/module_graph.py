"""The import graph of gpucache_ext's modules, and its cycles.

    python scripts/module_graph.py            # edges per module, then the cycles
    python scripts/module_graph.py --dot      # the graph for graphviz
    python scripts/module_graph.py --sizes    # the largest modules and classes, against the limits

Read from the source with `ast` (nothing is imported): an edge A -> B for every
way A reaches B, each of a kind the output shows:

    import    an ``import`` of B at module level
    function  an ``import`` of B inside a function (it defers the cycle to run
              time, it does not remove it)
    lazy      B's name as a string literal handed to ``lazy_module``,
              ``importlib.import_module`` or a ``sys.modules`` lookup
    type      an ``import`` of B under ``if TYPE_CHECKING:`` (it never runs, but
              A is written against B all the same)

Reaching a module reaches the packages it is in (their ``__init__`` runs
first), but those of A itself.  A module reached several ways keeps the
first kind of that list.  A cycle is a
strongly connected set of two or more modules, whatever the kinds of its
edges.  Private names imported from another module (``from .disk import
_read_head``) are listed too.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

PACKAGE = "gpucache_ext"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def resolve(current: str, is_package: bool, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    base = current.split(".")
    base = base if is_package else base[:-1]
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


KINDS = ("import", "function", "lazy", "type")  # strongest first
_BY_NAME = ("lazy_module", "import_module")  # calls whose string argument names a module


def graph():
    """(modules {name: path}, edges {module: {target: kind}}, private [(module, base, name)])."""
    modules = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}
    edges, private = {}, []
    for name, path in modules.items():
        found, names = module_edges(name, path.read_text(), modules, is_package=path.name == "__init__.py")
        if found:
            edges[name] = found
        private += names
    return modules, edges, private


def module_edges(name, source, modules, is_package=False):
    """The edges of module `name` whose text is `source`, {target: kind}, and
    the private names it imports from other modules, [(name, base, attribute)]."""
    found, private = {}, []

    def add(target, kind):
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if not target.startswith(PACKAGE + "."):
            return
        # importing a module runs its packages' __init__ first: each is reached too
        # (but the packages `name` is in, which ran before it)
        parts = target.split(".")
        for reached in (".".join(parts[:end]) for end in range(2, len(parts) + 1)):
            if reached != name and reached in modules and not name.startswith(reached + "."):
                if reached not in found or KINDS.index(kind) < KINDS.index(found[reached]):
                    found[reached] = kind

    def visit(node, kind):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            kind = "type"
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and kind == "import":
            kind = "function"
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, kind)
        elif isinstance(node, ast.ImportFrom):
            base = resolve(name, is_package, node.level, node.module)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in modules:
                    add(sub, kind)
                else:
                    add(base, kind)
                    if alias.name.startswith("_") and base.startswith(PACKAGE) and base != name:
                        private.append((name, base, alias.name))
        else:
            named = _named_module(node)
            if named is not None:
                add(named, "lazy")
        for child in ast.iter_child_nodes(node):
            visit(child, kind)

    visit(ast.parse(source), "import")
    return found, private


def _named_module(node):
    """The string literal `node` hands over as a module's name, if any:
    ``lazy_module("m")``, ``importlib.import_module("m")``, ``sys.modules.get("m")``,
    ``sys.modules["m"]``, ``"m" in sys.modules``."""
    def literal(value):
        return value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else None

    if isinstance(node, ast.Call) and node.args:
        function = ast.unparse(node.func)
        if function.rpartition(".")[2] in _BY_NAME or function in ("sys.modules.get", "sys.modules.pop"):
            return literal(node.args[0])
    elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "sys.modules":
        return literal(node.slice)
    elif isinstance(node, ast.Compare) and len(node.comparators) == 1 \
            and isinstance(node.ops[0], (ast.In, ast.NotIn)) and ast.unparse(node.comparators[0]) == "sys.modules":
        return literal(node.left)
    return None


MAX_MODULE_LINES, MAX_CLASS_LINES = 900, 400  # what still reads as one thing


def sizes(modules):
    """[(lines, module)] and [(lines, module, class)] (top-level classes), largest first."""
    module_sizes, class_sizes = [], []
    for name, path in modules.items():
        text = path.read_text()
        module_sizes.append((text.count("\n"), name))
        for node in ast.parse(text, str(path)).body:
            if isinstance(node, ast.ClassDef):
                class_sizes.append((node.end_lineno - node.lineno + 1, name, node.name))
    return sorted(module_sizes, reverse=True), sorted(class_sizes, reverse=True)


def cycles(modules, edges):
    """Strongly connected components of two or more modules (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in modules:
        if v not in index:
            visit(v)
    return sorted(found)


_DOT_STYLES = {"import": "", "function": " [style=dashed]", "lazy": " [style=dotted]", "type": " [color=gray]"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dot", action="store_true", help="print the graph in graphviz's dot language")
    parser.add_argument("--sizes", action="store_true", help="the largest modules and classes")
    args = parser.parse_args()
    modules, edges, private = graph()
    short = lambda m: m[len(PACKAGE) + 1:] or PACKAGE  # noqa: E731
    if args.sizes:
        module_sizes, class_sizes = sizes(modules)
        print(f"modules (limit {MAX_MODULE_LINES} lines):")
        for lines, name in module_sizes[:10]:
            print(f"  {lines:5d}  {short(name)}")
        print(f"classes (limit {MAX_CLASS_LINES} lines):")
        for lines, name, cls in class_sizes[:10]:
            print(f"  {lines:5d}  {short(name)}.{cls}")
        return 0
    if args.dot:
        print("digraph gpucache_ext {")
        for source, targets in sorted(edges.items()):
            for target, kind in sorted(targets.items()):
                print(f'  "{short(source)}" -> "{short(target)}"{_DOT_STYLES[kind]};')
        print("}")
        return 0
    for source in modules:
        targets = edges.get(source, {})
        shown = ", ".join(short(t) + ("" if kind == "import" else f" ({kind})") for t, kind in sorted(targets.items()))
        print(f"{short(source)}: {shown or '-'}")
    found = cycles(modules, edges)
    kinds = [kind for targets in edges.values() for kind in targets.values()]
    print(f"\n{len(modules)} modules, {len(kinds)} edges ("
          + ", ".join(f"{kinds.count(kind)} {kind}" for kind in KINDS) + f"), {len(found)} cycles")
    for component in found:
        print("  cycle: " + " <-> ".join(map(short, component)))
    print(f"{len(private)} private names imported from another module")
    for source, base, attr in private:
        print(f"  {short(source)} imports {short(base)}.{attr}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
