"""What a `Kernel` shows of what it compiled: numba's inspection API
(``inspect_llvm``, ``inspect_asm``, ``inspect_types``, ``inspect_sass``...)
answered from the compile results, per signature as numba answers, and the
last compile's artifacts (``ptx``, ``cubin``, ``resources``, ``fatbin``,
``inspect()``).

`Inspection` is a part a `Kernel` holds, written against what it reads of
the kernel (`Inspected`); the kernel's own ``inspect_*`` and artifacts
delegate to it, so that these answer in place of numba's own.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Protocol, Sequence, Tuple

from numba.cuda.dispatcher import CUDADispatcher, _DispatcherBase

from ....pipeline.cache import CompileResult
from ....pipeline.results import FatbinResult, short_signature
from ..signatures import normalize_signature
from .compiled import CachedKernel, LaunchError


class Inspected(Protocol):
    """What `Inspection` reads of its `Kernel`: numba's dispatcher (its
    variants, whether it compiles, ``compile``; numba's own ``inspect_types``
    and ``get_annotation_info`` are handed the kernel), the signatures it
    declared and its results.  Declared here so that the inspection is
    written against what it reads, not against `Kernel`, which imports this
    module."""

    __name__: str
    overloads: Mapping[Tuple, CachedKernel]
    signatures: Sequence[Tuple]
    specialized: bool
    _can_compile: bool  # (numba's)
    declared: Tuple[Tuple, ...]
    results: Dict[Tuple, CompileResult]
    config: Any

    def compile(self, sig) -> CachedKernel:
        """The variant for `sig`, compiled now where needed."""

    def summary(self) -> str:
        """The config's summary (every target of a multi-target kernel)."""


class Inspection:
    """A kernel's inspection: numba's ``inspect_*`` and the last compile's
    artifacts.  `typed`: the typing stage's typed function for (argtypes,
    config) (`Builds.typed`)."""

    def __init__(self, kernel: Inspected, typed: Callable[[Tuple, Any], Any]):
        self._kernel = kernel
        self._typed = typed

    # -- numba's dispatcher API, answered from the compile results ----------------
    def _per_signature(self, signature, value: Callable[[CompileResult], Any]):
        """numba's convention: one value for a given signature (or a specialized
        kernel), else {argument types: value} for every compiled signature."""
        if signature is not None:
            return value(self._variant_of(signature))
        if self._kernel.specialized:
            return value(next(iter(self._kernel.overloads.values())))
        return {argtypes: value(kernel) for argtypes, kernel in self._kernel.overloads.items()}

    def _variant_of(self, signature) -> CachedKernel:
        args = getattr(signature, "args", None)
        if args is None:
            args = signature if isinstance(signature, tuple) else normalize_signature(signature)
        args = tuple(args)
        kernel = self._kernel.overloads.get(args)
        if kernel is None and (self._kernel._can_compile or args in self._kernel.declared):
            kernel = self._kernel.compile(args)
        if kernel is None:
            raise LaunchError(f"{self._kernel.__name__} has no signature {short_signature(args)}; "
                              f"compiled: {', '.join(map(short_signature, self._kernel.overloads)) or 'none'}")
        return kernel

    def inspect_llvm(self, signature=None):
        """The NVVM IR, as numba's ``inspect_llvm`` (per signature)."""
        return self._per_signature(signature, lambda k: k.result.llvm_ir)

    def inspect_asm(self, signature=None):
        """The PTX, as numba's ``inspect_asm`` (for this kernel's target, not the GPU's)."""
        return self._per_signature(signature, lambda k: k.result.ptx)

    def inspect_lto_ptx(self, signature=None):
        """The PTX after link-time optimisation (the kernel must be compiled with lto)."""
        def lto_ptx(kernel):
            if not kernel.result.config.lto:
                raise LaunchError(f"{self._kernel.__name__} was not compiled with lto (--lto or lto=True)")
            return kernel.result.ptx
        return self._per_signature(signature, lto_ptx)

    def inspect_types(self, file=None, signature=None, pretty=False, style="default", **kwargs):
        """numba's ``inspect_types``: the Python source of each compiled
        variant (or of `signature`'s) annotated with numba's IR and types,
        printed to `file` (default stdout), or with ``pretty=True`` an object
        Jupyter shows highlighted (needs pygments).  From the typing stage:
        its typed IR where still cached, else typed again (after a restart a
        disk hit holds none)."""
        self._annotate([signature] if signature is not None else list(self._kernel.overloads))
        if signature is None and not pretty and not kwargs:  # numba-cuda's own (each variant's entry name)
            return CUDADispatcher.inspect_types(self._kernel, file=file)
        # numba's general one (numba-cuda's takes `file` alone): a signature, pretty
        return _DispatcherBase.inspect_types(self._kernel, file=file, signature=signature, pretty=pretty, style=style,
                                             **kwargs)

    def get_annotation_info(self, signature=None):
        """numba's: the annotation per signature (what ``inspect_types(pretty=True)`` renders)."""
        self._annotate([signature] if signature is not None else list(self._kernel.signatures))
        return CUDADispatcher.get_annotation_info(self._kernel, signature)

    def _annotate(self, signatures) -> None:
        """Give each variant of `signatures` numba's type annotation, from the typing stage."""
        from numba.cuda.core import postproc
        from numba.cuda.core.annotations import type_annotations

        for argtypes in signatures:
            variant = self._kernel.overloads[argtypes]  # (a KeyError for a signature not compiled, as numba's)
            if variant._type_annotation is not None:
                continue
            config = variant.result.config
            state = self._typed(argtypes, config).state
            # what numba's IRLegalization (its ir.Dels) and AnnotateTypes passes make of the same typed IR
            func_ir = state["func_ir"].copy()
            postproc.PostProcessor(func_ir).run(True, extend_lifetimes=config.debug)
            variant._type_annotation = type_annotations.TypeAnnotation(
                func_ir=func_ir, typemap=state["typemap"], calltypes=state["calltypes"],
                lifted=(), lifted_from=None, args=state["args"], return_type=state["return_type"],
                html_output=None)

    def inspect_sass(self, signature=None):
        """The SASS, from nvdisasm, as numba's ``inspect_sass``: per signature,
        the text (`gpucache_ext.toolchain.sass.disassemble`; `SassUnavailable` says why not)."""
        from ....toolchain.sass import disassemble

        return self._per_signature(signature, lambda k: disassemble(k.result.cubin))

    def inspect_sass_by_arch(self, signature=None):
        """The SASS of every cubin target, ``{86: text, ...}`` (one entry for a
        single-target kernel), per signature as `inspect_sass`.  A target
        nvdisasm cannot read (sm_72 and older for the wheel's nvdisasm 13)
        gives the `SassUnavailable` message, which names what would work, in
        place of its text."""
        from ....toolchain.sass import SassUnavailable, disassemble

        def by_arch(kernel):
            found = {}
            for sm, cubin in kernel.result.cubins.items():
                try:
                    found[sm] = disassemble(cubin)
                except SassUnavailable as exc:
                    found[sm] = f"(no SASS: {exc})"
            return found
        return self._per_signature(signature, by_arch)

    # -- inspecting --------------------------------------------------------------
    @property
    def last(self) -> CompileResult:
        """The most recently compiled signature's result."""
        if not self._kernel.results:
            raise LaunchError(
                f"{self._kernel.__name__} has not been compiled yet: launch it, or give it a signature "
                "(@cuda.jit('void(float32[:])') or %%gpukernel --sig ...)"
            )
        return next(reversed(self._kernel.results.values()))

    @property
    def ptx(self) -> str:
        return self.last.ptx

    @property
    def llvm_ir(self) -> str:
        return self.last.llvm_ir

    @property
    def cubin(self) -> bytes:
        return self.last.cubin

    @property
    def resources(self) -> Dict[str, int]:
        return self.last.resources

    @property
    def fatbin(self) -> bytes:
        """The fatbin of the most recently compiled signature: every target's
        cubin and the PTX (a kernel built for several targets: ``--sm 80,86,90``)."""
        last = self.last
        if not isinstance(last, FatbinResult):
            kernel = self._kernel
            raise LaunchError(
                f"{kernel.__name__} was compiled for one target ({kernel.config.summary().split()[0]}), and "
                "has a cubin but no fatbin; list several targets (--sm 80,86,90, or Kernel(targets=...)) "
                "to build one")
        return last.fatbin

    def inspect(self) -> str:
        """Config, per-stage tokens and hits, resources and PTX size, per signature."""
        lines = [f"{self._kernel.__name__}: {self._kernel.summary()}"]
        for result in self._kernel.results.values():
            lines.append(result.explain())
            for sm, res in result.resources_by_arch.items():
                lines.append(
                    f"  resources sm_{sm}: {res['registers']} registers, {res['shared_bytes']} B shared, "
                    f"{res['local_bytes']} B local, {res['constant_bytes']} B constant, "
                    f"spills {res['spill_stores']}/{res['spill_loads']} B, cubin {res['cubin_bytes']} B"
                )
            lines.append(f"  ptx: {len(result.ptx.splitlines())} lines"
                         + (f", fatbin: {len(result.fatbin)} bytes" if isinstance(result, FatbinResult) else ""))
        if not self._kernel.results:
            lines.append("  (not compiled yet)")
        return "\n".join(lines)


__all__ = ["Inspected", "Inspection"]
