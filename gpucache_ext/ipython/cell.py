"""Running a %%gpukernel cell: its code in the user's namespace, with
``numba.cuda.jit`` standing in (`CellJit`) so that its kernels become
`Kernel` objects with the cell's flags; a failing cell puts back the names it
had bound, and fails as a plain cell would (see `cell_errors`)."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple


from ..backends.numba_cuda import numba_compat
from ..defaults import default_cache
from ..pipeline.cache import CompileResult
from ..errors import CompileError, UnsupportedKernelError
from ..keys.config import CompileConfig
from ..backends.numba_cuda.launch.decorators import CACHED_LIBRARY_KERNELS, NUMBA_CORES, decorator_form, device_function
from ..sources.libraries import is_library_file, library_caller
from ..backends.numba_cuda.launch.device import cuda_simulator_on
from ..launch.batch import Pipelined
from ..launch.spec import KernelSpec
from ..backends.numba_cuda.options import explicit_options
from ..keys.tokens import short_name
from ..importing import installed, lazy_module, loaded_class
from .cell_errors import as_cell_error
from .cellcode import (compile_cell, followed_by_definitions, register_cell, running_cell_number,
                       transform_body)
from .report import CellReport, VariantsTable, launch_line

if TYPE_CHECKING:
    from ..backends.numba_cuda.launch.kernel import Kernel

# numba-cuda's kernels, imported where a cell makes one (an install of numba-cuda-mlir alone has none)
_kernels = lazy_module("gpucache_ext.backends.numba_cuda.launch.kernel")

# ---------------------------------------------------------------------------
# Running a cell


@dataclass(frozen=True)
class CellRequest:
    """What a %%gpukernel line asks of its cell: how its kernels are built
    (`spec`), the signatures given for kernels without one, and what the
    cell shows."""

    spec: KernelSpec
    signatures: Tuple[str, ...] = ()
    quiet: bool = False  # no report, and no line for compiles at later launches
    explain: bool = False  # every stage's token components in the report


class _CellContext:
    """What the kernels defined by one running %%gpukernel cell get: its
    request, and where their compile results go."""

    def __init__(self, request: CellRequest, collect, filename: str = "", followed=frozenset()):
        self.request = request
        self.config = request.spec.config
        self.collect = collect
        # the cell's kernels compiled one behind another, where a kernel's definition is followed at
        # once by another's (the first lines of those definitions: `followed`, in the cell `filename`)
        self.pipelined = Pipelined()
        self.filename, self.followed = filename, followed
        self.namespace: Dict[str, Any] = {}  # the user's, where the cell runs
        self.kernels: List[Kernel] = []
        self.devices: List[Any] = []  # the device functions the cell defined (numba dispatchers)
        self.numba_compiled: List[str] = []  # the library modules whose cuda.jit calls numba served
        self.library_kernels: List[Kernel] = []  # kernels of CACHED_LIBRARY_KERNELS made during the cell
        self.mlir_kernels: List[Any] = []  # numba-cuda-mlir kernels the cell made (MlirKernel)

    def make_mlir_kernel(self, source, declared=()):
        """The cell's kernel of numba-cuda-mlir's dispatcher `source`
        (`backends.numba_cuda_mlir.launch.MlirKernel`): the fields the cell's
        line set over the kernel's own options (its target where --sm was
        given, else the GPU's), compiled through the cache for the line's
        --sig signatures; with `declared` (its decorator's signatures), for
        those and, as numba-cuda-mlir's, no others."""
        from ..backends.numba_cuda_mlir.launch import MlirKernel

        spec = self.request.spec
        if spec.variants or spec.targets is not None:
            raise UnsupportedKernelError("numba-cuda-mlir kernels compile for one target and one config in a "
                                         "cell for now: leave out several --sm targets and lists of values")
        defaults = CompileConfig(sm=spec.config.sm)
        overrides = {name: value for name, value in spec.config.fields().items()
                     if name not in ("sm", "backend") and value != getattr(defaults, name)}
        if spec.pinned:
            overrides["sm"] = spec.config.sm
        kernel = MlirKernel(source, default_cache(), overrides=overrides, on_compile=self.collect)
        for sig in tuple(self.request.signatures) + tuple(declared):
            kernel.compile(sig)
        if declared:
            kernel.disable_compile()
            kernel._specialized = True
        self.mlir_kernels.append(kernel)
        return kernel

    def device_defaults(self) -> Dict[str, Any]:
        """The cell's flags that lower a device function, as decorator options."""
        config = self.config
        defaults = {name: True for name in ("fastmath", "debug", "lineinfo") if getattr(config, name)}
        if config.debug:
            defaults["opt"] = False  # numba warns about debug with opt
        return defaults

    def make_kernel(self, func, sigs, options, library=None) -> Kernel:
        """The cell's kernel of `func`; with `library` (a module of
        `CACHED_LIBRARY_KERNELS`), a library's kernel made during the cell:
        the cell's targets and numba's default flags, no sweep, not the cell's."""
        spec = self.request.spec
        if library is not None:
            spec = spec.replace(config=CompileConfig(sm=self.config.sm), variants=())
        signatures = (sigs or self.request.signatures) if library is None else sigs
        kernel = _kernels.Kernel(func, signatures, None, default_cache(), options, spec=spec,
                                 specialized=getattr(sigs, "single", False), on_compile=self.collect)
        if library is not None:
            self.library_kernels.append(kernel)
        else:
            self.kernels.append(kernel)
        if sigs:  # signatures in the decorator: compiled where it runs, as numba does
            # (its ptx and cubin beside the next kernel's typing where that kernel's definition follows)
            code = getattr(func, "__code__", None)
            # (the namespace as this decorator found it: what stays bound where the kernel fails later)
            self.pipelined.declared(kernel, wait=library is None and code is not None and (
                code.co_filename == self.filename and code.co_firstlineno in self.followed),
                mark=lambda: dict(self.namespace))
        else:
            self.pipelined.settle()
        return kernel


def _real_jit():
    """numba's own ``jit``."""
    from numba.cuda import decorators

    return decorators.jit


class CellJit:
    """Stands in for ``numba.cuda.jit``, however it is reached.

    While a %%gpukernel cell runs, ``numba.cuda.jit`` and every name in the
    user's namespace bound to numba's own ``jit`` are this object, and it
    makes `Kernel` objects with the running cell's flags.  A name that keeps
    it after the cell (``from numba.cuda import jit`` inside a cell) still
    gets each later cell's flags; outside a %%gpukernel cell it is numba's
    ``jit`` itself.
    """

    def __init__(self):
        self.active: Optional[_CellContext] = None

    def __call__(self, func_or_sig=None, device=False, **options):
        if self.active is None:
            return _real_jit()(func_or_sig, device=device, **options)
        if cuda_simulator_on():  # turned on inside the cell: from here on numba's simulator kernels, as numba
            self.active.pipelined.settle()
            return _real_jit()(func_or_sig, device=device, **options)
        library = library_caller(sys._getframe(1))
        if library is not None and library not in CACHED_LIBRARY_KERNELS:
            # a library's kernels: numba's meaning
            self.active.pipelined.settle()
            self.active.numba_compiled.append(library)
            return _real_jit()(func_or_sig, device=device, **options)
        if library in NUMBA_CORES and device:  # a CUDA ufunc's core: numba's, its kernel ours (see NUMBA_CORES)
            self.active.pipelined.settle()
            return _real_jit()(func_or_sig, device=device, **options)
        func, sigs = decorator_form(func_or_sig)
        if func is None:
            return lambda func: self._make(func, sigs, device, options, library)
        return self._make(func, sigs, device, options, library)

    def _make(self, func, sigs, device, options, library=None):
        if self.active is None:  # the decorator was made in a cell and applied after it
            return _real_jit()(sigs or None, device=device, **options)(func)
        if device:
            code = getattr(func, "__code__", None)
            if library is not None or code is None or code.co_firstlineno not in self.active.followed:
                self.active.pipelined.settle()  # (user code may run next: the kernels before it bound)
            # A lazy dispatcher: gpucache_ext types and lowers it per calling
            # kernel, for the kernel's target (a signature here would make numba
            # compile it now, for the current GPU).  As numba, it is lowered with
            # its own options: the cell's flags, overridden by its decorator's
            # (a library's: its own alone, as numba would lower them).
            # numba still checks the options; those it cannot have are refused.
            defaults = {} if library is not None else self.active.device_defaults()
            dispatcher = device_function(func, sigs, {**defaults, **options}, "@cuda.jit(device=True, ...)")
            if library is None:
                self.active.devices.append(dispatcher)
            return dispatcher
        return self.active.make_kernel(func, sigs, options, library=library)

    def __repr__(self):
        return "<gpucache_ext stand-in for numba.cuda.jit>"


JIT = CellJit()


class MlirCellJit:
    """Stands in for numba-cuda-mlir's ``cuda.jit`` while a %%gpukernel cell
    whose code names numba_cuda_mlir runs: its kernels become `MlirKernel`s
    with the cell's flags, a signature in the decorator compiled through the
    cache when decorated, as numba-cuda-mlir compiles it then (and so with no
    driver: numba-cuda-mlir's own asks one).  A library's calls, device
    functions, and any call outside a cell get numba-cuda-mlir's own."""

    def __init__(self):
        self.active: Optional[_CellContext] = None

    def __call__(self, func_or_sig=None, **options):
        from numba_cuda_mlir.decorators import mlir_jit
        from numba_cuda_mlir.numba_cuda.core import sigutils

        context = self.active
        if context is None or options.get("device") or library_caller(sys._getframe(1)) is not None:
            return mlir_jit(func_or_sig, **options)
        declared: Tuple = ()
        if isinstance(func_or_sig, (str, list)) or sigutils.is_signature(func_or_sig):
            declared = tuple(func_or_sig) if isinstance(func_or_sig, list) else (func_or_sig,)
            func_or_sig = None

        def decorate(func):
            if self.active is None:  # (the decorator was made in a cell and applied after it)
                return mlir_jit(list(declared) or None, **options)(func)
            context.pipelined.settle()
            return context.make_mlir_kernel(mlir_jit(**options)(func), declared)  # (lazy: it compiles nothing)

        return decorate if func_or_sig is None else decorate(func_or_sig)

    def __repr__(self):
        return "<gpucache_ext stand-in for numba_cuda_mlir.cuda.jit>"


MLIR_JIT = MlirCellJit()


@contextlib.contextmanager
def _mlir_jit_standing_in(namespace, context: _CellContext, source: str):
    """numba-cuda-mlir's ``cuda.jit`` (and the namespace's names for it) is
    `MLIR_JIT` while the block runs, where the cell's code names
    numba_cuda_mlir or an earlier cell imported it."""
    if "numba_cuda_mlir" not in source and "numba_cuda_mlir.cuda" not in sys.modules:
        yield
        return
    from ..backends.numba_cuda_mlir.launch import jit_replaced

    with jit_replaced(MLIR_JIT) as real, _standing_in(namespace, real, MLIR_JIT, context):
        yield


@contextlib.contextmanager
def _standing_in(namespace, real, stand_in, context: _CellContext):
    """The namespace's names for `real` (a compiler's jit) are `stand_in`,
    active for `context`, while the block runs; `real` again after, where
    the cell left them so."""
    aliases = [name for name, value in namespace.items() if value is real]
    for name in aliases:
        namespace[name] = stand_in
    stand_in.active = context
    try:
        yield
    finally:
        stand_in.active = None
        for name in aliases:
            if namespace.get(name) is stand_in:
                namespace[name] = real


@contextlib.contextmanager
def _jit_standing_in(namespace, context: _CellContext):
    """numba.cuda.jit, and the namespace's names for numba's jit, are `JIT`
    while the block runs; `JIT` makes kernels for `context`.  Where numba-cuda
    is not installed (numba-cuda-mlir alone), nothing stands in."""
    if not installed("numba_cuda"):
        yield
        return
    # (numba.cuda.decorators.jit stays numba's: `numba_compat.SWAPS`)
    with numba_compat.jit_replaced(JIT), _standing_in(namespace, _real_jit(), JIT, context):
        yield


def _capture_numba_kernels(namespace, before, context: _CellContext):
    """Kernels the cell made with numba's own jit, reached in a way the stand-in
    could not cover (a partial, an alias kept in a module): bind them as Kernels
    with the cell's flags too.  Options they were given explicitly are kept."""
    dispatchers = loaded_class("numba.cuda.dispatcher", "CUDADispatcher")
    if not dispatchers:  # (numba-cuda was never imported: no kernel of its)
        return
    ours = loaded_class(_kernels.__name__, "Kernel")
    for name, value in list(namespace.items()):
        if (isinstance(value, dispatchers) and not isinstance(value, ours)
                and not value.targetoptions.get("device") and before.get(name) is not value
                and not is_library_file(value.py_func.__code__.co_filename)):  # (a library's keeps numba's)
            namespace[name] = context.make_kernel(value.py_func, [],
                                                  explicit_options(value.targetoptions))


def _capture_mlir_kernels(namespace, before, context: _CellContext):
    """numba-cuda-mlir kernels the cell made with its own ``cuda.jit``, reached
    in a way the stand-in could not cover (an alias kept in a module): bound
    as the stand-in binds them (`_CellContext.make_mlir_kernel`), the
    signatures in their decorators too."""
    found = [(name, value) for name, value in namespace.items()
             if (type(value).__module__ or "").startswith("numba_cuda_mlir") and before.get(name) is not value]
    if not found:
        return
    from numba_cuda_mlir.descriptor import MLIRDispatcher

    for name, value in found:  # (an MlirKernel's class is gpucache_ext's: never found above)
        if not isinstance(value, MLIRDispatcher) or value.targetoptions.get("device") \
                or is_library_file(value.py_func.__code__.co_filename):
            continue
        declared = tuple(value.overloads) if not value._can_compile else ()
        namespace[name] = context.make_mlir_kernel(value, declared)


def run_cell(shell, cell, request: CellRequest, line="", auto=False):
    """Run a %%gpukernel cell (`auto`: one ``%gpucache auto`` gave the magic's
    line, so its own lines are numbered from 1); (its report, its last value)."""
    source = transform_body(shell, cell)
    filename = register_cell(shell, source, line, running_cell_number(shell), magic_line=not auto)
    code, last = compile_cell(source, filename, magic_line=not auto)

    results: List[CompileResult] = []
    collecting = [True]

    def collect(result, occasion="at this launch"):
        if collecting[0]:
            results.append(result)
        elif not request.quiet:  # compiled after the cell (a launch, a variants read): one line there, with why
            line = launch_line(result, occasion)
            if line is not None:
                print(line)

    namespace = shell.user_ns
    before = dict(namespace)
    context = _CellContext(request, collect, filename, followed_by_definitions(source, magic_line=not auto))
    context.namespace = namespace
    value = None
    compiling = False
    try:
        with _jit_standing_in(namespace, context), _mlir_jit_standing_in(namespace, context, source):
            exec(code, namespace)
            if last is not None:
                value = eval(last, namespace)
        _capture_numba_kernels(namespace, before, context)
        compiling = True
        _capture_mlir_kernels(namespace, before, context)
        context.pipelined.settle()
        for kernel in context.kernels:
            kernel.compile_declared()
    except BaseException as exc:
        if context.pipelined.failed is not None:  # (raised after its decorator: as if there)
            _restore_namespace(namespace, context.pipelined.failed[1])
        elif compiling:  # (a declared signature that does not compile: numba's decorator would have raised)
            _restore_kernel_names(namespace, before, context.kernels)
        # else the cell's own code raised: what it bound before stays bound, as in a plain cell
        # (a declared signature then compiles at the kernel's first launch)
        # (the error's traceback keeps this frame as long as the error is kept: `sys.last_value`, the next
        # error's context; it must not keep what the cell's namespace held, a GPU array deleted since)
        before.clear()
        value = None
        shown = as_cell_error(shell, exc, filename, context)
        if shown is exc:
            raise
        # (a launch's compile raised numba's error from the CompileError: chained to that, as a cell's)
        raise shown from (exc.__cause__ if not isinstance(exc, CompileError) and isinstance(exc.__cause__, CompileError)
                          else exc)
    finally:
        context.pipelined.close()
        collecting[0] = False
    report = CellReport(results, explain=request.explain, bound=_bound_notes(namespace, context, results),
                        variants=_variants_tables(context))
    return report, value


def _with_created(cache, row):
    """`row` with its entry's build time: a move is said from the variant built first, as
    the inspector says it (a result alone has no time: the sweep's order would decide)."""
    entry = cache.entry("cubin", row.token)
    created = getattr(entry, "created", None)
    return dataclasses.replace(row, created=created) if isinstance(created, (int, float)) else row


def _variants_tables(context: _CellContext) -> List[VariantsTable]:
    """Per kernel of a sweep: its variants per architecture, with their
    occupancy at the cell's --block sizes, the best marked, and how the
    figures moved between variants one field apart."""
    from ..queries import DEFAULT_BLOCKS, ResourceRow, resource_moves, variant_occupancy

    tables = []
    for kernel in context.kernels:
        if len(kernel.sweep) < 2:
            continue
        rows, results = [], []
        for variant in kernel.variants:
            for result in variant.results.values():
                results.append(result)
                rows += [_with_created(kernel.cache, ResourceRow.from_result(each))
                         for each in result.cubin_targets.values()]
        if not rows:
            continue
        blocks = kernel.blocks or DEFAULT_BLOCKS
        title = (f"{kernel.__name__}: {len(kernel.sweep)} variants; occupancy at "
                 f"{', '.join(map(str, blocks))} threads a block"
                 + (f" with {kernel.dynamic_shared} B dynamic shared memory" if kernel.dynamic_shared else "")
                 + " (theoretical: not speed), * the best per architecture")
        tables.append(VariantsTable(title, rows, variant_occupancy(rows, blocks, kernel.dynamic_shared),
                                    resource_moves(rows), results, _built_in(kernel.cache, results[0].kernel, rows)))
    return tables


def _built_in(cache, qualname: str, rows) -> Optional[Dict[str, Optional[str]]]:
    """{cubin token: the cell that built it, as the entries list names its
    definition ("In[7]")} for a sweep's `rows`, where they were built in
    several cells (a kernel re-declared in a new cell and swept there reuses
    the variants the earlier cells built); None where one cell built all."""
    from ..views.entries import kernel_labels

    labels = kernel_labels(cache.entries(kernel=qualname), cache.places)
    built = {row.token: labels.get(("cubin", row.token), "").partition("@")[2] or None for row in rows}
    return built if len(set(built.values())) > 1 else None


def _bound_notes(namespace, context: _CellContext, results) -> List[str]:
    """A line for each thing the cell bound that compiled nothing in it: a
    lazy kernel, and each device function with the kernels that call it
    (unless a kernel the cell compiled calls it: the report shows that one)."""
    dispatchers = loaded_class("numba.cuda.dispatcher", "CUDADispatcher")

    notes = [f"{kernel.__name__}: compiles at its first launch, per argument types"
             for kernel in context.kernels if not kernel.results]
    for name in dict.fromkeys(_ufunc_name(kernel) for kernel in context.library_kernels if not kernel.results):
        if name is not None:
            notes.append(f"{name}: a CUDA ufunc, its kernels compile at its first call, per argument types")
    for module in dict.fromkeys(context.numba_compiled):
        notes.append(f"kernels made by {module}: compiled by numba-cuda itself, as without the magic (not cached)")
    compiled = {short_name(result.kernel) for result in results}
    for dispatcher in context.devices:
        name = dispatcher.py_func.__name__
        users = sorted(bound for bound, value in namespace.items()
                       if isinstance(value, dispatchers) and value is not dispatcher
                       and name in _names_read(value))
        if compiled.intersection(users):
            continue
        notes.append(f"{name}: device function, " + (f"used by {', '.join(users)}" if users
                                                     else "compiled into each kernel that calls it"))
    return notes


def _ufunc_name(kernel) -> Optional[str]:
    """The user's function a CUDA ufunc's kernel (numba's stager) calls, or None."""
    name = kernel.__name__
    for prefix in ("__vectorized_", "__gufunc_"):
        if name.startswith(prefix):
            return name[len(prefix):]
    return None


def _names_read(dispatcher) -> tuple:
    """The global names a kernel's or device function's code reads."""
    code = getattr(getattr(dispatcher, "py_func", None), "__code__", None)
    return code.co_names if code is not None else ()


def _restore_namespace(namespace, then) -> None:
    """Put `namespace` back as it was `then` (a copy of it)."""
    for name in [name for name in namespace if name not in then]:
        del namespace[name]
    for name, value in then.items():
        if namespace.get(name, _NOTHING) is not value:
            namespace[name] = value


_NOTHING = object()


def _restore_kernel_names(namespace, before, kernels):
    made = {id(k) for k in kernels}
    for name, value in list(namespace.items()):
        if id(value) in made:
            if name in before:
                namespace[name] = before[name]
            else:
                del namespace[name]


