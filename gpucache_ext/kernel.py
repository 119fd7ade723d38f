"""Launchable kernels: compiled through a `KernelCache`, launched on a GPU or
on numba's CUDA simulator.

A `Kernel` is launched like a numba kernel, ``k[blocks, threads](args)``
(also ``[blocks, threads, stream, shared_bytes]``).  Kernels with signatures
are compiled up front; others are compiled at their first launch for the
argument types, once per distinct signature.

On a GPU the cached cubin is loaded and launched through numba-cuda's own
launch path (cuda.core underneath), which marshals numpy arrays (copied in
and out), device arrays, objects with ``__cuda_array_interface__`` and
scalars.  When the compiled target cannot run on the present GPU, the PTX is
given to the driver to JIT if that is valid, else the launch fails with the
``--sm`` to use.  Without a GPU, or with ``simulate=True``, launches run on
numba's CUDA simulator; the artifacts are still compiled, cached and
inspectable.

Globals and device functions are re-checked at a kernel's first launch after
`refresh_all()` (the magic calls it after every cell), so an edit in another
cell recompiles what uses it; between refreshes launches cost no lookup.
"""

from __future__ import annotations

import functools
import math
import sys
import threading
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from .cache import CompileResult, KernelCache
from .results import FatbinResult
from .config import CompileConfig, Targets
from .errors import GpuCacheError, UnsupportedKernelError
from .results import short_signature
from .sources import declared_signatures, identify, python_function, rebind
from .stages import normalize_signature

_generation = 0


def refresh_all() -> None:
    """Make every kernel re-check its inputs (globals, device functions) at its next launch."""
    global _generation
    _generation += 1


class LaunchError(GpuCacheError):
    """A kernel cannot be launched as asked (no matching signature, wrong target)."""


# numba-cuda's @cuda.jit options: those that map onto CompileConfig fields,
# those that do not change the kernel's code here, those used at launch, and
# the code the cubin links.
_CONFIG_OPTIONS = ("fastmath", "debug", "lineinfo", "max_registers", "launch_bounds", "lto")
_INERT_OPTIONS = ("device", "inline", "forceinline", "cache")  # cache: this cache replaces numba's
# used when the kernel is loaded and launched, never part of its code
_LAUNCH_OPTIONS = ("shared_memory_carveout", "extensions")
# code the cubin links (KernelCache.compile's link=)
_LINK_OPTIONS = ("link",)
_JIT_OPTIONS = _CONFIG_OPTIONS + _INERT_OPTIONS + _LAUNCH_OPTIONS + _LINK_OPTIONS + ("opt", "boundscheck")


def check_options(options: Dict[str, Any], what: str = "@cuda.jit") -> None:
    """Refuse what numba-cuda's jit refuses (boundscheck, deprecated and
    unknown options, bad carveouts), before anything compiles."""
    if options.get("boundscheck"):
        raise UnsupportedKernelError(
            f"{what}(boundscheck=True): bounds checking is not supported for CUDA "
            "(numba-cuda refuses it too); remove the option"
        )
    for name in ("argtypes", "restype", "bind"):
        if options.get(name) is not None:
            raise UnsupportedKernelError(
                f"{what}({name}=...) is no longer supported by numba-cuda; give the "
                "signature as the first argument, e.g. @cuda.jit('void(float32[:])')"
            )
    unknown = sorted(set(options) - set(_JIT_OPTIONS) - {"argtypes", "restype", "bind"})
    if unknown:
        raise UnsupportedKernelError(
            f"{what}: unknown option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
            f"numba-cuda's jit accepts {', '.join(sorted(_JIT_OPTIONS))}"
        )
    carveout = options.get("shared_memory_carveout")
    if carveout is not None:
        from numba.cuda.decorators import _validate_shared_memory_carveout

        try:  # numba's own check, with its message
            _validate_shared_memory_carveout(carveout)
        except ValueError as exc:
            raise UnsupportedKernelError(f"{what}(shared_memory_carveout=...): {exc}") from None


def explicit_options(targetoptions: Dict[str, Any]) -> Dict[str, Any]:
    """The options of a numba dispatcher that would change or refuse a kernel,
    where they differ from numba's defaults (numba fills in debug=0, opt=True
    and the like)."""
    options = {}
    for name in set(_JIT_OPTIONS) - set(_INERT_OPTIONS):
        value = targetoptions.get(name)
        if (value is not True and value is not None) if name == "opt" else value:
            options[name] = value
    if options.get("lto") and not targetoptions.get("debug") and _numba_lto_default():
        # numba turns LTO on by itself wherever nvJitLink is new enough
        del options["lto"]
    return options


@functools.lru_cache(maxsize=1)
def _numba_lto_default() -> bool:
    try:
        from numba.cuda.decorators import _have_nvjitlink
    except ImportError:  # older numba-cuda: LTO only when asked for
        return False
    return bool(_have_nvjitlink())


def config_with_options(config: CompileConfig, options: Dict[str, Any]) -> CompileConfig:
    """`config` overridden by a ``@cuda.jit(...)`` decorator's options."""
    check_options(options)
    changes = {}
    for name in _CONFIG_OPTIONS:
        value = options.get(name)
        if value is not None:
            # numba takes any truth value for its switches (debug=1)
            changes[name] = bool(value) if name in ("fastmath", "debug", "lineinfo", "lto") else value
    opt = options.get("opt")
    if opt is not None:
        changes["opt"] = (config.opt or 3) if opt is True else 0 if opt is False else opt
    return config.replace(**changes) if changes else config


def _typeof_argument(value):
    from numba.cuda.typing.typeof import Purpose, typeof

    try:
        ty = typeof(value, Purpose.argument)
    except Exception as exc:
        raise LaunchError(f"cannot pass a {type(value).__name__} to a kernel: {exc}") from None
    if ty is None:
        raise LaunchError(f"cannot pass a {type(value).__name__} to a kernel")
    return ty


def select_signature(declared: Sequence[Tuple], actual: Tuple) -> Optional[Tuple]:
    """The declared signature a launch with argument types `actual` uses, as
    numba-cuda's dispatcher picks it: numba's type manager rates each
    candidate's conversions (an exact match first, then fewest unsafe, safe
    and promoting conversions; unsafe ones are allowed, as for any dispatcher
    with declared signatures) and a tie is ambiguous.  None when no signature
    accepts the arguments; `LaunchError` when the choice is ambiguous.
    """
    from numba.cuda.descriptor import cuda_target
    from numba.cuda.typeconv.rules import default_type_manager

    candidates = [d for d in declared if len(d) == len(actual)]
    if not candidates:
        return None
    for attempt in range(2):
        try:
            index = default_type_manager.select_overload(actual, candidates, True, False)
            return candidates[index]
        except TypeError as exc:
            if "mbiguous" in str(exc):
                shown = "; ".join(short_signature(d) for d in candidates)
                raise LaunchError(
                    f"arguments {short_signature(actual)} match several signatures equally "
                    f"well: {shown}; pass arguments of the exact types of one of them"
                ) from None
            if attempt:
                return None
        # As numba's dispatcher: register the conversions these types allow
        # (array layouts, literals) and try once more.
        context = cuda_target.typing_context
        if not any([context.install_possible_conversions(actual, d) for d in candidates]):
            return None
    return None


class Kernel:
    """A kernel compiled through a `KernelCache` and launched like numba's."""

    def __init__(self, func, signatures: Sequence = (), config: Optional[CompileConfig] = None,
                 cache: Optional[KernelCache] = None, options: Optional[Dict[str, Any]] = None,
                 simulate: bool = False, on_compile: Optional[Callable[[CompileResult], None]] = None,
                 force: bool = False, audit: Optional[bool] = None, targets=None):
        self.py_func = python_function(func)
        functools.update_wrapper(self, self.py_func)
        self.options = dict(options or {})
        self.config = config_with_options(config or CompileConfig(), self.options)
        # several targets (a `Targets`, or what it takes: "80,86,90"): each
        # signature compiles to a fatbin (`KernelCache.compile_fatbin`), and
        # the config's sm is the lowest target
        self.targets = targets if targets is None or isinstance(targets, Targets) else Targets(targets)
        if self.targets is not None:
            self.config = self.config.replace(sm=self.targets.sms[0])
        self.cache = cache if cache is not None else _default_cache()
        self.simulate = simulate
        self.on_compile = on_compile
        self.force = force  # recompile every stage at each signature's first compile
        self.audit = audit  # True: audit each compile's hits at once (see KernelCache.compile)
        self.declared = tuple(normalize_signature(sig) for sig in signatures)
        self.results: Dict[Tuple, CompileResult] = {}
        self._checked: Dict[Tuple, int] = {}
        self._loaded: Dict[Tuple, Any] = {}
        self._simulated = None
        self._lock = threading.RLock()

    # -- compiling -------------------------------------------------------------
    def compile(self, sig, force: bool = False) -> CompileResult:
        """Compile (or find in the cache) this kernel for one signature."""
        argtypes = normalize_signature(sig)
        return self._compile(argtypes, force)

    def compile_declared(self, force: bool = False):
        """Compile every signature given to the decorator (or with ``--sig``),
        except those already compiled since the last `refresh_all`."""
        results = []
        for argtypes in self.declared:
            with self._lock:
                current = self._checked.get(argtypes) == _generation and not force
            results.append(self.results[argtypes] if current else self._compile(argtypes, force))
        return results

    def _compile(self, argtypes, force=False) -> CompileResult:
        force = force or (self.force and argtypes not in self.results)
        if self.targets is not None:
            result = self.cache.compile_fatbin(self.py_func, argtypes, self.config, sms=self.targets, force=force,
                                               audit=self.audit, link=self.options.get("link") or ())
        else:
            result = self.cache.compile(self.py_func, argtypes, self.config, force=force, audit=self.audit,
                                        link=self.options.get("link") or ())
        with self._lock:
            self.results[argtypes] = result
            self._checked[argtypes] = _generation
        if self.on_compile is not None:
            self.on_compile(result)
        return result

    def result_for(self, *args) -> CompileResult:
        """The compiled variant a launch with these arguments runs (compiled now if
        needed): with declared signatures, the one numba-cuda's dispatcher would
        pick (see `select_signature`); without, the arguments' own types."""
        actual = tuple(_typeof_argument(a) for a in args)
        argtypes = actual
        if self.declared:
            try:
                argtypes = select_signature(self.declared, actual)
            except LaunchError as exc:
                raise LaunchError(f"{self.__name__}: {exc}") from None
            if argtypes is None:
                raise LaunchError(
                    f"{self.__name__}: no signature accepts {short_signature(actual)}; declared: "
                    + "; ".join(short_signature(d) for d in self.declared)
                )
        with self._lock:
            result = self.results.get(argtypes)
            if result is not None and self._checked.get(argtypes) == _generation:
                return result
        # first launch since a cell ran: what it was built from may have changed
        if result is not None and self.cache.still_current(self.py_func, argtypes, self.config, result,
                                                           link=self.options.get("link") or ()):
            with self._lock:
                self._checked[argtypes] = _generation
            return result
        return self._compile(argtypes)

    # -- launching -------------------------------------------------------------
    def __getitem__(self, launch):
        if not isinstance(launch, tuple) or not 2 <= len(launch) <= 4:
            raise LaunchError(
                f"launch {self.__name__} as kernel[blocks, threads] or "
                "kernel[blocks, threads, stream, shared_bytes]"
            )
        return functools.partial(self.launch, griddim=launch[0], blockdim=launch[1],
                                 stream=launch[2] if len(launch) > 2 else 0,
                                 sharedmem=launch[3] if len(launch) > 3 else 0)

    def __call__(self, *args, **kwargs):
        raise LaunchError(f"launch {self.__name__} with a configuration: {self.__name__}[blocks, threads](...)")

    def configure(self, griddim, blockdim, stream=0, sharedmem=0):
        """The kernel configured for a launch, as numba's ``configure``:
        the same as ``kernel[griddim, blockdim, stream, sharedmem]``."""
        return self[griddim, blockdim, stream, sharedmem]

    def forall(self, ntasks, tpb=0, stream=0, sharedmem=0):
        """A launcher over `ntasks` tasks, as numba's ``forall`` (the kernel maps
        ``cuda.grid(1)`` to tasks and ignores ids past `ntasks`).

        Blocks of `tpb` threads, or on a GPU the size the driver suggests for
        the compiled kernel; on the simulator `ntasks` blocks of one thread, as
        numba's simulator does.
        """
        if ntasks < 0:
            raise ValueError(f"Can't create ForAll with negative task count: {ntasks}")

        def launch_all(*args):
            if ntasks == 0:
                return None
            if self.simulate or not gpu_available():
                if self.result_for(*args).cooperative:  # grid sync: one block, where the simulator can
                    return self.launch(*args, griddim=1, blockdim=ntasks, stream=stream, sharedmem=sharedmem)
                return self.launch(*args, griddim=ntasks, blockdim=1, stream=stream, sharedmem=sharedmem)
            block = tpb or self._suggested_block_size(self.result_for(*args), sharedmem)
            return self.launch(*args, griddim=(ntasks + block - 1) // block, blockdim=block,
                               stream=stream, sharedmem=sharedmem)

        return launch_all

    def _suggested_block_size(self, result: CompileResult, sharedmem) -> int:
        from numba.cuda.cudadrv.devices import get_context

        loaded = self._gpu_kernel(result)
        _, block = get_context().get_max_potential_block_size(
            func=loaded._codelibrary.get_cufunc(), b2d_func=0, memsize=sharedmem, blocksizelimit=1024)
        return block

    def launch(self, *args, griddim, blockdim, stream=0, sharedmem=0):
        """Compile for the arguments' types if needed, then run the kernel."""
        from numba.cuda import types as nbtypes
        from numba.cuda.errors import normalize_kernel_dimensions

        simulated = self.simulate or not gpu_available()
        if simulated and any(isinstance(t, nbtypes.CPointer) for sig in self.declared for t in sig):
            raise LaunchError(
                f"{self.__name__} takes raw pointers, which need a GPU: the simulator runs "
                "Python and cannot follow a device pointer")
        result = self.result_for(*args)
        if simulated:
            _notice_simulator(self.simulate)
            if result.cooperative and math.prod(normalize_kernel_dimensions(griddim, blockdim)[0]) > 1:
                raise LaunchError(
                    f"{self.__name__} synchronises its grid (cuda.cg.this_grid), which numba's "
                    f"simulator can do within one block only; launch it as [1, threads] (or with "
                    f".forall(n)) to simulate it, or run it on a GPU")
            self._simulator()[griddim, blockdim, stream, sharedmem](*self._as_launched(result, args))
            return
        from numba.cuda.cudadrv import driver

        griddim, blockdim = normalize_kernel_dimensions(griddim, blockdim)
        loaded = self._gpu_kernel(result)
        loaded.launch(args, griddim, blockdim, driver._to_core_stream(stream), sharedmem)

    def _as_launched(self, result: CompileResult, args) -> tuple:
        """The arguments as a GPU launch of `result` gets them (a float32
        parameter gets a rounded float), for the simulator, which would
        otherwise compute with the Python values themselves."""
        from .simulator import launch_arguments

        try:
            return launch_arguments(result.signature, args)
        except (TypeError, OverflowError, ValueError) as exc:
            raise LaunchError(f"{self.__name__}: {exc}") from None

    def _gpu_kernel(self, result: CompileResult):
        # (an audit mismatch swaps the result's cubin for a fresh one: load that)
        key = (result.signature, result.stages["fatbin" if "fatbin" in result.stages else "cubin"].token,
               id(result.cubin))
        with self._lock:
            loaded = self._loaded.get(key)
            if loaded is None:
                loaded = self._loaded[key] = load_on_gpu(result, self.options.get("shared_memory_carveout"),
                                                         self.options.get("extensions") or ())
            return loaded

    def _simulator(self):
        with self._lock:
            if self._simulated is None or self._simulated[0] != _generation:
                self._simulated = (_generation, simulated_kernel(self.py_func, self.config,
                                                                 self.options.get("extensions") or ()))
            return self._simulated[1]

    # -- numba's dispatcher API -------------------------------------------------
    def specialize(self, *args) -> "Kernel":
        """A kernel compiled for exactly these arguments' types, as numba's
        ``specialize`` (it never compiles for other types)."""
        if self.specialized:
            raise RuntimeError("Dispatcher already specialized")
        argtypes = tuple(_typeof_argument(a) for a in args)
        kernel = Kernel(self.py_func, [argtypes], self.config, self.cache, self.options,
                        simulate=self.simulate, on_compile=self.on_compile, audit=self.audit,
                        targets=self.targets)
        kernel._specialized = True
        kernel.compile_declared()
        return kernel

    _specialized = False

    @property
    def specialized(self) -> bool:
        """True for a kernel made by `specialize`."""
        return self._specialized

    @property
    def overloads(self) -> Dict[Tuple, "Overload"]:
        """Argument types -> the compiled variant (its `CompileResult`'s attributes,
        and numba's per-variant API), for every declared or compiled signature."""
        self.compile_declared()
        return {argtypes: Overload(self, result) for argtypes, result in self.results.items()}

    definitions = overloads

    @property
    def signatures(self):
        return list(self.results)

    def _per_signature(self, signature, value: Callable[[CompileResult], Any]):
        """numba's convention: one value for a given signature (or a specialized
        kernel), else {argument types: value} for every compiled signature."""
        if signature is not None:
            return value(self._result_of(signature))
        if self.specialized:
            return value(self.last)
        return {argtypes: value(result) for argtypes, result in self.results.items()}

    def _result_of(self, signature) -> CompileResult:
        args = getattr(signature, "args", None)
        if args is None:
            args = signature if isinstance(signature, tuple) else normalize_signature(signature)
        args = tuple(args)
        result = self.results.get(args)
        if result is None:
            result = self.compile(args) if not self.declared or args in self.declared else None
        if result is None:
            raise LaunchError(f"{self.__name__} has no signature {short_signature(args)}; "
                              f"compiled: {', '.join(map(short_signature, self.results)) or 'none'}")
        return result

    def inspect_llvm(self, signature=None):
        """The NVVM IR, as numba's ``inspect_llvm`` (per signature)."""
        return self._per_signature(signature, lambda r: r.llvm_ir)

    def inspect_asm(self, signature=None):
        """The PTX, as numba's ``inspect_asm`` (for this kernel's target, not the GPU's)."""
        return self._per_signature(signature, lambda r: r.ptx)

    def inspect_lto_ptx(self, signature=None):
        """The PTX after link-time optimisation (the kernel must be compiled with lto)."""
        def lto_ptx(result):
            if not result.config.lto:
                raise LaunchError(f"{self.__name__} was not compiled with lto (--lto or lto=True)")
            return result.ptx
        return self._per_signature(signature, lto_ptx)

    def inspect_sass(self, signature=None):
        """The SASS, from nvdisasm, as numba's ``inspect_sass``: per signature,
        the text (`gpucache_ext.sass.disassemble`; `SassUnavailable` says why not)."""
        from .sass import disassemble

        return self._per_signature(signature, lambda r: disassemble(r.cubin))

    def inspect_sass_by_arch(self, signature=None):
        """The SASS of every cubin target, ``{86: text, ...}`` (one entry for a
        single-target kernel), per signature as `inspect_sass`.  A target
        nvdisasm cannot read (sm_72 and older for the wheel's nvdisasm 13)
        gives the `SassUnavailable` message, which names what would work, in
        place of its text."""
        from .sass import SassUnavailable, disassemble

        def by_arch(result):
            found = {}
            for sm, cubin in result.cubins.items():
                try:
                    found[sm] = disassemble(cubin)
                except SassUnavailable as exc:
                    found[sm] = f"(no SASS: {exc})"
            return found
        return self._per_signature(signature, by_arch)

    def get_regs_per_thread(self, signature=None):
        """Registers per thread (from nvJitLink's report, or the driver on a GPU)."""
        return self._per_signature(signature, lambda r: self._resource(r, "regs", "registers"))

    def get_shared_mem_per_block(self, signature=None):
        """Static shared memory per block, in bytes."""
        return self._per_signature(signature, lambda r: self._resource(r, "shared", "shared_bytes"))

    def get_local_mem_per_thread(self, signature=None):
        """Local memory per thread, in bytes."""
        return self._per_signature(signature, lambda r: self._resource(r, "local", "local_bytes"))

    def get_const_mem_size(self, signature=None):
        """User constant memory, in bytes (kernel parameters not counted, as the driver's figure)."""
        return self._per_signature(signature, lambda r: self._resource(r, "const", "user_constant_bytes"))

    def get_max_threads_per_block(self, signature=None):
        """The most threads a block of this kernel can have: the driver decides
        it when the kernel is loaded, so it needs a GPU."""
        def max_threads(result):
            if self.simulate or not gpu_available():
                raise LaunchError(
                    f"{self.__name__}.get_max_threads_per_block() needs a GPU (the driver computes "
                    "it when the kernel is loaded); registers and memory use are in .resources")
            return self._gpu_kernel(result).max_threads_per_block
        return self._per_signature(signature, max_threads)

    def _resource(self, result: CompileResult, attribute: str, name: str) -> int:
        if not self.simulate and gpu_available():
            return getattr(self._gpu_kernel(result)._codelibrary.get_cufunc().attrs, attribute)
        return result.resources[name]

    def __getattr__(self, name):
        if name in _NUMBA_ONLY:
            raise AttributeError(
                f"gpucache_ext.Kernel does not offer numba's {name}: {_NUMBA_ONLY[name]}")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # -- inspecting --------------------------------------------------------------
    @property
    def last(self) -> CompileResult:
        """The most recently compiled signature's result."""
        if not self.results:
            raise LaunchError(
                f"{self.__name__} has not been compiled yet: launch it, or give it a signature "
                "(@cuda.jit('void(float32[:])') or %%gpukernel --sig ...)"
            )
        return next(reversed(self.results.values()))

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
            raise LaunchError(
                f"{self.__name__} was compiled for one target ({self.config.summary().split()[0]}), and "
                "has a cubin but no fatbin; list several targets (--sm 80,86,90, or Kernel(targets=...)) "
                "to build one")
        return last.fatbin

    def inspect(self) -> str:
        """Config, per-stage tokens and hits, resources and PTX size, per signature."""
        lines = [f"{self.__name__}: {self.summary()}"]
        for result in self.results.values():
            lines.append(result.explain())
            for sm, res in result.resources_by_arch.items():
                lines.append(
                    f"  resources sm_{sm}: {res['registers']} registers, {res['shared_bytes']} B shared, "
                    f"{res['local_bytes']} B local, {res['constant_bytes']} B constant, "
                    f"spills {res['spill_stores']}/{res['spill_loads']} B, cubin {res['cubin_bytes']} B"
                )
            lines.append(f"  ptx: {len(result.ptx.splitlines())} lines"
                         + (f", fatbin: {len(result.fatbin)} bytes" if isinstance(result, FatbinResult) else ""))
        if not self.results:
            lines.append("  (not compiled yet)")
        return "\n".join(lines)

    def summary(self) -> str:
        """The config's summary, with the targets in place of sm for a multi-target kernel."""
        return self.config.summary() if self.targets is None else self.targets.describe(self.config)

    def __repr__(self):
        sigs = ", ".join(map(short_signature, self.results)) or "not compiled"
        return f"<gpucache_ext.Kernel {self.__name__} [{self.summary()}] {sigs}>"


class Overload:
    """One compiled variant of a Kernel, as numba's ``kernel.overloads[sig]``:
    the `CompileResult`'s attributes, plus numba's per-variant queries."""

    def __init__(self, kernel: "Kernel", result: CompileResult):
        self._kernel = kernel
        self.result = result

    def __getattr__(self, name):
        return getattr(self.result, name)

    def __eq__(self, other):
        return isinstance(other, Overload) and other.result is self.result

    __hash__ = None

    def _on_gpu(self):
        return not self._kernel.simulate and gpu_available()

    def max_cooperative_grid_blocks(self, blockdim) -> int:
        """The most blocks a cooperative (grid-synchronised) launch can have: the
        driver's figure on a GPU; 1 on the simulator, as numba's simulator says
        (it cannot synchronise blocks)."""
        if not self._on_gpu():
            return 1
        return self._kernel._gpu_kernel(self.result).max_cooperative_grid_blocks(blockdim)

    @property
    def regs_per_thread(self) -> int:
        return self._kernel.get_regs_per_thread(self.result.signature)

    @property
    def shared_mem_per_block(self) -> int:
        return self._kernel.get_shared_mem_per_block(self.result.signature)

    @property
    def local_mem_per_thread(self) -> int:
        return self._kernel.get_local_mem_per_thread(self.result.signature)

    @property
    def const_mem_size(self) -> int:
        return self._kernel.get_const_mem_size(self.result.signature)

    def inspect_asm(self) -> str:
        return self.result.ptx

    def inspect_llvm(self) -> str:
        return self.result.llvm_ir

    def __repr__(self):
        return f"<compiled {self._kernel.__name__}{self.result.signature_text}>"


# Parts of numba's dispatcher API a Kernel leaves out, and what to use instead.
_NUMBA_ONLY = {
    "inspect_types": "typed IR is cached per stage; use .inspect() or %gpucache explain NAME",
    "inspect_sass_cfg": "use .inspect_sass()",
    "get_metadata": "use .last (the CompileResult) and .inspect()",
    "stats": "use the cache's statistics: kernel.cache.stats() or %gpucache stats",
    "enable_caching": "every kernel is cached by gpucache_ext already",
    "recompile": "use .compile(sig, force=True), or %%gpukernel --force",
    "get_compile_result": "use .compile(sig), which returns the CompileResult",
    "extensions": "argument extensions are not supported",
    "mark_launch_config_sensitive": "kernels that read the launch configuration are not supported",
}


def _default_cache():
    from . import default_cache

    return default_cache()


# ---------------------------------------------------------------------------
# GPU


@functools.lru_cache(maxsize=1)
def gpu_available() -> bool:
    """True when a CUDA driver and at least one GPU are present."""
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:
        return False


def device_cc() -> Tuple[int, int]:
    from numba import cuda

    return tuple(cuda.get_current_device().compute_capability)


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
    else PTX for the driver to compile."""
    from cuda.core import ObjectCode

    if isinstance(result, FatbinResult):
        if any(runs_on(member.kind, member.arch, cc) for member in result.members):
            return ObjectCode.from_fatbin(result.fatbin)
        raise LaunchError(
            f"{result.kernel.rsplit('.', 1)[-1]} was built for {result.targets.summary()}, none of which "
            f"this GPU (sm_{cc[0]}{cc[1]}) can run; add {cc[0]}{cc[1]} to --sm (or to the targets)")
    return ObjectCode.from_cubin(result.cubin) if runs_on("cubin", result.config.sm, cc) \
        else _ptx_image(result, cc)


def _ptx_image(result: CompileResult, cc: Tuple[int, int]):
    from cuda.core import ObjectCode

    compiled = result.config.cc
    if compiled <= cc:
        return ObjectCode.from_ptx(result.ptx)
    raise LaunchError(
        f"{result.kernel.rsplit('.', 1)[-1]} was compiled for sm_{compiled[0]}{compiled[1]}, "
        f"which this GPU (sm_{cc[0]}{cc[1]}) cannot run; use --sm {cc[0]}{cc[1]} "
        f"(or CompileConfig(sm={cc[0]}{cc[1]}))"
    )


def load_on_gpu(result: CompileResult, shared_memory_carveout=None, extensions=()):
    """A numba launchable for the cached artifact, loaded through cuda.core
    (`shared_memory_carveout`, `extensions`: as numba's jit options, used when
    it binds and launches)."""
    from numba.cuda import types as nbtypes
    from numba.cuda import typing as nbtyping
    from numba.cuda.codegen import CUDACodeLibrary
    from numba.cuda.descriptor import cuda_target
    from numba.cuda.dispatcher import _Kernel

    cc = device_cc()
    image = choose_image(result, cc)
    # numba-cuda's own cache-loading path: a code library holding the binary
    # under the device's cc, and a kernel around it.
    device_key = (cc[0], cc[1], "a" if cc >= (9, 0) else "")
    library = CUDACodeLibrary._rebuild(
        cuda_target.target_context.codegen(), result.kernel, result.entry_name,
        llvm_strs=None, ptx_cache={}, cubin_cache={device_key: image}, linkerinfo_cache={},
        max_registers=result.config.max_registers, nvvm_options={}, needs_cudadevrt=False,
        nrt=False, use_cooperative=result.cooperative, lto=False,
    )
    if result.config.debug and result.call_helper is None:
        raise LaunchError(f"{result.kernel}: a debug launch needs the kernel's exception table; "
                          "recompile it in this process (force=True)")
    return _Kernel._rebuild(
        cooperative=result.cooperative, name=result.entry_name,
        signature=nbtyping.signature(nbtypes.void, *result.signature),
        codelibrary=library, debug=result.config.debug, lineinfo=result.config.lineinfo,
        call_helper=result.call_helper, extensions=list(extensions),
        shared_memory_carveout=None if shared_memory_carveout is None
        else _Kernel._parse_carveout(None, shared_memory_carveout),
    )


# ---------------------------------------------------------------------------
# Simulator

# numba.cuda's memory and stream API, which needs a GPU; the simulator has its own.
_MEMORY_API = ("to_device", "device_array", "device_array_like", "pinned_array",
               "pinned_array_like", "mapped_array", "managed_array", "pinned", "auto_device",
               "stream", "default_stream", "legacy_default_stream", "per_thread_default_stream",
               "external_stream", "event", "synchronize",
               "reduce", "Reduce")  # cuda.reduce launches numba's own kernels
_saved_memory_api: Dict[str, Any] = {}


@functools.lru_cache(maxsize=1)
def _simulated_array_class():
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    from .sources import host_array_interface

    class SimulatedDeviceArray(FakeCUDAArray):
        """The simulator's device array, with the CUDA Array Interface a real
        one has (its data pointer is the host buffer's)."""

        @property
        def __cuda_array_interface__(self):
            return host_array_interface(self._ary)

    return SimulatedDeviceArray


def _with_interface(factory):
    """`factory`, its simulator arrays given the CUDA Array Interface."""
    if not callable(factory) or isinstance(factory, type):
        return factory
    simulated = _simulated_array_class()

    @functools.wraps(factory)
    def make(*args, **kwargs):
        made = factory(*args, **kwargs)
        if type(made).__name__ == "FakeCUDAArray":
            made.__class__ = simulated
        return made

    return make


def simulate_memory(enable: bool = True) -> None:
    """Give ``numba.cuda``'s memory and stream API (``to_device``,
    ``device_array``, ``stream``, ``synchronize``...) the simulator's objects,
    or numba's own back (`enable` False).  The magic does this when there is
    no GPU, so that cells written for a GPU run on the simulator as written:
    kernels launched there accept the simulator's arrays.
    """
    import numba.cuda
    from numba.cuda import simulator

    if enable and not _saved_memory_api:
        for name in _MEMORY_API:
            replacement = getattr(simulator, name, None) or getattr(simulator.devicearray, name, None)
            if replacement is not None and hasattr(numba.cuda, name):
                _saved_memory_api[name] = getattr(numba.cuda, name)
                setattr(numba.cuda, name, _with_interface(replacement))
    elif not enable:
        for name, original in _saved_memory_api.items():
            setattr(numba.cuda, name, original)
        _saved_memory_api.clear()


_notice_shown = False


def _notice_simulator(asked: bool) -> None:
    global _notice_shown
    if not _notice_shown and not asked:
        print("gpucache_ext: no GPU found, kernels run on numba's CUDA simulator "
              "(compiled artifacts are still cached and inspectable)", file=sys.stderr)
    _notice_shown = True


def simulated_kernel(pyfunc, config: CompileConfig, extensions=()):
    """numba's simulator kernel for `pyfunc`, its device functions replaced by
    simulator twins (those declared with signatures cast their arguments and
    result as compiled code does), and the math functions they read computing
    float32 arguments at numba's widths (simulator.narrow_math).  Like compiled
    code, it keeps the values its globals, closure variables and module
    attributes had when it was made (numba's simulator would read them anew at
    every launch)."""
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    from .simulator import DeclaredTwin, narrow_math

    def simulated(identity):
        return narrow_math(rebind(identity, twin))

    def twin(dispatcher, identity):
        refuse_externs(identity)
        declared = declared_signatures(dispatcher)
        if declared:  # compiled code casts to the declared types: so must the twin
            return DeclaredTwin(simulated(identity), declared, fastmath=config.fastmath)
        return FakeCUDAKernel(simulated(identity), device=True, fastmath=config.fastmath)

    def refuse_externs(identity):
        if identity.externs:
            raise UnsupportedKernelError(
                f"{identity.qualname} calls {', '.join(sorted(set(identity.externs)))}, declared with "
                "cuda.declare_device: external code cannot run on the simulator, it needs a GPU "
                "(the kernel compiles: its .ptx, .cubin and resources are there to inspect)"
            )

    identity = identify(pyfunc, with_location=False, freeze=True)
    refuse_externs(identity)
    return FakeCUDAKernel(simulated(identity), device=False, fastmath=config.fastmath,
                          debug=config.debug, extensions=extensions)


__all__ = ["Kernel", "LaunchError", "refresh_all", "gpu_available", "config_with_options", "check_options",
           "explicit_options",
           "simulate_memory",
           "select_signature"]
