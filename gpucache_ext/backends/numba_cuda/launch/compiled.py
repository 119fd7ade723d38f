"""A compiled variant as numba's dispatcher holds it, and the image a GPU loads.

`CachedKernel` is numba's ``_Kernel`` built from a `CompileResult` instead of
compiled by numba (it answers the result's attributes too), with its code
library, `CachedCodeLibrary`, whose image for a device is the one its
`Kernel` chooses (`Kernel.image_for`, then `choose_image`: a fatbin, a cubin,
or PTX for the driver).  `LaunchError`: a kernel cannot be launched as asked.
"""

from __future__ import annotations

import contextlib
from typing import Any, Mapping, Protocol, Tuple

from numba.cuda.codegen import CUDACodeLibrary
from numba.cuda.dispatcher import _Kernel

from ....pipeline.cache import CompileResult
from ....errors import CompileError, GpuCacheError, as_numba_raises
from ....pipeline.results import FatbinResult
from ....keys.tokens import short_name


class VariantOwner(Protocol):
    """What a compiled variant asks of the `Kernel` that holds it: its
    options (extensions, the shared memory carveout), the image a device
    loads (`Kernel.image_for`) and whether it launches on the simulator.  Declared here so that the variant is written
    against what it asks, not against `Kernel`, which imports this module."""

    @property
    def options(self) -> Mapping[str, Any]:
        """The options the kernel was declared with."""

    def image_for(self, result: CompileResult, cc: Tuple[int, int]):
        """What a GPU of `cc` loads for `result`, as a cuda.core ``ObjectCode``."""

    def on_simulator(self) -> bool:
        """Whether its launches run on numba's CUDA simulator."""


class LaunchError(GpuCacheError):
    """A kernel cannot be launched as asked (no matching signature, wrong target).

    Where numba-cuda's dispatcher raises an error of its own type for the
    same launch, ours is an instance of that type too (`LaunchValueError`,
    `LaunchTypeError`), so code that catches numba's type catches ours."""


class LaunchValueError(LaunchError, ValueError):
    """A launch numba refuses with ``ValueError``: a kernel called without a
    launch configuration, or a configuration of the wrong length."""


class LaunchTypeError(LaunchError, TypeError):
    """A launch numba refuses with ``TypeError``: arguments no signature
    accepts (or several equally well), a configuration that is no sequence."""


@contextlib.contextmanager
def raised_as_numba():
    """A compile that a launch needs and that fails raises what numba raises
    at such a launch (its TypingError...), chained from the CompileError."""
    try:
        yield
    except CompileError as exc:
        shown = as_numba_raises(exc)
        if shown is exc:
            raise
        raise shown from exc


class CachedKernel(_Kernel):
    """One compiled variant, as numba's dispatcher holds it (``overloads[sig]``,
    numba's ``_Kernel``): built from a `CompileResult` instead of compiled by
    numba.  It answers the result's attributes too (``.ptx``, ``.cubin``,
    ``.resources``, ``.stages``...), and its resource figures come from the
    compile where no GPU has loaded it."""

    def __init__(self, owner: VariantOwner, result: CompileResult):  # numba's compiling __init__ is not called
        from numba.cuda import types as nbtypes
        from numba.cuda import typing as nbtyping

        # the fields numba's own cache-loading path (_Kernel._rebuild) sets
        self.entry_point = None
        self.objectmode = False
        self.cooperative = result.cooperative
        self.entry_name = result.entry_name
        self.signature = nbtyping.signature(nbtypes.void, *result.signature)
        self._type_annotation = None
        self._codelibrary = CachedCodeLibrary(owner, result)
        self.debug = result.config.debug
        self.lineinfo = result.config.lineinfo
        self.call_helper = result.call_helper
        self.extensions = list(owner.options.get("extensions") or ())
        carveout = owner.options.get("shared_memory_carveout")
        self.shared_memory_carveout = None if carveout is None else self._parse_carveout(carveout)
        self.launch_config_sensitive = False
        self.result = result

    @property
    def audit_mismatched(self) -> bool:
        """Whether an audit found the cached artifacts wrong (the result then holds fresh ones)."""
        audit = self.result.audit
        return audit is not None and audit.mismatched

    def _figure(self, attribute: str, name: str) -> int:
        """The driver's figure once a GPU has loaded the kernel, else the compile's."""
        if self._codelibrary.loaded:
            return getattr(self._codelibrary.get_cufunc().attrs, attribute)
        return self.result.resources[name]

    regs_per_thread = property(lambda self: self._figure("regs", "registers"),
                               doc="Registers per thread (nvJitLink's report, or the driver's).")
    shared_mem_per_block = property(lambda self: self._figure("shared", "shared_bytes"),
                                    doc="Static shared memory per block, in bytes.")
    local_mem_per_thread = property(lambda self: self._figure("local", "local_bytes"),
                                    doc="Local memory per thread, in bytes.")
    const_mem_size = property(lambda self: self._figure("const", "user_constant_bytes"),
                              doc="User constant memory in bytes (kernel parameters not counted).")

    @property
    def max_threads_per_block(self) -> int:
        """The most threads a block can have: the driver decides when it loads the kernel."""
        if not self._codelibrary.loaded:
            raise LaunchError(
                f"{short_name(self.result.kernel)}.get_max_threads_per_block() needs a GPU (the driver "
                "computes it when the kernel is loaded); registers and memory use are in .resources")
        return self._codelibrary.get_cufunc().attrs.maxthreads

    def max_cooperative_grid_blocks(self, blockdim, dynsmemsize=0) -> int:
        """The most blocks a cooperative (grid-synchronised) launch can have:
        the driver's figure on a GPU (numba's own query); 1 on the simulator,
        as numba's simulator says (it cannot synchronise blocks)."""
        if self._codelibrary._owner.on_simulator():
            return 1
        return super().max_cooperative_grid_blocks(blockdim, dynsmemsize)

    def inspect_llvm(self) -> str:
        return self.result.llvm_ir

    def inspect_asm(self, cc=None) -> str:
        return self.result.ptx

    def __repr__(self):
        return f"<compiled {short_name(self.result.kernel)}{self.result.signature_text}>"


# The CompileResult's attributes a variant answers too (a FatbinResult's where
# it is one).  Properties, not __getattr__: a class with __getattr__ makes
# every attribute read slower, and numba reads many at every launch.
_RESULT_ATTRIBUTES = (
    "ptx", "cubin", "cubins", "llvm_ir", "ltoir", "link_log", "links", "resources", "resources_by_arch",
    "stages", "layers", "hit", "every_stage", "config", "kernel", "signature_text", "explain", "artifacts",
    "audit", "referenced", "generic_tokens", "seconds", "saved_seconds",
    "fatbin", "fatbin_stage", "members", "per_target", "ptx_note", "targets")


def _forwarded(name: str) -> property:
    return property(lambda self: getattr(self.result, name), doc=f"The CompileResult's {name}.")


for _name in _RESULT_ATTRIBUTES:
    setattr(CachedKernel, _name, _forwarded(_name))


class CachedCodeLibrary(CUDACodeLibrary):
    """numba's code library for one cached variant: the image numba loads on a
    device is the one `Kernel.image_for` chooses for that device's
    architecture, made once per architecture (numba loads it once per device)."""

    def __init__(self, owner: VariantOwner, result: CompileResult):
        from numba.cuda.descriptor import cuda_target

        super().__init__(cuda_target.target_context.codegen(), result.kernel, entry_name=result.entry_name,
                         max_registers=result.config.max_registers)
        self._owner = owner
        self._result = result
        self.use_cooperative = result.cooperative
        self._finalized = True

    @property
    def loaded(self) -> bool:
        """Whether a GPU has loaded this variant."""
        return bool(self._cufunc_cache)

    def get_cubin(self, cc=None):
        cc = self._ensure_cc(cc)
        image = self._cubin_cache.get(cc)
        if image is None:
            image = self._cubin_cache[cc] = self._owner.image_for(self._result, tuple(cc[:2]))
        return image

    def get_llvm_str(self):
        return self._result.llvm_ir

    def get_asm_str(self, cc=None):
        return self._result.ptx


def runs_on(member_kind: str, arch: int, cc: Tuple[int, int]) -> bool:
    """Whether a cubin for sm_XY (or PTX for compute_XY) runs on a GPU of
    `cc`: a cubin on sm_XZ with Z >= Y, PTX on any GPU of cc >= XY."""
    compiled = divmod(arch, 10)
    if member_kind == "cubin":
        return compiled[0] == cc[0] and compiled[1] <= cc[1]
    return compiled <= cc


def choose_image(result: CompileResult, cc: Tuple[int, int]):
    """What to load on a GPU of `cc`, as a cuda.core ``ObjectCode``: a
    multi-target kernel's fatbin (the driver picks the cubin, or compiles the
    PTX) where something in it runs there; else the cubin if it runs there,
    else PTX for the driver to compile, where the PTX is complete alone."""
    from cuda.core import ObjectCode

    if isinstance(result, FatbinResult):
        if any(runs_on(member.kind, member.arch, cc) for member in result.members):
            return ObjectCode.from_fatbin(result.fatbin)
        raise LaunchError(
            f"{short_name(result.kernel)} was built for {result.targets.summary()}, none of which "
            f"this GPU (sm_{cc[0]}{cc[1]}) can run; add {cc[0]}{cc[1]} to --sm (or to the targets)")
    return ObjectCode.from_cubin(result.cubin) if runs_on("cubin", result.config.sm, cc) \
        else _ptx_image(result, cc)


def _ptx_image(result: CompileResult, cc: Tuple[int, int]):
    from cuda.core import ObjectCode

    from ....toolchain.fatbin import ptx_problem

    name = short_name(result.kernel)
    compiled = result.config.cc
    fix = f"use --sm {cc[0]}{cc[1]} (or CompileConfig(sm={cc[0]}{cc[1]}))"
    if compiled > cc:
        raise LaunchError(f"{name} was compiled for sm_{compiled[0]}{compiled[1]}, which this GPU "
                          f"(sm_{cc[0]}{cc[1]}) cannot run; {fix}")
    problem = ptx_problem(result._ptx, result._cubin.links)
    if problem:
        raise LaunchError(f"{name} was compiled for sm_{compiled[0]}{compiled[1]}, and this GPU "
                          f"(sm_{cc[0]}{cc[1]}) would need its PTX compiled by the driver, which cannot "
                          f"be done: {problem}; {fix}")
    return ObjectCode.from_ptx(result.ptx.encode())  # bytes: cuda.core reads a str as a file name


__all__ = ["LaunchError", "CachedKernel", "CachedCodeLibrary", "VariantOwner", "runs_on", "choose_image",
           "raised_as_numba"]
