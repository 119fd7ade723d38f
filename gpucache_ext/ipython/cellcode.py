"""A %%gpukernel cell's code as Python: compiled with the cell's numbering,
its imports written as assignments, its last expression apart, its lines
registered for tracebacks.  Imports no numba: the magic uses it under
numba's CUDA simulator too, where numba-cuda's compiler cannot be imported."""

from __future__ import annotations

import ast
import hashlib
import linecache
import sys
import threading
from typing import Dict, FrozenSet, Optional


_body = threading.local()  # set while a %%gpukernel cell's body is transformed


def transform_body(shell, body: str) -> str:
    """A %%gpukernel cell's body as Python (IPython's transformers: ``%time``,
    ``!ls``), marked as a body: ``%gpucache auto`` leaves it as it is."""
    _body.active = True
    try:
        return shell.transform_cell(body)
    finally:
        _body.active = False


def transforming_body() -> bool:
    return getattr(_body, "active", False)


def cell_names(shell) -> Optional[Dict[str, int]]:
    """IPython's map from a cell's code name to its execution count (what
    its tracebacks read as ``Cell In[N]``), if this shell has one."""
    names = getattr(getattr(shell, "compile", None), "_filename_map", None)
    return names if isinstance(names, dict) else None


def cell_filename(cell: str) -> str:
    """A name derived from the cell's text, so an unchanged cell keeps its name
    (and its line-number-dependent debug info keeps hitting) across runs."""
    return f"<gpukernel-{hashlib.sha1(cell.encode()).hexdigest()[:12]}>"


class _ImportsAsAssignments(ast.NodeTransformer):
    """Turn the cell's module-level imports into plain assignments.

    CPython compiles ``cuda.grid(1)`` differently when ``cuda`` was imported in
    the same compilation unit (LOAD_ATTR instead of LOAD_METHOD), so a kernel's
    bytecode, and with it its token, would depend on which cell holds the
    imports.  Written as assignments, imports bind the same names to the same
    modules and kernels compile to the same bytecode wherever the imports are.
    """

    def visit_FunctionDef(self, node):  # only module-level imports matter
        return node

    visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

    def visit_Import(self, node):
        assigns = []
        for alias in node.names:
            if alias.asname:  # import a.b as c: c is the submodule
                target, value = alias.asname, _call("__import__", alias.name, fromlist=["_"])
            else:  # import a.b: binds a, the top package
                target, value = alias.name.split(".")[0], _call("__import__", alias.name)
            assigns.append(_assign(target, value, node))
        return assigns

    def visit_ImportFrom(self, node):
        if node.level or any(alias.name == "*" for alias in node.names):
            return node  # relative and star imports stay as written
        fromlist = [a.name for a in node.names]
        return [_imported_name(node, alias, fromlist) for alias in node.names]


def _call(func, *args, fromlist=None):
    keywords = []
    if fromlist is not None:
        keywords.append(ast.keyword(arg="fromlist", value=ast.Tuple(
            elts=[ast.Constant(name) for name in fromlist], ctx=ast.Load())))
    return ast.Call(func=ast.Name(id=func, ctx=ast.Load()),
                    args=[ast.Constant(a) for a in args], keywords=keywords)


def _imported_name(node, alias, fromlist):
    """``name = __import__(module, fromlist=...).name``, raising ImportError (as
    ``from module import name`` does) when the module has no such name."""
    module = _call("__import__", node.module, fromlist=fromlist)
    assign = _assign(alias.asname or alias.name,
                     ast.Attribute(value=module, attr=alias.name, ctx=ast.Load()), node)
    message = f"cannot import name {alias.name!r} from {node.module!r}"
    raise_error = ast.Raise(exc=ast.Call(func=ast.Name(id="ImportError", ctx=ast.Load()),
                                         args=[ast.Constant(message)], keywords=[]),
                            cause=ast.Constant(None))
    handler = ast.ExceptHandler(type=ast.Name(id="AttributeError", ctx=ast.Load()), name=None,
                                body=[raise_error])
    guarded = ast.Try(body=[assign], handlers=[handler], orelse=[], finalbody=[])
    return ast.fix_missing_locations(ast.copy_location(guarded, node))


def _assign(target, value, node):
    assign = ast.Assign(targets=[ast.Name(id=target, ctx=ast.Store())], value=value)
    return ast.fix_missing_locations(ast.copy_location(assign, node))


def compile_cell(source: str, filename: str, magic_line: bool = True):
    """The cell's code, numbered as IPython numbers the cell: line 1 is the
    magic's own, so the code starts on line 2 (a SyntaxError says so too);
    without `magic_line` (a cell ``%gpucache auto`` ran), on line 1.
    Returns (the code of its statements, the code of its last expression or
    None): as in a plain cell, a final expression's value is the cell's
    result, unless a ``;`` ends it."""
    tree = _ImportsAsAssignments().visit(ast.parse(("\n" if magic_line else "") + source, filename, "exec"))
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr) and not ends_in_semicolon(source):
        last = ast.Expression(tree.body.pop().value)
        last = compile(ast.fix_missing_locations(last), filename, "eval")
    return compile(ast.fix_missing_locations(tree), filename, "exec"), last


def followed_by_definitions(source: str, magic_line: bool = True) -> FrozenSet[int]:
    """The first lines (numbered as `compile_cell` numbers them) of the
    cell's top-level decorated function definitions whose next statement is
    another definition decorated with a ``jit`` (``@cuda.jit(...)``,
    ``@jit``): between two such, nothing of the user's runs but the second
    one's decorator, which binds the kernel before it (`gpucache_ext.launch.
    batch`), so the first kernel's ptx and cubin may build meanwhile."""
    try:
        body = ast.parse(("\n" if magic_line else "") + source).body
    except SyntaxError:
        return frozenset()
    found = set()
    for node, after in zip(body, body[1:]):
        if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.decorator_list
                and isinstance(after, ast.FunctionDef) and any(map(_jit_like, after.decorator_list))):
            found.add(node.decorator_list[0].lineno)
    return frozenset(found)


def _jit_like(decorator: ast.expr) -> bool:
    """``jit``, ``cuda.jit``, ``cuda.jit("sig", ...)``: a decorator named jit."""
    if isinstance(decorator, ast.Call):
        decorator = decorator.func
    return (isinstance(decorator, ast.Name) and decorator.id == "jit"
            or isinstance(decorator, ast.Attribute) and decorator.attr == "jit")


def ends_in_semicolon(source: str) -> bool:
    import tokenize

    from IPython.core.displayhook import DisplayHook

    try:  # IPython's own test of a plain cell
        return DisplayHook.semicolon_at_end_of_expression(source)
    except (tokenize.TokenError, SyntaxError):  # (the source parsed: only odd whitespace gets here)
        return False


def register_cell(shell, source: str, line: str, number: Optional[int], magic_line: bool = True) -> str:
    """Name the cell's code and give tracebacks its lines, the magic line
    first (with `magic_line`); with `number`, IPython labels the file ``Cell In[number]``."""
    filename = cell_filename(source)
    # (as a comment: the file then parses, so tracebacks show the same lines of context as a plain cell's)
    magic = ("# %%gpukernel " + line).rstrip() + "\n"
    lines = [magic] * magic_line + [text if text.endswith("\n") else text + "\n" for text in source.splitlines(True)]
    linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)
    names = cell_names(shell)
    if number is not None and names is not None:
        names[filename] = number
    return filename


def running_cell_number(shell) -> Optional[int]:
    """The execution count of the IPython cell running this magic: that of
    the nearest calling frame whose code is a cell's."""
    names = cell_names(shell)
    frame = sys._getframe(1)
    while names is not None and frame is not None:
        number = names.get(frame.f_code.co_filename)
        if number is not None:
            return number
        frame = frame.f_back
    return None


def check_cell_syntax(lines):
    """IPython input transformer (``input_transformers_post``): a %%gpukernel
    cell whose code does not parse fails before it runs, its SyntaxError shown
    as a plain cell's is, at the cell's line and with no frames."""
    if not lines or not lines[0].startswith("get_ipython().run_cell_magic('gpukernel', "):
        return lines
    try:
        call = ast.parse("".join(lines)).body[0].value
        _, line, body = (ast.literal_eval(arg) for arg in call.args)
    except (SyntaxError, ValueError, AttributeError, IndexError, TypeError):
        return lines  # not IPython's form of a %%gpukernel cell: leave it to the magic
    if not isinstance(body, str) or not body.strip():
        return lines
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        return lines
    source = transform_body(shell, body)
    filename = register_cell(shell, source, line, shell.execution_count)
    try:
        compile_cell(source, filename)
    except SyntaxError as exc:
        exc.gpucache_cell_syntax = True  # (the session undoes IPython 8's second count of such a cell)
        raise exc.with_traceback(None) from None
    return lines
