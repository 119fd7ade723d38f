"""How a `Kernel` compiles: its Python function through its `KernelCache`,
for its target or targets, taking first what was begun ahead
(`gpucache_ext.launch.batch.AheadOfTime`); each compile noted in the
registry (`compiled_by`) and told to the kernel's ``on_compile`` with what
made it ("at this launch", "as its variants were read").

`Builds` is the one part of a kernel that calls its cache: the kernel, its
variants (`VariantSet`) and its inspection (`Inspection`) compile and ask
what is current through it.
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, Optional, Sequence, Tuple

from . import registry

if TYPE_CHECKING:
    from ..pipeline.cache import CompileResult, KernelCache
    from ..keys.config import CompileConfig, Targets
    from .batch import AheadOfTime

# told of each compile: its result and what made it
OnCompile = Callable[["CompileResult", str], None]


class Builds:
    """A kernel's compiles (see the module).  `owner`: the kernel its results
    are noted as compiled by; `targets`: several (a fatbin each), or None;
    `ahead`: what was begun ahead for the next compiles."""

    def __init__(self, owner: registry.LiveKernel, cache: "KernelCache", py_func: Callable, *,
                 targets: Optional["Targets"], audit: Any, link: Sequence, ahead: "AheadOfTime",
                 on_compile: Optional[OnCompile] = None):
        self.owner = owner
        self.cache = cache
        self.py_func = py_func
        self.targets = targets
        self.audit = audit
        self.link = link
        self.ahead = ahead
        self.on_compile = on_compile
        self._occasion = threading.local()

    # -- compiling -------------------------------------------------------------
    def result(self, argtypes: Tuple, config: "CompileConfig", force: bool = False) -> "CompileResult":
        """The result for `argtypes` and `config`: what was begun ahead for it
        where that is still valid, else compiled (or found) now."""
        started = self.ahead.take((argtypes, config, force))
        result = started.result() if started is not None else self._build(argtypes, config, force)
        registry.note_compiled(self.owner, result)
        return result

    def _build(self, argtypes, config: "CompileConfig", force: bool) -> "CompileResult":
        if self.targets is not None:
            return self.cache.compile_fatbin(self.py_func, argtypes, config, sms=self.targets, force=force,
                                             audit=self.audit, link=self.link)
        return self.cache.compile(self.py_func, argtypes, config, force=force, audit=self.audit, link=self.link)

    def begin(self, argtypes: Tuple, config: "CompileConfig", force: bool = False):
        """Typing and llvm now; the rest in ``.work`` (`KernelCache.begin`)."""
        return self.cache.begin(self.py_func, argtypes, config, force=force, audit=self.audit, link=self.link)

    def told(self, result: "CompileResult") -> None:
        """Tell ``on_compile`` of `result`, with what made it (`occasion`)."""
        if self.on_compile is not None:
            self.on_compile(result, getattr(self._occasion, "text", "at this launch"))

    @contextlib.contextmanager
    def occasion(self, text: str) -> Iterator[None]:
        """What compiles inside is told to ``on_compile`` as made `text`."""
        before = getattr(self._occasion, "text", "at this launch")
        self._occasion.text = text
        try:
            yield
        finally:
            self._occasion.text = before

    # -- what is current (compiling nothing) -------------------------------------
    def still_current(self, argtypes: Tuple, config: "CompileConfig", result: "CompileResult") -> bool:
        """Whether compiling again now would give `result` (`KernelCache.still_current`)."""
        return self.cache.still_current(self.py_func, argtypes, config, result, link=self.link)

    def tokens(self, argtypes: Tuple, config: "CompileConfig") -> Dict[str, Any]:
        """Each stage's token for `argtypes` and `config` now (`KernelCache.tokens`)."""
        return self.cache.tokens(self.py_func, argtypes, config, link=self.link)

    def typed(self, argtypes: Tuple, config: "CompileConfig"):
        """The typing stage's typed function (`KernelCache.typed`)."""
        return self.cache.typed(self.py_func, argtypes, config, link=self.link)


__all__ = ["Builds", "OnCompile"]
