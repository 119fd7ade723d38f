"""Ctrl-C during a compile (Jupyter's Interrupt: a SIGINT, raised as a
KeyboardInterrupt in the main thread) leaves no lock held and numba's state
whole, stores nothing half-built, and the same compile afterwards equals a
fresh one.

Real SIGINTs are sent at moments spread over a compile.  Separately, an
interrupt is raised from a trace function at each line of numba's
compiler-lock code, where one once left a lock held (the next compile from
another thread then waited forever): what numba's own takes leave held is
given back.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
import time

import pytest

from gpucache_ext import CompileConfig, KernelCache
from gpucache_ext.backends.numba_cuda.locks import _rlocks, compiler_lock

from .helpers import artifacts, fresh, notebook_namespace, run_cell


@pytest.fixture(autouse=True)
def sigint_raises():
    """Ctrl-C raises KeyboardInterrupt, as in a notebook's kernel, even where the
    test run was started with SIGINT ignored (a shell's background job)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.getsignal(signal.SIGINT)
    if before is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)

SIG = "void(float32[:], float32[:])"
SM80 = CompileConfig(sm=80)
SOURCE = """
@cuda.jit(device=True)
def twice(v):
    return v * 2.0

def kernel(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = twice(x[i]) + 1.5
"""
NUMBA = (os.sep + "numba" + os.sep, os.sep + "numba_cuda" + os.sep)


def new_kernel():
    ns = notebook_namespace()
    run_cell(ns, SOURCE)
    return ns["kernel"]


class Interrupter:
    """A trace function counting the lines numba runs (in the files `only`,
    when given), raising KeyboardInterrupt at the line numbered `at`."""

    def __init__(self, at=None, only=()):
        self.at, self.only, self.count = at, only, 0

    def __call__(self, frame, event, arg):
        if event == "call":
            return self if frame.f_code.co_filename.endswith(".py") and \
                any(part in frame.f_code.co_filename for part in NUMBA) else None
        if event == "line" and (not self.only or os.path.basename(frame.f_code.co_filename) in self.only):
            self.count += 1
            if self.count == self.at:
                raise KeyboardInterrupt(f"interrupted at numba line {self.at}")
        return self

    def run(self, fn):
        previous = sys.gettrace()  # (a coverage tool's or a debugger's: given back afterwards)
        sys.settrace(self)
        try:
            return fn()
        finally:
            sys.settrace(previous)


def lock_free_for_other_threads() -> bool:
    """True when another thread can take every lock numba's compiler lock is made of."""
    taken = []

    def take():
        taken.extend(lock.acquire(timeout=5) for lock in _rlocks())
        for lock, got in zip(_rlocks(), taken):
            if got:
                lock.release()

    thread = threading.Thread(target=take)
    thread.start()
    thread.join()
    return all(taken)


LOCK_CODE = ("compiler_lock.py", "event.py")


def lock_lines() -> int:
    """How many lines of numba's compiler-lock code a compile runs (the window
    between its two locks, and their releases)."""
    KernelCache().compile(new_kernel(), SIG, SM80)  # (what the first compile of a process loads)
    dry = Interrupter(only=LOCK_CODE)
    dry.run(lambda: KernelCache().compile(new_kernel(), SIG, SM80))
    return dry.count


def check_after_interrupt(cache, kernel, where):
    assert not any(lock._is_owned() for lock in _rlocks()), f"a compiler lock is still held ({where})"
    assert lock_free_for_other_threads(), f"another thread cannot compile ({where})"
    assert artifacts(cache.compile(kernel, SIG, SM80)) == fresh(kernel, SIG, SM80), where


@pytest.mark.slow
def test_an_interrupt_between_numbas_two_locks_leaves_neither_held():
    lines = lock_lines()
    assert lines, "numba's compiler lock runs Python code between its locks"
    for at in range(1, lines + 1, max(1, lines // 12)):
        cache, kernel = KernelCache(), new_kernel()
        interrupter = Interrupter(at, only=LOCK_CODE)
        with pytest.raises(KeyboardInterrupt):
            interrupter.run(functools.partial(cache.compile, kernel, SIG, SM80))
        check_after_interrupt(cache, kernel, f"line {at} of numba's lock code")


def compile_interrupted_after(seconds: float):
    """Compile a new kernel in a new cache with a SIGINT `seconds` in; returns
    (cache, kernel, whether the compile was interrupted)."""
    cache, kernel = KernelCache(), new_kernel()
    timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
    interrupted = False
    try:
        try:
            timer.start()
            cache.compile(kernel, SIG, SM80)
        finally:
            timer.join()  # (a signal after the compile lands here, or in the sleep)
            time.sleep(0.05)
    except KeyboardInterrupt:
        interrupted = True
    return cache, kernel, interrupted


@pytest.mark.parametrize("count", [pytest.param(8, id="quick"), pytest.param(40, marks=pytest.mark.slow, id="many")])
def test_sigint_at_any_moment_of_a_compile(count):
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    start = time.perf_counter()
    KernelCache().compile(new_kernel(), SIG, SM80)
    took = time.perf_counter() - start
    interrupted = 0
    for k in range(count):
        cache, kernel, stopped = compile_interrupted_after(took * k / count)
        interrupted += stopped
        check_after_interrupt(cache, kernel, f"SIGINT at {k}/{count} of a compile")
    assert interrupted >= count // 2, "most signals landed inside the compile"


def sigints_inside_the_lock(count: int) -> list:
    """Send `count` SIGINTs while holding numba's lock through `compiler_lock`
    (which must raise KeyboardInterrupt); returns what the locked work reached."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    reached = []
    with pytest.raises(KeyboardInterrupt):
        with compiler_lock():
            for _ in range(count):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
            reached.append("the rest of the locked work ran")
    assert not any(lock._is_owned() for lock in _rlocks())
    return reached


def test_a_sigint_held_back_is_raised_once_numbas_lock_is_given_back():
    assert sigints_inside_the_lock(1)


def test_a_second_sigint_is_raised_at_once():
    assert not sigints_inside_the_lock(2)
