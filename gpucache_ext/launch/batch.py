"""A cell's declared kernels compiled one behind another (pipelined).

numba's compiler lock is held by typing and lowering alone: libNVVM (ptx)
and nvJitLink (cubin) run without it and release the GIL.  So a cell that
declares several kernels one after another leaves a core idle while each
kernel's ptx and cubin build.  `Pipelined` overlaps them: at a kernel's
decorator its typing and lowering run at once, in the cell's thread (the
kernel's globals and numba's settings are read then, as numba's decorator
reads them), its ptx and cubin in a worker thread, and the kernel before it
is bound (`Kernel.compile_declared`, which takes what was begun) once this
one's typing and lowering are done.  Kernels are bound one after another in
the order they were declared, with the same driver calls, the same reports
and the same first error as compiling each at its decorator.

A kernel is left waiting only where nothing of the user's runs before it is
bound: its definition is followed at once by another definition decorated
with a ``jit`` (`gpucache_ext.ipython.cellcode.followed_by_definitions`),
whose decorator binds it; any other use of the magic's ``jit`` binds the
waiting kernels first, and the cell's end binds the last.  What was begun
and not taken (a kernel after one that failed, an interrupt) is dropped,
never used later: the entries it filed stay cached.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple

from . import registry

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    from ..keys.config import CompileConfig

__all__ = ["AheadOfTime", "DeclaredKernel", "Pipelined", "compile_threads"]


# how many threads a cell's kernels compile in; 1: one kernel at a time, at its decorator
COMPILE_THREADS = "GPUCACHE_COMPILE_THREADS"


def compile_threads(env: Optional[Mapping[str, str]] = None) -> int:
    """The threads a cell's kernels compile in (its own, and those ptx and
    cubin build in): ``GPUCACHE_COMPILE_THREADS``, else this process's cores."""
    given = (os.environ if env is None else env).get(COMPILE_THREADS, "").strip()
    if given:
        if not given.isdigit() or int(given) < 1:
            from ..store.settings import SettingError

            raise SettingError(f"{COMPILE_THREADS}={given!r} is invalid: give a whole number of threads, 1 or "
                               "more (1 compiles a cell's kernels one at a time), or leave it unset for one "
                               "per core")
        return int(given)
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # (not on every platform)
        return os.cpu_count() or 1


class DeclaredKernel(Protocol):
    """What `Pipelined` asks of a declared `Kernel` (``begin_declared``, which
    its `AheadOfTime` part keeps, and ``compile_declared``).  Declared here so that the pipeline is written
    against what it asks, not against `Kernel`, which imports this module."""

    def begin_declared(self, submit: Callable[[Callable[[], None]], Any]) -> bool:
        """Begin what ``compile_declared`` is about to compile; False where nothing was begun."""

    def compile_declared(self) -> Any:
        """Compile (or take what was begun for) every declared signature."""

    def drop_begun(self) -> None:
        """Forget what was begun and nobody took."""


def _in_this_thread(work) -> None:
    """Submit nothing: the kernel's ``compile_declared`` runs `work` when it takes the result."""


class Pipelined:
    """The kernels of one cell, compiled one behind another (see the module)."""

    def __init__(self, threads: int = 0):
        self.threads = threads or compile_threads()
        self._pool: Optional["ThreadPoolExecutor"] = None
        # begun, not bound yet, in the order declared: (kernel, the caller's mark of its decorator)
        self.waiting: List[Tuple[DeclaredKernel, Any]] = []
        # the kernel whose binding raised after its decorator had returned, and its mark: where
        # the error belongs (compiled one at a time, that decorator would have raised it)
        self.failed: Optional[Tuple[DeclaredKernel, Any]] = None

    def _submit(self, work) -> None:
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(self.threads - 1 or 1, thread_name_prefix="gpucache-cell")
        self._pool.submit(work)

    def declared(self, kernel: DeclaredKernel, wait: bool, mark: Callable[[], Any] = lambda: None) -> None:
        """`kernel`'s declared signatures, at its decorator: begun, the
        kernels waiting before it bound, and it bound too unless `wait`
        (then `mark()` is kept with it, for `failed`)."""
        if self.threads < 2:
            self.settle()
            kernel.compile_declared()
            return
        try:
            # (a kernel bound at once builds its own ptx and cubin, in this thread: nothing to overlap)
            begun = kernel.begin_declared(self._submit if wait else _in_this_thread)
        except BaseException:
            self.settle()  # (an earlier kernel's error first, as compiling one after another gives)
            raise
        self.settle()
        if begun and wait:
            self.waiting.append((kernel, mark()))
        else:
            kernel.compile_declared()

    def settle(self) -> None:
        """Bind every waiting kernel, in order (the first error is raised, the rest dropped)."""
        while self.waiting:
            kernel, mark = self.waiting.pop(0)
            try:
                kernel.compile_declared()
            except Exception:
                self.failed = (kernel, mark)
                self.close()
                raise
            except BaseException:
                self.close()
                raise

    def close(self) -> None:
        """The cell ended: drop what was begun and not bound; the workers finish what they run."""
        for kernel, _ in self.waiting:
            kernel.drop_begun()
        self.waiting.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None


class AheadOfTime:
    """A kernel's compiles begun ahead of its ``compile_declared`` (`Pipelined`),
    kept until its compiles take them (`Builds.result`): valid only in the
    `refresh_all` generation they began in (else nothing is taken, and what
    was begun is compiled again, since what it read may have changed)."""

    def __init__(self):
        # {(argtypes, config, force): `gpucache_ext.pipeline.driver.Begun`}, and the generation they began in
        self._begun: Optional[Dict[tuple, Any]] = None
        self._generation = -1

    def begin(self, work: Sequence[Tuple[Tuple, "CompileConfig", bool]],
              start: Callable[[Tuple, "CompileConfig", bool], Any],
              submit: Callable[[Callable[[], None]], Any]) -> bool:
        """Begin each (argtypes, config, force) of `work` with `start` (typing
        and llvm now), its ptx and cubin handed to `submit`; False where
        nothing was begun."""
        begun = {}
        for key in work:
            started = start(*key)
            submit(started.work)
            begun[key] = started
        if begun:
            self._begun, self._generation = begun, registry.generation
        return bool(begun)

    def take(self, key: Tuple[Tuple, "CompileConfig", bool]) -> Any:
        """What was begun for `key` in this generation (None where nothing was)."""
        begun = self._begun
        if begun is None:
            return None
        # (begun in this cell, before anything could change what it read: else compiled again)
        if self._generation != registry.generation:
            self._begun = None
            return None
        return begun.pop(key, None)

    @property
    def begun(self) -> bool:
        """Whether compiles begun ahead wait to be taken."""
        return bool(self._begun)

    def drop(self) -> None:
        """Forget what was begun and nobody took (their entries stay cached)."""
        self._begun = None
