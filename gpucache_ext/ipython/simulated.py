"""%%gpukernel under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``).

numba's simulator runs kernels in Python and compiles nothing, and numba-cuda's
compiler cannot be imported under it.  A %%gpukernel cell then runs exactly
as a plain cell on the simulator (numba's own ``cuda.jit``, its last
expression the cell's result, errors at the user's line) and says so in
one line; the cache, ``%gpucache`` and the inspector still show what the
persistent tiers hold.  Imports no numba-cuda compiler.
"""

from __future__ import annotations

import html

from .cell_errors import show_from_the_cell
from .cellcode import compile_cell, register_cell, running_cell_number, transform_body

NOTE = ("numba's CUDA simulator is on (NUMBA_ENABLE_CUDASIM=1): this cell ran as a plain cell, its kernels "
        "run in Python, and nothing is compiled or cached")


class SimulatorNote:
    """The one line a %%gpukernel cell shows under the simulator."""

    def __repr__(self):
        return NOTE

    def _repr_html_(self):
        return f'<div class="gpucache-simulator-note">{html.escape(NOTE)}</div>'


def run_simulated_cell(shell, cell: str, line: str = "", auto: bool = False):
    """Run the cell's code in the user's namespace as a plain cell runs: the
    value of its last expression (None without one, or after a ``;``)."""
    source = transform_body(shell, cell)
    filename = register_cell(shell, source, line, running_cell_number(shell), magic_line=not auto)
    code, last = compile_cell(source, filename, magic_line=not auto)
    namespace = shell.user_ns
    try:
        exec(code, namespace)
        return eval(last, namespace) if last is not None else None
    except BaseException as exc:
        show_from_the_cell(shell, exc, filename)
        raise
