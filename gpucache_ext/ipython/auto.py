"""``%gpucache auto``: every cell that defines CUDA kernels runs as a
%%gpukernel cell, with the session's default flags.

What autoreload is for modules, this is for kernels: one line at the top of
an existing notebook, and each later cell that makes kernels or device
functions with numba's ``cuda.jit`` (``@cuda.jit``, ``@numba.cuda.jit(...)``,
``jit`` imported from ``numba.cuda``, ``cuda.jit(f)``) is compiled through
the cache.  Cells that start with a cell magic of their own (``%%gpukernel
--sm 90`` among them) are left as they are.  It is an IPython input
transformer (`AutoCells`, in ``input_transformers_cleanup``): it puts the
magic's line above such a cell, and the magic numbers the cell's lines as
the user wrote them.  numba-cuda-mlir's ``cuda.jit`` (``from numba_cuda_mlir
import cuda``) counts as numba's: such a cell's kernels compile with it
(`cell._capture_mlir_kernels`).  Imports no numba.
"""

from __future__ import annotations

import ast
from typing import Iterable, List, Set

from .cellcode import transforming_body

MAGIC_LINE = "%%gpukernel\n"


def _jit_reference(node, namespace, cell_jits: Set[str]) -> bool:
    """Whether `node` names numba's ``cuda.jit``."""
    if isinstance(node, ast.Call):  # @cuda.jit("sig", ...) and cuda.jit(f)
        node = node.func
    if isinstance(node, ast.Attribute) and node.attr == "jit":
        value = node.value
        if isinstance(value, ast.Attribute) and value.attr == "cuda":  # numba.cuda.jit
            return True
        if isinstance(value, ast.Name):  # cuda.jit, however cuda is bound
            module = namespace.get(value.id, None)
            if module is None:
                return value.id == "cuda" or value.id in cell_jits
            return getattr(module, "__name__", None) in _CUDA_MODULES
        return False
    if isinstance(node, ast.Name):  # jit, from numba.cuda import jit (as ...)
        if node.id in cell_jits:
            return True
        bound = namespace.get(node.id)
        return bound is not None and _is_numba_cuda_jit(bound)
    return False


def _is_numba_cuda_jit(value) -> bool:
    module = getattr(value, "__module__", None) or ""
    name = getattr(value, "__name__", None) or type(value).__name__
    return ((module == "numba.cuda.decorators" and name == "jit") or type(value).__name__ == "CellJit"
            or (module == "numba_cuda_mlir.decorators" and name == "mlir_jit"))


# the modules whose ``jit`` makes kernels: numba-cuda's, and numba-cuda-mlir's (the import decides the backend)
_CUDA_MODULES = ("numba.cuda", "numba_cuda_mlir.cuda")


def defines_cuda_kernels(source: str, namespace) -> bool:
    """Whether the cell's Python makes kernels or device functions with numba's ``cuda.jit``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # left to run as written: its error is a plain cell's
        return False
    cell_jits: Set[str] = set()  # names this cell binds to numba.cuda (as a module) or its jit
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in ("numba.cuda", "numba", "numba_cuda_mlir",
                                                                "numba_cuda_mlir.cuda"):
            for alias in node.names:
                if (node.module, alias.name) in (("numba.cuda", "jit"), ("numba", "cuda"), ("numba_cuda_mlir", "cuda"),
                                                 ("numba_cuda_mlir.cuda", "jit")):
                    cell_jits.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in _CUDA_MODULES and alias.asname:
                    cell_jits.add(alias.asname)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any(_jit_reference(d, namespace, cell_jits) for d in node.decorator_list):
                return True
        elif isinstance(node, ast.Call) and _jit_reference(node.func, namespace, cell_jits):
            return True
    return False


class AutoCells:
    """The input transformer of ``%gpucache auto`` for one shell's session."""

    def __init__(self, shell):
        self.shell = shell
        self.on = False
        self._bodies: Set[str] = set()  # cell texts given the magic's line, until the cell ends

    def __call__(self, lines: List[str]) -> List[str]:
        if not self.on or not lines or transforming_body():  # (a %%gpukernel cell's body: left alone)
            return lines
        text = "".join(lines)
        if lines[0].lstrip().startswith("%%"):  # a cell magic of its own
            return lines
        if not defines_cuda_kernels(self._python(lines), self.shell.user_ns):
            return lines
        self._bodies.add(text)
        return [MAGIC_LINE] + list(lines)

    @staticmethod
    def _python(lines: Iterable[str]) -> str:
        """The cell as Python, its IPython syntax (``%time``, ``!ls``) transformed
        by IPython's own transformers (not the shell's: this is one of them)."""
        from IPython.core.inputtransformer2 import TransformerManager

        try:
            return TransformerManager().transform_cell("".join(lines))
        except (SyntaxError, ValueError):  # the cell runs as written, and fails as it would
            return ""

    def wrapped(self, body: str) -> bool:
        """Whether `body` is a cell this transformer gave the magic's line."""
        return body in self._bodies

    def cell_ended(self) -> None:
        self._bodies.clear()

