"""A cell's declared kernels compiled one behind another (issue 36).

At a kernel's decorator its typing and lowering run at once; where the next
statement is another ``jit``-decorated definition, its ptx and cubin build
in a worker thread while that next kernel is typed, and it is bound at the
next decorator.  These tests hold it to compiling each kernel at its own
decorator (``GPUCACHE_COMPILE_THREADS=1``): the same artifacts, reports,
values read, errors, tracebacks and namespace afterwards."""

from __future__ import annotations

import re

import pytest

import gpucache_ext
from gpucache_ext.ipython.cellcode import followed_by_definitions
from gpucache_ext.launch.batch import COMPILE_THREADS, compile_threads
from gpucache_ext.store.settings import SettingError

KERNELS = """
from numba import cuda

@cuda.jit(device=True)
def twice(x):
    return x * 2.0

@cuda.jit("void(float32[:], float32[:])")
def first(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = twice(x[i]) + K

@cuda.jit("void(float32[:], float32[:])")
def second(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = twice(x[i]) * x[i]

@cuda.jit(["void(float32[:], float32[:])", "void(float64[:], float64[:])"])
def third(r, x):
    i = cuda.grid(1)
    s = 0.0
    for j in range(x.size):
        s += twice(x[j])
    if i < r.size:
        r[i] = s
"""


def _strip(text: str) -> str:
    """A shown traceback without colours and the names that differ run by run."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    return re.sub(r"<(?:gpukernel|ipython-input)-[0-9a-f-]+>", "<cell>", text)


def _run(ip, monkeypatch, threads, line, body, **ns):
    """Run the cell with `threads` in a new, empty default cache; (the cell's results, printed)."""
    monkeypatch.setenv(COMPILE_THREADS, str(threads))
    gpucache_ext.configure_default_cache()  # (the session's cache made again: empty, memory only)
    ip.reset(new_session=False)
    ip.user_ns.update(ns)
    shown = []
    publish = ip.display_pub.publish
    monkeypatch.setattr(ip.display_pub, "publish", lambda data, *a, **k: (shown.append(data), publish(data, *a, **k)))
    result = ip.run_cell(f"%%gpukernel {line}\n{body}")
    return result, shown


def _compiled(ip):
    """{(kernel, signature): (ptx, cubin, outcomes per stage)} of the kernels bound in the namespace."""
    from gpucache_ext import Kernel

    found = {}
    for name, value in ip.user_ns.items():
        if isinstance(value, Kernel):
            for argtypes, result in value.results.items():
                found[(name, str(argtypes))] = (result.ptx, result.cubin,
                                                tuple((s, r.outcome.name) for s, r in result.stages.items()))
    return found


@pytest.mark.parametrize("source, expected", [
    # two kernels one after another: the first waits for the second's decorator
    ("@cuda.jit('void()')\ndef a():\n    pass\n\n@cuda.jit('void()')\ndef b():\n    pass\n", {2}),
    # a device function after a kernel, then a kernel: both wait
    ("@cuda.jit('void()')\ndef a():\n    pass\n@cuda.jit(device=True)\ndef d():\n    return 1\n"
     "@jit\ndef b():\n    pass\n", {2, 5}),
    # user code between the two: the first is bound at its own decorator
    ("@cuda.jit('void()')\ndef a():\n    pass\nprint(a)\n@cuda.jit('void()')\ndef b():\n    pass\n", set()),
    # the next definition is not a jit's: its decorator cannot bind the first
    ("@cuda.jit('void()')\ndef a():\n    pass\n@functools.cache\ndef b():\n    pass\n", set()),
    # an undecorated function next, and definitions inside a block: never
    ("@cuda.jit('void()')\ndef a():\n    pass\ndef b():\n    pass\n", set()),
    ("if True:\n    @cuda.jit('void()')\n    def a():\n        pass\n    @cuda.jit('void()')\n    def b():\n"
     "        pass\n", set()),
    ("this is not python", set()),
])
def test_which_definitions_may_wait_for_the_next_decorator(source, expected):
    assert followed_by_definitions(source) == frozenset(expected)
    # (without the magic's line, numbered from 1)
    assert followed_by_definitions(source, magic_line=False) == frozenset(line - 1 for line in expected)


def test_the_setting_is_checked_and_names_the_fix():
    assert compile_threads({COMPILE_THREADS: "3"}) == 3
    assert compile_threads({}) >= 1
    for bad in ("0", "two", "-1", "1.5"):
        with pytest.raises(SettingError, match=rf"{COMPILE_THREADS}='{re.escape(bad)}' is invalid: give a whole"):
            compile_threads({COMPILE_THREADS: bad})


def test_pipelined_kernels_are_those_compiled_one_at_a_time(ip, monkeypatch, capsys):
    one, _ = _run(ip, monkeypatch, 1, "--sm 86", KERNELS, K=1.5)
    assert one.success, one.error_in_exec
    alone, report_alone = _compiled(ip), capsys.readouterr().out
    two, _ = _run(ip, monkeypatch, 2, "--sm 86", KERNELS, K=1.5)
    assert two.success, two.error_in_exec
    together, report_together = _compiled(ip), capsys.readouterr().out
    assert len(alone) == 4 and together == alone
    # the same report, rows in the order declared (times aside)
    rows = [re.sub(r"\d+ ms", "", line).split() for line in report_alone.splitlines()]
    assert [re.sub(r"\d+ ms", "", line).split() for line in report_together.splitlines()] == rows
    assert [row[0] for row in rows[1:5]] == ["first", "second", "third", "third"]


def test_a_waiting_kernel_is_bound_at_the_next_decorator(ip, monkeypatch):
    # a decorator of the user's named jit runs while the kernel before it waits (its ptx and cubin
    # meanwhile in a thread); the next cuda.jit binds it, and every kernel is bound by the cell's end
    body = KERNELS.replace("@cuda.jit(\"void(float32[:], float32[:])\")\ndef second", """\
@jit
def probe():
    pass

@cuda.jit("void(float32[:], float32[:])")
def second""")
    seen = []

    def jit(func):
        seen.append((ip.user_ns["first"].begun, dict(ip.user_ns["first"].overloads)))
        return func

    result, _ = _run(ip, monkeypatch, 2, "--sm 86 --quiet", body, K=1.5, jit=jit)
    assert result.success, result.error_in_exec
    assert seen == [(True, {})]
    first = ip.user_ns["first"]
    assert not first.begun and len(first.overloads) == 1 and first.results


def test_a_global_a_later_decorator_changes_is_read_as_the_kernels_decorator_found_it(ip, monkeypatch):
    # K is read when `first` is typed, at its decorator, as numba reads it; the next decorator's
    # argument changes it before `first`'s ptx is built
    body = KERNELS.replace('@cuda.jit("void(float32[:], float32[:])")\ndef second',
                           '@cuda.jit(set_k(3.25) or "void(float32[:], float32[:])")\ndef second')

    def set_k(value):
        ip.user_ns["K"] = value

    found = {}
    for threads in (1, 2):
        result, _ = _run(ip, monkeypatch, threads, "--sm 86 --quiet", body, K=1.5, set_k=set_k)
        assert result.success, result.error_in_exec
        found[threads] = _compiled(ip)
        (ptx,) = [ptx for (name, _), (ptx, _, _) in found[threads].items() if name == "first"]
        # 1.5, not 3.25 (as a double or a float constant)
        assert re.search("0d3FF8000000000000|0f3FC00000", ptx) and not re.search("0d400A0+|0f40500000", ptx)
    assert found[1] == found[2]


def test_an_error_found_after_the_decorator_is_shown_and_undone_as_at_the_decorator(ip, monkeypatch, capsys,
                                                                                     tmp_path):
    # a PTX file that does not assemble: only the cubin stage (nvJitLink) finds it, in the worker thread
    bad = tmp_path / "bad.ptx"
    bad.write_text(".version 8.0\n.target sm_86\n.address_size 64\nthis is not ptx\n")
    body = KERNELS.replace('@cuda.jit("void(float32[:], float32[:])")\ndef first',
                           f'@cuda.jit("void(float32[:], float32[:])", link=[{str(bad)!r}])\ndef first')
    shown = {}
    for threads in (1, 2):
        result, _ = _run(ip, monkeypatch, threads, "--sm 86", body, K=1.5, first="as before")
        assert not result.success
        error = result.error_in_exec
        shown[threads] = (type(error).__name__, str(error), _strip(capsys.readouterr().out),
                          ip.user_ns.get("first"), "second" in ip.user_ns, "twice" in ip.user_ns)
    assert shown[1] == shown[2]
    name, message, traceback, first, second, twice = shown[2]
    assert "ERROR_PTX_COMPILE" in message and first == "as before" and not second and twice
    # at the failing kernel's decorator, then its def; not at the next kernel's decorator
    assert re.findall(r"----> (\d+) (\S+)", traceback) == [("8", "@cuda.jit(\"void(float32[:],"), ("9", "def")], \
        traceback


def test_a_compile_begun_and_finished_in_another_thread_is_the_compile(tmp_path):
    import threading

    from gpucache_ext import CompileConfig, KernelCache, samples

    from .helpers import artifacts, fresh

    func = samples.load(samples.AXPY)["axpy"]
    sig, config = samples.AXPY_SIG, CompileConfig(sm=86)
    cache = KernelCache(directory=tmp_path)
    begun = cache.begin(func, sig, config)
    worker = threading.Thread(target=begun.work)
    worker.start()
    worker.join()
    result = begun.result()
    assert [s.outcome.name for s in result.stages.values()] == ["MISS"] * 4
    assert artifacts(result) == fresh(func, sig, config)
    # filed as a compile files it: the same call now hits every stage
    again = cache.compile(func, sig, config)
    assert [s.outcome.name for s in again.stages.values()] == ["HIT"] * 4 and artifacts(again) == artifacts(result)


def test_a_kernel_bound_at_its_decorator_builds_in_the_cells_thread(ip, monkeypatch):
    # one kernel, or kernels with code between: nothing to overlap, so no worker thread is started
    import threading

    started = []
    real = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", lambda self: (started.append(self.name), real(self))[1])
    body = KERNELS.replace('@cuda.jit("void(float32[:], float32[:])")\ndef second',
                           'print("between")\n\n@cuda.jit("void(float32[:], float32[:])")\ndef second').replace(
        '@cuda.jit(["void', 'print("between")\n\n@cuda.jit(["void')
    for source in (KERNELS.split("@cuda.jit(\"void(float32[:], float32[:])\")\ndef second")[0], body):
        result, _ = _run(ip, monkeypatch, 2, "--sm 86 --quiet", source.replace("def third", "def third_"),
                         K=1.5)
        assert result.success, result.error_in_exec
    assert not [name for name in started if name.startswith("gpucache-cell")], started
