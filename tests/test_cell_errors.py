"""A %%gpukernel cell that does not parse, type or lower fails as a plain
IPython cell fails: the cell's own lines, numbered as IPython numbers the cell
(``Cell In[N], line L``, the magic line being line 1), at the line that
failed, with numba's exception and message and none of gpucache_ext's frames.
The whole chain stays on the exception for ``%tb`` and ``%debug``, and the
failing cell changes neither the cache nor the user's namespace.

Shown text is checked in an in-process shell and, in a real Jupyter kernel
through nbclient (slow)."""

import io
import re
import sys
import threading
from pathlib import Path

import pytest

import gpucache_ext
from gpucache_ext import CompileError

from .helpers import run_notebook, run_python

ROOT = Path(__file__).resolve().parent.parent
ANSI = re.compile(r"\x1b\[[0-9;]*m")

GOOD = '''%%gpukernel --sm 80 --quiet
from numba import cuda

@cuda.jit("void(float32[:])")
def good(r):
    r[0] = 1.0
'''

# kind: (cell, its failing line's number and text, numba's error type, part of its message,
#        the failing stage (None: the cell does not run))
CASES = {
    "syntax": ('''%%gpukernel --sm 80 --quiet
from numba import cuda

@cuda.jit("void(float32[:])")
def bad(r):
    x = r[0] * 2
    r[0] = = x
''', 7, "r[0] = = x", "SyntaxError", "invalid syntax", None),
    "typing": ('''%%gpukernel --sm 80 --quiet
from numba import cuda

@cuda.jit("void(float32[:])")
def bad(r):
    x = r[0] * 2
    r[0] = x + "abc"
''', 7, 'r[0] = x + "abc"', "TypingError", "add(float64, Literal[str](abc))", "typing"),
    "lowering": ('''%%gpukernel --sm 80 --quiet
from numba import cuda

@cuda.jit("void(float32[:])")
def bad(r):
    x = r[0] * 2
    values = [x, 1.0]
    r[0] = values[0]
''', 7, "values = [x, 1.0]", "NumbaRuntimeError", "NRT required but not enabled", "llvm"),
    # numba's message names no line here: the line is found from where its lowering stopped
    "lowering-print": ('''%%gpukernel --sm 80 --quiet
from numba import cuda

@cuda.jit("void(float32[:])")
def bad(r):
    x = r[0] * 2
    print(r)
''', 7, "print(r)", "NotImplementedError", "printing unimplemented for values of type array",
        "llvm"),
}
DEF_LINE = 5  # "def bad(r):" in every case
# The line Python gives a frame that is applying a decorator: the decorator's own from 3.11
# on, the ``def`` below it before (a plain cell's traceback shows the same).
DECORATOR_CALL = "decorator" if sys.version_info >= (3, 11) else "def"


def plain(text: str) -> str:
    return ANSI.sub("", text)


def assert_reads_as_a_plain_cell_error(text, number, line, source, error_type, message):
    assert f"Cell In[{number}], line {line}" in text, text
    assert source in text
    if error_type != "SyntaxError":  # a syntax error shows the line alone, as IPython does
        assert re.search(rf"^-+> {line} +{re.escape(source)}$", text, re.M), text
    # the failing line, not the def (which Python 3.10 gives the frame applying the decorator)
    decorator_frames = int(DECORATOR_CALL == "def" and error_type != "SyntaxError")
    assert text.count(f"Cell In[{number}], line {DEF_LINE}") == decorator_frames
    assert text.rindex(f"Cell In[{number}], line {line}") > text.rfind(f"Cell In[{number}], line {DEF_LINE}")
    assert f"{error_type}: " in text and message in text
    assert "gpucache_ext/" not in text and "gpucache_ext\\" not in text  # no frame of ours
    assert not re.search(r"^File [^\"]", text, re.M), text  # no frame outside the cell at all


def names(ip):
    return {name: id(value) for name, value in ip.user_ns.items() if not name.startswith("_")}


def entries():
    return {stage: values.entries for stage, values in gpucache_ext.default_cache().stats().items()}


def assert_cache_lost_nothing(before, after, stage):
    """No entry lost, none for the failing stage or after it (the stages before
    it succeeded: their entries are sound and may stay)."""
    stages = list(before)
    failed = stages.index(stage) if stage else 0
    assert all(after[s] >= before[s] for s in stages), (before, after)
    assert all(after[s] == before[s] for s in stages[failed:]), (before, after)


@pytest.mark.parametrize("kind", CASES)
def test_error_reads_as_a_plain_cell_error(ip, capsys, kind):
    source, line, text, error_type, message, stage = CASES[kind]
    ip.run_cell(GOOD).raise_error()
    good = ip.user_ns["good"]
    capsys.readouterr()
    before, stored = names(ip), entries()
    number = ip.execution_count
    result = ip.run_cell(source, store_history=True)
    shown = plain("".join(capsys.readouterr()))

    assert not result.success
    assert_reads_as_a_plain_cell_error(shown, number, line, text, error_type, message)
    error = result.error_before_exec if stage is None else result.error_in_exec
    assert type(error).__name__ == error_type and message in str(error)
    assert names(ip) == before and ip.user_ns["good"] is good and "bad" not in ip.user_ns
    assert_cache_lost_nothing(stored, entries(), stage)
    ip.run_cell(GOOD).raise_error()  # and what it had still hits
    assert all(layer.hit for layer in ip.user_ns["good"].last.stages.values())
    if stage is None:
        assert isinstance(error, SyntaxError) and error.lineno == line
        assert result.error_in_exec is None  # nothing ran, as for a plain cell
        return
    # numba's own error, chained to the CompileError and, through it, to the
    # error as numba raised it, with its frames (%debug's `exceptions` reaches them)
    assert isinstance(error.__cause__, CompileError) and error.__cause__.stage == stage
    original = error.__cause__.__cause__
    assert type(original) is type(error) and str(original) == str(error)
    frames = []
    tb = original.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    assert any("numba" in f for f in frames) and any("gpucache_ext" in f for f in frames)


def test_tb_afterwards_shows_the_whole_chain(ip, capsys):
    source = CASES["typing"][0]
    ip.run_cell(source, store_history=True)
    capsys.readouterr()
    ip.run_line_magic("tb", "")
    full = plain("".join(capsys.readouterr()))
    assert "The above exception was the direct cause of the following exception" in full
    assert "CompileError" in full and "gpucache_ext/backends/numba_cuda/stages/" in full and "numba" in full


def test_the_history_keeps_the_error_as_the_cell_showed_it(ip, capsys):
    """IPython keeps a failed cell's formatted error with its history: the
    lines the cell showed, not the whole chain formatted again."""
    number = ip.execution_count
    result = ip.run_cell(CASES["typing"][0], store_history=True)
    shown = "".join(capsys.readouterr())
    kept = ip.history_manager.exceptions[number]
    assert kept["ename"] == "TypingError" and kept["traceback"]
    assert plain("\n".join(kept["traceback"])).strip() in plain(shown)
    assert "gpucache_ext/" not in plain("\n".join(kept["traceback"]))
    assert not hasattr(result.error_in_exec, "_render_traceback_")  # (%tb: the whole chain)


def test_debug_opens_at_the_failing_line_and_reaches_numbas_frames(ip, capsys, monkeypatch):
    source = CASES["typing"][0]
    ip.run_cell(source, store_history=True)
    capsys.readouterr()
    out = io.StringIO()
    debugger_cls = ip.InteractiveTB.debugger_cls
    monkeypatch.setattr(ip.InteractiveTB, "debugger_cls", lambda: debugger_cls(
        stdin=io.StringIO("exceptions\nexceptions 0\nq\n"), stdout=out))
    monkeypatch.setattr(ip.InteractiveTB, "pdb", None)
    tracer = sys.gettrace()
    try:
        ip.run_line_magic("debug", "")
    finally:  # the debugger's quit turns tracing off: give a coverage tool or debugger its tracer back
        sys.settrace(tracer)
    session = plain(out.getvalue())
    first_stop = session.split("ipdb>")[0]
    assert re.search(r"<gpukernel-[0-9a-f]+>\(7\)bad\(\)", first_stop), session
    assert '----> 7     r[0] = x + "abc"' in first_stop
    listing = session.split("ipdb>")[1]
    assert "CompileError(" in listing and listing.count("TypingError(") == 2
    assert re.search(r"numba.*\.py\(\d+\)", session.split("ipdb>")[2]), session  # numba's own frame


def test_error_in_the_cells_code_shows_only_the_cells_frames(ip, capsys):
    number = ip.execution_count
    result = ip.run_cell("%%gpukernel --sm 80 --quiet\nx = 1\n\ny = x / 0\n", store_history=True)
    shown = plain("".join(capsys.readouterr()))
    assert isinstance(result.error_in_exec, ZeroDivisionError)
    assert f"Cell In[{number}], line 4" in shown and re.search(r"^-+> 4 +y = x / 0$", shown, re.M)
    assert "gpucache_ext/" not in shown and "run_cell_magic" not in shown


INTERRUPTED_CELL = """%%gpukernel --sm 80,86 --quiet
import os, signal
from numba import cuda, types
from numba.extending import overload

def bump(x):
    return x + 1

@overload(bump, target="cuda")
def _bump(x):
    if STOP:  # a Ctrl-C, as numba types the kernel (held back until numba's lock is given back)
        os.kill(os.getpid(), signal.SIGINT)
    return lambda x: x + 1

@cuda.jit("void(float32[:])")
def stopped(r):
    r[0] = bump(r[0])
"""


INTERRUPTED_RUN = """
import io, json, re, sys
from IPython.testing.globalipapp import start_ipython
ip = start_ipython()
ip.run_line_magic("load_ext", "gpucache_ext")
import gpucache_ext
cache = gpucache_ext.default_cache()
entries = lambda: {stage: s.entries for stage, s in cache.stats().items()}
before = entries()
ip.user_ns["STOP"] = True
number = ip.execution_count
shown = io.StringIO()
sys.stdout, sys.stderr = shown, shown
result = ip.run_cell(sys.argv[1], store_history=True)
sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
after = entries()
ip.user_ns["STOP"] = False
again = ip.run_cell(sys.argv[1])
print(json.dumps({"error": type(result.error_in_exec).__name__, "number": number,
                  "shown": re.sub(r"\x1b\\[[0-9;]*m", "", shown.getvalue()), "same": before == after,
                  "again": again.success and sorted(ip.user_ns["stopped"].last.per_target) == [80, 86]}))
"""


@pytest.mark.slow  # (about 4 s; an interrupt at every moment of a compile is quick in test_interrupts)
def test_an_interrupted_compile_shows_at_the_users_line_and_says_nothing_was_stored():
    """(In a process of its own: the cell registers an @overload, which numba
    keeps for the rest of the process, in every later kernel's typing.)"""
    seen = run_python(INTERRUPTED_RUN, INTERRUPTED_CELL, env={"GPUCACHE_DIR": "off", "GPUCACHE_REDIS_URL": "off"},
                      json_line=True)
    shown, number = seen["shown"], seen["number"]
    assert seen["error"] == "KeyboardInterrupt"
    assert f"Cell In[{number}], line 15" in shown and re.search(r"^-+> 15 @cuda.jit", shown, re.M), shown
    assert "KeyboardInterrupt: the compile was interrupted: nothing half-built was stored" in shown
    assert "concurrent" not in shown and "gpucache_ext/" not in shown and "numba/" not in shown
    assert seen["same"]  # (it stopped in typing: no entry stored)
    assert seen["again"]


def test_an_interrupt_of_the_cells_own_code_reads_as_a_plain_cells(ip, capsys):
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    result = ip.run_cell("%%gpukernel --sm 80 --quiet\nimport os, signal, time\n"
                         "os.kill(os.getpid(), signal.SIGINT); time.sleep(5)\n")
    shown = plain("".join(capsys.readouterr()))
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    assert "nothing half-built" not in shown and "time.sleep(5)" in shown


def test_a_refused_decorator_shows_at_its_line(ip, capsys):
    number = ip.execution_count
    result = ip.run_cell('%%gpukernel --sm 80 --quiet\nfrom numba import cuda\n'
                         '@cuda.jit("void(float32[:])", fasmath=True)\ndef refused(r):\n    r[0] = 1\n',
                         store_history=True)
    shown = plain("".join(capsys.readouterr()))
    assert isinstance(result.error_in_exec, gpucache_ext.UnsupportedKernelError)
    decorator_line = 3 if DECORATOR_CALL == "decorator" else 4
    assert f"Cell In[{number}], line {decorator_line}" in shown and "unknown option fasmath" in shown
    assert "gpucache_ext/" not in shown


def test_a_kernel_compiled_by_a_launch_in_the_cell_shows_the_launch_then_the_kernel(ip, capsys):
    number = ip.execution_count
    result = ip.run_cell('''%%gpukernel --sm 80 --quiet
from numba import cuda
import numpy as np
@cuda.jit
def late(r):
    r[0] = r[0] + "abc"
late[1, 1](np.zeros(1, np.float32))
''', store_history=True)
    shown = plain("".join(capsys.readouterr()))
    assert type(result.error_in_exec).__name__ == "TypingError"
    launch, kernel = shown.index(f"Cell In[{number}], line 7"), shown.index(f"Cell In[{number}], line 6")
    assert launch < kernel and "gpucache_ext/" not in shown


def test_a_lazy_kernel_that_fails_to_type_shows_at_its_launch_then_its_line(ip, capsys):
    """A kernel without a signature compiles at its first launch, in a plain
    cell: numba's error shows at the launch line and then at the kernel's
    line, as a %%gpukernel cell shows it, not through this package's and
    numba's compiler frames; %tb still shows them."""
    ip.run_cell("%%gpukernel --sm 80 --quiet\nfrom numba import cuda\n@cuda.jit\ndef lazy(a):\n"
                "    a[0] = not_defined_anywhere\n", store_history=True)
    capsys.readouterr()
    number = ip.execution_count
    result = ip.run_cell("import numpy as np\nlazy[1, 1](np.zeros(1))\n", store_history=True)
    shown = plain("".join(capsys.readouterr()))
    assert type(result.error_in_exec).__name__ == "TypingError", shown
    launch, kernel = shown.index(f"Cell In[{number}], line 2"), shown.index(f"Cell In[{number - 1}], line 5")
    assert launch < kernel and "not_defined_anywhere" in shown[kernel:]
    assert "gpucache_ext/" not in shown and "numba/" not in shown
    assert shown.count("Traceback (most recent call last)") == 1, shown
    ip.run_line_magic("tb", "")
    assert "gpucache_ext/backends/numba_cuda/stages/" in plain("".join(capsys.readouterr()))


@pytest.mark.parametrize("magic", ["", "%%gpukernel --sm 80 --quiet\n"])
def test_a_launch_error_shows_at_the_users_launch_line(ip, capsys, magic):
    """A launch with the wrong dtype reads as an error of the user's line, in
    a plain cell and in a %%gpukernel cell: no frame of this package or of
    numba; %tb still shows them."""
    ip.run_cell(GOOD.replace('@cuda.jit("void(float32[:])")', '@cuda.jit(["void(float32[:])"])'),
                store_history=True)  # (a list: launches dispatch on the argument types, as numba's)
    capsys.readouterr()
    number = ip.execution_count
    result = ip.run_cell(magic + "import numpy as np\nx = 1\ngood[1, 1](np.zeros(4, np.float64))\n",
                         store_history=True)
    shown = plain("".join(capsys.readouterr()))
    assert isinstance(result.error_in_exec, gpucache_ext.LaunchError)
    line = 4 if magic else 3
    assert f"Cell In[{number}], line {line}" in shown
    assert re.search(rf"^-+> {line} +good\[1, 1\]\(np.zeros\(4, np.float64\)\)$", shown, re.M), shown
    assert "LaunchTypeError: good: no signature accepts (float64[::1]); declared: (float32[:])" in shown
    assert "gpucache_ext/" not in shown and "numba" not in shown.replace("numba-cuda", "")
    ip.run_line_magic("tb", "")
    assert "gpucache_ext/backends/numba_cuda/launch/kernel.py" in plain("".join(capsys.readouterr()))


def test_launch_errors_leave_a_handler_of_the_users_alone(ip):
    from gpucache_ext.ipython.cell_errors import install_launch_errors, uninstall_launch_errors

    uninstall_launch_errors(ip)
    assert ip.custom_exceptions == ()
    ip.set_custom_exc((KeyError,), lambda *args, **kwargs: None)
    try:
        assert not install_launch_errors(ip) and ip.custom_exceptions == (KeyError,)
    finally:
        ip.set_custom_exc((), None)
    from numba.core.errors import NumbaError

    assert install_launch_errors(ip) and ip.custom_exceptions == (gpucache_ext.LaunchError, NumbaError)


@pytest.mark.smoke
def test_a_syntax_error_counts_its_cell_once_as_a_plain_cells_does(ip):
    """IPython before 9.8 counted a cell whose input transformer raised twice,
    so after a %%gpukernel cell's SyntaxError every traceback named the cell
    one above the number the notebook showed."""
    for source in ("x = = 1\n", CASES["syntax"][0], "y = 2\n"):
        number = ip.execution_count
        result = ip.run_cell(source, store_history=True)
        assert ip.execution_count == number + 1 and result.execution_count == number


def test_syntax_check_leaves_with_the_extension(ip):
    from gpucache_ext.ipython.cellcode import check_cell_syntax

    assert ip.input_transformers_post.count(check_cell_syntax) == 1
    ip.run_line_magic("reload_ext", "gpucache_ext")
    assert ip.input_transformers_post.count(check_cell_syntax) == 1
    ip.run_line_magic("unload_ext", "gpucache_ext")
    assert check_cell_syntax not in ip.input_transformers_post
    ip.run_line_magic("load_ext", "gpucache_ext")


# -- in a Jupyter kernel ------------------------------------------------------------


@pytest.fixture(scope="module")
def executed_notebook():
    state_cell = ("import json\n"
                  "print(json.dumps([sorted([n, id(v)] for n, v in globals().items()\n"
                  "                         if not n.startswith('_') and n not in ('In', 'Out')),\n"
                  "                  {s: v.entries for s, v in gpucache_ext.default_cache().stats().items()}]))")
    cells = ["%load_ext gpucache_ext\nimport gpucache_ext\nprint(gpucache_ext.__file__)", GOOD, state_cell]
    cells += [case[0] for case in CASES.values()]
    cells += [state_cell, GOOD, "print(sorted(s for s, layer in good.last.stages.items() if not layer.hit))"]
    return run_notebook(cells)


def outputs_text(cell):
    texts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            texts.append(output.get("text", ""))
        elif output.get("output_type") == "error":
            texts.append("\n".join(output.get("traceback", [])))
    return plain("\n".join(texts))


@pytest.mark.slow  # a Jupyter kernel
@pytest.mark.parametrize("kind", CASES)
def test_error_reads_as_a_plain_cell_error_in_a_notebook(executed_notebook, kind):
    source, line, text, error_type, message, _ = CASES[kind]
    cells = executed_notebook.cells
    assert outputs_text(cells[0]).strip().startswith(str(ROOT / "gpucache_ext"))  # this checkout's
    cell = next(c for c in cells if c.source == source)
    errors = [o for o in cell.outputs if o.output_type == "error"]
    assert len(errors) == 1 and errors[0].ename == error_type and message in errors[0].evalue
    assert_reads_as_a_plain_cell_error(outputs_text(cell), cell.execution_count, line, text,
                                       error_type, message)


@pytest.mark.slow  # a Jupyter kernel
def test_failing_cells_change_nothing_in_a_notebook(executed_notebook):
    import json

    cells = executed_notebook.cells
    (names_before, stored), (names_after, kept) = (json.loads(outputs_text(cells[i])) for i in (2, -3))
    assert any(name == "good" for name, _ in names_before) and names_after == names_before
    assert_cache_lost_nothing(stored, kept, "llvm")  # the lowering errors' typing entries are sound
    assert outputs_text(cells[-1]).strip() == "[]"  # the kernel compiled before hits every stage
