"""A failing %%gpukernel cell reads as a plain cell's error."""

from __future__ import annotations

import keyword
import linecache
import logging
import os
import re
import types
from typing import Optional


from ..errors import CompileError, GpuCacheError, copy_error
from ..importing import installed, loaded_class
from .cellcode import cell_names

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------
# A failing cell reads as a plain cell's error
#
# IPython shows a plain cell's error as the cell's own lines ("Cell In[7],
# line 6") and the frames below them.  A %%gpukernel cell's error would also
# show the frames of the magic, of this package and, for a kernel that does
# not compile, of numba's compiler, and no line of the kernel at all: a
# compile runs after the cell, from this module.  So the cell is registered
# as IPython registers cells (its lines in linecache, its number with
# IPython's compiler), and the exception the cell fails with shows, once, as
# IPython would show it with only the cell's frames: numba's own exception
# for a kernel that does not compile, at the line numba failed on.  It keeps
# its whole chain: `%debug` opens at that line and reaches the real frames
# with ``exceptions``, and `%tb` prints everything.

# this package's files (the folder above this one): their frames are never shown
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _is_cell_file(shell, filename) -> bool:
    names = cell_names(shell) or {}
    return isinstance(filename, str) and (
        filename in names or filename.startswith(("<gpukernel-", "<ipython-input-")))


def as_cell_error(shell, exc, filename, context):
    """The exception a failing cell raises, set to show as a plain cell's.

    A kernel that did not compile (a `CompileError` chaining the compiler's
    error) fails the cell with a copy of the compiler's error, at the line of
    the cell the compiler reported (else the kernel's ``def``), chained to the
    CompileError.  Any other exception is itself, shown from the cell's first
    frame on without this package's frames; one raised after the cell's code
    ran (by a compile), at the kernel it names."""
    tb = exc.__traceback__  # (the cell's frames, where it was raised in the cell)
    failed = getattr(getattr(context, "pipelined", None), "failed", None)
    if failed is not None:  # a kernel's compile, finished after its decorator: shown at that decorator
        code = failed[0].py_func.__code__
        tb = _frame_at((code.co_filename, code.co_firstlineno, None))
    if isinstance(exc, KeyboardInterrupt):
        return _interrupted(shell, exc, tb, filename, context)
    if not isinstance(exc, CompileError) and isinstance(exc.__cause__, CompileError):
        exc = exc.__cause__  # (numba's error as a launch raises it, `as_numba_raises`: shown from its compile)
    original = exc
    while isinstance(original, CompileError) and original.__cause__ is not None:
        original = original.__cause__
    if original is not exc:
        shown = copy_error(original)
        if shown is not None:
            frame = _frame_at(_compile_location(shell, exc, original, context))
            # compiled by a launch in the cell: the launch's line, then the kernel's
            _show_once(shell, shown, _joined(_cell_frames(tb, filename), frame),
                       hide_chain=True)
            return shown.with_traceback(frame)
    frames = _cell_frames(tb, filename)
    ours = frames is None or isinstance(exc, GpuCacheError)  # its chain is this package's
    if frames is None:
        frames = _frame_at(_compile_location(shell, exc, exc, context))
    _show_once(shell, exc, frames, hide_chain=ours)
    return exc


# what an interrupt that landed in a compile says (`locks`: numba's state stays
# whole, and an entry is stored only once its stage is done)
INTERRUPTED = ("the compile was interrupted: nothing half-built was stored (the stages finished before "
               "the interrupt are cached, and found when the cell runs again)")


def _interrupted(shell, exc, tb, filename, context):
    """A KeyboardInterrupt: one that landed in the cell's own code shows as
    a plain cell's; one that landed in a compile (below this package's
    frames: numba's, nvJitLink's, a multi-target build's threads) shows at the
    user's line that compiled (the decorator, a launch, else the kernel) and
    says that nothing half-built was stored, without the frames below it."""
    entries = _entries(tb)
    start = next((i for i, e in enumerate(entries) if e.tb_frame.f_code.co_filename == filename), None)
    into = next((i for i, e in enumerate(entries) if (start is None or i > start) and
                 os.path.abspath(e.tb_frame.f_code.co_filename).startswith(_PACKAGE_DIR)), None)
    if start is not None and into is None:  # (the cell's own code: time.sleep, a loop)
        _show_once(shell, exc, _user_frames(entries[start:]), hide_chain=False)
        return exc
    if not exc.args:
        exc.args = (INTERRUPTED,)
    frames = _user_frames(entries[start:into]) if start is not None else None
    if frames is None:
        frames = _frame_at(_compile_location(shell, exc, exc, context))
    _show_once(shell, exc, frames, hide_chain=True)
    return exc


def show_from_the_cell(shell, exc, filename) -> None:
    """Have `exc`, raised while the cell's code ran, show as a plain cell's
    error: every frame from the cell's own on (the magic's, above it, left out)."""
    entries = _entries(exc.__traceback__)
    start = next((i for i, e in enumerate(entries) if e.tb_frame.f_code.co_filename == filename), None)
    if start is not None:
        _show_once(shell, exc, _rebuilt(entries[start:]), hide_chain=False)


def _rebuilt(entries):
    """A traceback of exactly `entries`, in order."""
    tb = None
    for entry in reversed(entries):
        tb = types.TracebackType(tb, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return tb


_FILE_LINE = re.compile(r'File "([^"]+)", line (\d+)|\bat (<[^>]+>|\S+) \((\d+)\)')


def _compile_location(shell, exc, original, context):
    """(filename, line, function name) of the line of a cell a compile failed
    on: the compiler's location, else the kernel's ``def``; None if unknown."""
    for filename, line in _reported_locations(original, exc):
        if _is_cell_file(shell, filename) and linecache.getline(filename, line).strip():
            return filename, line, _function_at(shell, context, filename, line)
    kernel = _kernel_named(context, getattr(exc, "kernel", None))
    if kernel is not None:
        from ..errors import def_line_of

        code = kernel.py_func.__code__
        return code.co_filename, def_line_of(code), kernel.py_func.__name__
    return None


def _reported_locations(original, exc):
    """Where the compiler says it failed, most precise first: the errors' own
    ``loc``, the statement numba's compiler frames were at (innermost first),
    then the places named in the messages."""
    chain, seen = [], set()
    error = original
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        chain.append(error)
        error = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    for error in chain:
        loc = _loc(error, "loc")
        if loc:
            yield loc
    for error in chain:
        for entry in reversed(_entries(error.__traceback__)):
            f_locals = entry.tb_frame.f_locals
            for name in ("loc", "inst", "stmt", "expr", "self"):
                value = f_locals.get(name)
                loc = _loc(value) if name == "loc" else _loc(value, "loc")
                if loc:
                    yield loc
    for error in (*chain, exc):
        for match in _FILE_LINE.finditer(str(error)):
            filename, line = match.group(1, 2) if match.group(1) else match.group(3, 4)
            yield filename, int(line)


def _loc(value, attribute=None):
    """(filename, line) of a numba ``Loc`` (or of `value`'s `attribute`), else None."""
    try:
        if attribute is not None:
            value = getattr(value, attribute, None)
        filename, line = getattr(value, "filename", None), getattr(value, "line", None)
    except Exception:  # whatever the object, looking must not fail the error path
        log.debug("no source location on %r", type(value).__name__, exc_info=True)
        return None
    return (filename, line) if isinstance(filename, str) and isinstance(line, int) else None


def _entries(tb) -> list:
    entries = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    return entries


def _kernel_named(context, qualname):
    if not qualname:
        return None
    for kernel in context.kernels:
        func = kernel.py_func
        if qualname in (func.__qualname__, f"{func.__module__}.{func.__qualname__}"):
            return kernel
    return None


def _function_at(shell, context, filename, line) -> Optional[str]:
    """The name of the function whose code spans `line` of `filename`: a
    kernel of this cell, or a function, kernel or device function of the
    user's namespace."""
    dispatchers = loaded_class("numba.cuda.dispatcher", "CUDADispatcher")
    funcs = [kernel.py_func for kernel in context.kernels]
    for value in list(shell.user_ns.values()):
        if isinstance(value, dispatchers):  # (a Kernel is one)
            funcs.append(value.py_func)
        elif isinstance(value, types.FunctionType):
            funcs.append(value)
    for func in funcs:
        code = getattr(func, "__code__", None)
        if code is None or code.co_filename != filename:
            continue
        lines = [start for start, _, _ in code.co_lines() if start is not None]
        if lines and code.co_firstlineno <= line <= max(lines):
            return func.__name__
    return None


class _Marker(Exception):
    pass


def _frame_at(location):
    """A one-entry traceback at `location` (filename, line, function name or
    None), inside a function of that name where there is one: where a
    compiler found an error that running the cell never reached.  Tracebacks
    and ``%debug`` show the file's lines there.  None for no location."""
    if location is None:
        return None
    filename, line, name = location
    marker = _Marker()
    if name and name.isidentifier() and not keyword.iskeyword(name):
        source = "\n" * (line - 1) + f"def {name}(): raise __marker__\n{name}()\n"
    else:
        source = "\n" * (line - 1) + "raise __marker__\n"
    try:
        exec(compile(source, filename, "exec"), {"__name__": "__main__", "__marker__": marker})
    except _Marker:
        pass
    inner = _entries(marker.__traceback__)[-1]
    return types.TracebackType(None, inner.tb_frame, inner.tb_lasti, inner.tb_lineno)


def _cell_frames(tb, filename):
    """The traceback from the cell's own frame on, without this package's
    or numba's frames (an error raised in them shows at the cell line that
    called in); None if the cell's code is not in it."""
    entries = _entries(tb)
    start = next((i for i, e in enumerate(entries) if e.tb_frame.f_code.co_filename == filename), None)
    if start is None:
        return None
    return _user_frames(entries[start:])


def _hidden_dirs() -> tuple:
    """This package's folder and the compilers': frames the user did not
    write (numba's, numba-cuda's and numba-cuda-mlir's, those installed)."""
    import importlib.util

    hidden = {_PACKAGE_DIR}
    for package in ("numba", "numba_cuda", "numba_cuda_mlir"):
        spec = importlib.util.find_spec(package) if installed(package) else None
        for folder in (spec.submodule_search_locations or ()) if spec is not None else ():
            hidden.add(os.path.abspath(folder) + os.sep)
    return tuple(hidden)


def _user_frames(entries):
    """A traceback of `entries` without this package's and numba's frames."""
    hidden = _hidden_dirs()
    shown = None
    for entry in reversed(entries):
        path = os.path.abspath(entry.tb_frame.f_code.co_filename)
        if not (path.startswith(hidden) or os.path.realpath(path).startswith(hidden)):
            shown = types.TracebackType(shown, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return shown


def _show_launch_error(shell, etype, value, tb, tb_offset=None):
    """IPython's handler for a `LaunchError` and for numba's errors
    (`install_launch_errors`).  A `LaunchError` shows at the user's launch
    line, as a plain error of their code, without this package's or numba's
    frames.  numba's error of a kernel that a launch compiled and that did
    not compile (chained from a `CompileError`) shows at the launch line and
    then at the kernel's line the compiler failed on, as a %%gpukernel cell
    shows it, not through the frames of this package's stages and of numba's
    compiler.  Any other numba error shows as IPython shows it.  ``%tb`` and
    ``%debug`` still have every frame."""
    if getattr(value, "_render_traceback_", None) is None:  # (a %%gpukernel cell's error has its own)
        if isinstance(value, _launch_error_types()[0]):
            _show_once(shell, value, _user_frames(_entries(tb)) or tb, hide_chain=True)
        elif isinstance(value.__cause__, CompileError):
            frame = _frame_at(_launch_compile_location(shell, value.__cause__))
            _show_once(shell, value, _joined(_user_frames(_entries(tb)), frame) or tb, hide_chain=True)
    shell.showtraceback((etype, value, tb), running_compiled_code=True)
    return []


def _launch_compile_location(shell, exc):
    """Where in the user's cells the compile `exc` (a launch's) failed."""
    original = exc
    while isinstance(original, CompileError) and original.__cause__ is not None:
        original = original.__cause__
    dispatchers = loaded_class("numba.cuda.dispatcher", "CUDADispatcher")
    kernels = [v for v in list(shell.user_ns.values()) if isinstance(v, dispatchers)]
    return _compile_location(shell, exc, original, types.SimpleNamespace(kernels=kernels))


def _launch_error_types() -> tuple:
    """The errors a launch in a plain cell raises that `_show_launch_error` shows."""
    from numba.core.errors import NumbaError

    from ..backends.numba_cuda.launch.compiled import LaunchError

    return LaunchError, NumbaError


def install_launch_errors(shell) -> bool:
    """Have `shell` show launch errors at the user's launch line (where no
    other handler of exceptions is set: it is never replaced); True if done."""
    ours = _launch_error_types()
    if shell.custom_exceptions not in ((), ours):
        log.info("IPython has a custom exception handler already; launch errors show every frame")
        return False
    shell.set_custom_exc(ours, _show_launch_error)
    return True


def uninstall_launch_errors(shell) -> None:
    if shell.custom_exceptions == _launch_error_types():
        shell.set_custom_exc((), None)


def _joined(tb, tail):
    """Traceback `tb` (possibly None) followed by `tail`."""
    for entry in reversed(_entries(tb)):
        tail = types.TracebackType(tail, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return tail


def _show_once(shell, exc, tb, hide_chain):
    """Have IPython show `exc` with traceback `tb` (and, with `hide_chain`,
    without the exceptions it chains) the next time it shows `exc`: when the
    cell fails.  After that (``%tb``) IPython shows the whole of it.

    IPython formats a failed cell's error a second time, after showing it,
    to keep with the cell's history: it gets the lines it showed, not a
    second formatting of the whole chain (as long again as showing it)."""

    def render():
        chain = exc.__cause__, exc.__context__, exc.__suppress_context__
        if hide_chain:
            exc.__cause__ = exc.__context__ = None
        try:
            shown = shell.InteractiveTB.structured_traceback(type(exc), exc, tb, tb_offset=0)
        except Exception:  # as IPython would have shown it
            log.debug("IPython could not show the cell's traceback from the cell's frame", exc_info=True)
            shown = shell.InteractiveTB.structured_traceback(type(exc), exc, exc.__traceback__)
        finally:  # (setting __cause__ sets __suppress_context__: restored last)
            exc.__cause__, exc.__context__, exc.__suppress_context__ = chain
        exc._render_traceback_ = lambda: shown  # (for the history, until the cell has ended)

        def forget(result=None):
            exc.__dict__.pop("_render_traceback_", None)
            shell.events.unregister("post_run_cell", forget)

        shell.events.register("post_run_cell", forget)
        return shown

    exc._render_traceback_ = render


