"""numba's compiler lock, safe against Ctrl-C.

numba keeps process-wide state that a ``KeyboardInterrupt`` (Jupyter's
Interrupt) landing in the wrong place corrupts for the rest of the process:

* its global compiler lock is two re-entrant locks taken one after the other,
  with Python code (event hooks) between them and between their releases,
  and llvmlite's lock runs the same hooks; an interrupt there leaves a lock
  held by the main thread (nothing shows it: the locks are re-entrant), and
  the next compile from another thread (a background audit, a multi-target
  build) waits forever;
* its typing and target contexts load new registrations through generators,
  which an exception inside kills: every later compile then fails.

So while numba's lock is held by a compile of ours, SIGINT is held back and
raised as soon as the lock is given back (the work of one stage, typically
tens of milliseconds): the interrupt still stops the cell, numba's state
stays whole, and nothing half-built is stored (stores happen after a stage
returns).  A second SIGINT while one is held is raised at once, for a compile
that never ends.  And when a thread's outermost compile ends, whatever
numba's own nested takes left held beyond what the thread held on entry is
given back.
"""

from __future__ import annotations

import contextlib
import signal
import threading

from numba.cuda.core.compiler_lock import global_compiler_lock

__all__ = ["compiler_lock", "interrupts_deferred"]


class _Depth(threading.local):
    def __init__(self):
        self.depth = 0
        self.held_on_entry = ()


_state = _Depth()


def _rlocks():
    """The re-entrant locks numba's global compiler lock is made of, and
    llvmlite's (numba's event hooks run inside it: an interrupt there leaves
    it held, and the next lowering on another thread waits on it forever)."""
    from llvmlite.binding import ffi

    found = []
    for part in (getattr(global_compiler_lock, "_numba_lock", None),
                 getattr(global_compiler_lock, "_cuda_lock", None), global_compiler_lock,
                 getattr(ffi.lib, "_lock", None)):
        lock = getattr(part, "_lock", None)
        if lock is not None and hasattr(lock, "_is_owned") and lock not in found:
            found.append(lock)
    return found


def _owned(lock) -> int:
    """How many times this thread holds `lock`."""
    if not lock._is_owned():
        return 0
    count = getattr(lock, "_recursion_count", None)
    return count() if count is not None else 1


@contextlib.contextmanager
def interrupts_deferred():
    """Hold a SIGINT that arrives in the block until it ends, then deliver it
    as it would have been (main thread only; a second SIGINT is delivered at
    once)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    try:
        previous = signal.getsignal(signal.SIGINT)
    except ValueError:  # no signals here (an embedded interpreter)
        previous = None
    if not callable(previous):  # SIG_IGN, SIG_DFL, or a handler not set from Python: nothing to defer
        yield
        return
    arrived = []

    def hold(signum, frame):
        if arrived:  # asked twice: the user means it
            previous(signum, frame)
        arrived.append((signum, frame))

    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if arrived:
            previous(*arrived[0])


@contextlib.contextmanager
def compiler_lock():
    """numba's global compiler lock, with SIGINT held back while it is held,
    and given back whole when the thread's outermost compile ends."""
    outermost = _state.depth == 0
    if outermost:
        _state.held_on_entry = tuple(_owned(lock) for lock in _rlocks())
    with interrupts_deferred():
        taken = False
        try:
            global_compiler_lock.acquire()
            taken = True
            _state.depth += 1
            yield
        finally:
            try:
                if taken:
                    _state.depth -= 1
                    global_compiler_lock.release()
            finally:
                if outermost:  # also when numba's acquire was cut short between its two locks
                    _give_back_leftovers()


def _give_back_leftovers() -> None:
    """Release what numba's own takes, cut short by an interrupt, left held."""
    for lock, before in zip(_rlocks(), _state.held_on_entry):
        while _owned(lock) > before:
            lock.release()
