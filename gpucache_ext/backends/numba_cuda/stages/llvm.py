"""The llvm stage: typed IR lowered for the lowering fields of a config ->
NVVM IR text (`LLVMArtifact`), its modules in a canonical order; and the
source files its debug info names, which the cubin stage reads."""

from __future__ import annotations

import contextlib
import functools
from typing import Tuple

from numba.cuda.codegen import ExternalCodeLibrary
from numba.cuda.compiler import kernel_fixup
from numba.cuda.core import ir as nbir
from numba.cuda.cudadrv import nvvm
from numba.cuda.descriptor import cuda_target

from ....keys import targets
from ....pipeline.artifacts import LLVMArtifact
from ....keys.config import CompileConfig
from ....errors import CompileError, UnsupportedKernelError, compile_error
from ....toolchain import linking
from .compiling import (
    LoweringPipeline,
    active,
    compiling_for,
    lowering_flags,
    numba_compiling,
    replace_in_numba,
)
from .numbering import numbered_afresh, stable_shared_memory_names
from .typed import TypedFunction


def run_llvm(typed: TypedFunction, config: CompileConfig, external=frozenset()) -> LLVMArtifact:
    """Lower typed IR for the lowering fields of `config` (and its target).
    `external`: the link items of the kernel's external functions (linked by
    the cubin stage, see `linking`), left out of the artifact."""
    with numba_compiling(), compiling_for(config, "lowering"), targets.track() as reads:
        try:
            cres = lower(typed, config)
            library = cres.library
            entry_name = cres.fndesc.llvm_func_name
            kernel = library.get_function(entry_name)
            kernel_fixup(kernel, config.debug)
            nvvm.set_launch_bounds(kernel, config.launch_bounds)
        except (CompileError, UnsupportedKernelError):
            raise
        except Exception as exc:
            raise compile_error(typed.qualname, "llvm", exc) from exc
        modules = canonical_modules(library)
        links = linking.library_inputs(library, "\n".join(modules), f"{typed.qualname}: ", external)
    return LLVMArtifact(modules, entry_name, frozenset(reads) | typed.target_reads, cres.call_helper,
                        cooperative=bool(library.use_cooperative or library.needs_cudadevrt),
                        links=links)


def canonical_modules(library) -> Tuple[str, ...]:
    """The NVVM IR modules of `library` and everything it links, in a canonical order.

    numba keeps a library's linked libraries in a set (numba/cuda/codegen.py:166,
    walked by ``modules``, :424-427), so their order (and with it libNVVM's
    output: the order of functions in the PTX, the layout of debug info)
    follows memory addresses and differs between processes: there is no
    order of numba's to follow.  Here each library's linked libraries are
    visited sorted by their text.  That is canonical because the text is:
    what numba numbers from process-wide counters (helpers' symbols, record
    types, inlined variables, labels) is numbered from content here
    (`numbering`, `gpucache_ext.backends.numba_cuda.numba_compat`), and a device function passed
    as an argument is named by its identity (`DeviceProxy.__repr__`), so equal
    inputs give equal texts in every process; libraries of equal text are
    interchangeable, so ties reorder nothing.  (Before, those numbers were in
    the text, and the sort followed them.)  The walk stays depth-first,
    callers before callees, as numba's own: libNVVM links a ``linkonce_odr``
    function only when a module linked before it refers to it.
    """
    return tuple(_library_modules(library))


def _library_modules(library):
    if isinstance(library, ExternalCodeLibrary):
        return []  # external code only (declare_device, numba's shims): linked, not IR
    module = getattr(library, "_module", None)
    if module is None or not hasattr(library, "_linking_libraries"):
        raise UnsupportedKernelError(
            f"cannot order the modules of a {type(library).__name__}; this numba-cuda "
            "version's code libraries are not supported"
        )
    linked = sorted(_library_modules(lib) for lib in library._linking_libraries)
    return [str(module)] + [text for texts in linked for text in texts]


# ---------------------------------------------------------------------------
# Lowering (of a kernel here, of a device function for the kernel lowering it: `device`)


def lower(typed: TypedFunction, config: CompileConfig, forceinline: bool = False):
    """numba's compile result of lowering `typed` for the lowering fields of
    `config`, numbered afresh (`numbering.numbered_afresh`)."""
    # (numbered afresh before the pipeline is made: it copies numba's target context)
    with numbered_afresh():
        return _lower_typed(typed, config, forceinline)


def _lower_typed(typed: TypedFunction, config: CompileConfig, forceinline: bool):
    state = typed.state
    flags = lowering_flags(config)
    if forceinline:
        flags.forceinline = True
    pipeline = LoweringPipeline(
        cuda_target.typing_context, cuda_target.target_context, None,
        state["args"], state["return_type"], flags, {},
    )
    ps = pipeline.state
    ps.func_id = state["func_id"]
    # Lowering inserts ir.Del nodes into the blocks: give it its own copy.
    ps.func_ir = state["func_ir"].copy()
    if state.get("debug_filename"):
        # numba-cuda names os.path.abspath(the code's file) in debug info, which
        # for a cell reads the working directory at lowering time: name the one
        # the typing token hashed instead
        loc = ps.func_ir.loc
        ps.func_ir.loc = nbir.Loc(state["debug_filename"], loc.line, loc.col, loc.maybe_decorator)
    ps.typemap = state["typemap"]
    ps.calltypes = state["calltypes"]
    ps.return_type = state["return_type"]
    ps.metadata = dict(state["metadata"])
    ps.lifted = ()
    ps.lifted_from = None
    with stable_shared_memory_names(state["func_id"].unique_id), _def_line_as_hashed(state):
        cres = pipeline._compile_core()
    cres.library.finalize()
    return cres


@contextlib.contextmanager
def _def_line_as_hashed(state):
    """numba-cuda finds the line of ``def`` for debug info by parsing the
    source text when it lowers (which may have changed on disk since): it is
    given the line the typing token hashed instead."""
    code = state["func_id"].code
    previous = active.def_line
    active.def_line = (code, state.get("def_line")) if state.get("debug_filename") else None
    try:
        yield
    finally:
        active.def_line = previous


def _hashed_def_line(numba_def_line):
    """numba's line of `def` for debug info, read from the file as it is now;
    inside a compile of ours, the line of the source that was hashed."""

    @functools.wraps(numba_def_line)
    def get_func_def_lineno(pyfunc):
        given = active.def_line
        if given is not None and getattr(pyfunc, "__code__", None) is given[0]:
            return given[1]
        return numba_def_line(pyfunc)

    return get_func_def_lineno


replace_in_numba({"numba.cuda.lowering:get_func_def_lineno": _hashed_def_line})
