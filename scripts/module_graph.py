"""The import graph of gpucache_ext's modules, and its cycles.

    python scripts/module_graph.py            # edges per module, then the cycles
    python scripts/module_graph.py --dot      # the graph for graphviz
    python scripts/module_graph.py --sizes    # the largest modules and classes, against the limits

Read from the source with `ast` (nothing is imported): an edge A -> B for every
``import`` of B in A, at module level or inside a function (an import inside a
function defers the cycle to run time, it does not remove it; such edges are
marked ``(lazy)``); imports under ``if TYPE_CHECKING:`` are left out (they
never run).  A cycle is a strongly connected set of two or more modules.
Private names imported from another module (``from .disk import _read_head``)
are listed too.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
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


def graph():
    modules = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}
    edges = defaultdict(dict)  # module -> {imported module: lazy?}
    private = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        top_level = {id(node) for node in tree.body}
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = resolve(name, is_package, node.level, node.module)
                targets = []
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    if sub in modules:
                        targets.append(sub)
                    else:
                        targets.append(base)
                        if alias.name.startswith("_") and base.startswith(PACKAGE) and base != name:
                            private.append((name, base, alias.name))
            else:
                continue
            if _in_type_checking(tree, node):  # for annotations only: never imported at run time
                continue
            lazy = id(node) not in top_level
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and target.startswith(PACKAGE):
                    edges[name][target] = edges[name].get(target, True) and lazy
    return modules, edges, private


def _in_type_checking(tree, node) -> bool:
    for top in tree.body:
        if isinstance(top, ast.If) and "TYPE_CHECKING" in ast.unparse(top.test):
            if any(child is node for child in ast.walk(top)):
                return True
    return False


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
            for target, lazy in sorted(targets.items()):
                print(f'  "{short(source)}" -> "{short(target)}"{" [style=dashed]" if lazy else ""};')
        print("}")
        return 0
    for source in modules:
        targets = edges.get(source, {})
        shown = ", ".join(short(t) + (" (lazy)" if lazy else "") for t, lazy in sorted(targets.items()))
        print(f"{short(source)}: {shown or '-'}")
    found = cycles(modules, edges)
    print(f"\n{len(modules)} modules, {sum(map(len, edges.values()))} edges, {len(found)} cycles")
    for component in found:
        print("  cycle: " + " <-> ".join(map(short, component)))
    print(f"{len(private)} private names imported from another module")
    for source, base, attr in private:
        print(f"  {short(source)} imports {short(base)}.{attr}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
