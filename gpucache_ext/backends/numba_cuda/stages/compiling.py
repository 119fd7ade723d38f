"""numba's compiler as the stages run it: the flags they give numba (its
reads of the target recorded), numba-cuda's pipeline split before lowering,
the compile running on this thread (`active`), and the replacements of
numba's functions the first compile installs (`install_patches`).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, Callable, Dict, Mapping, Optional

# (numba's lowering implementations load with the pipeline: a numba-cuda that cannot load
# them fails at this import, which says its cause)
from numba.cuda import cudaimpl  # noqa: F401
from numba.cuda import utils as nbutils
from numba.cuda.compiler import CUDACompiler, CUDATranslateBytecode, DefaultPassBuilder
from numba.cuda.core.bytecode import FunctionIdentity
from numba.cuda.core.compiler import _EarlyPipelineCompletion
from numba.cuda.core.untyped_passes import ExtractByteCode
from numba.cuda.core.compiler_machinery import FunctionPass, PassManager, register_pass
from numba.cuda.core.untyped_passes import TranslateByteCode
from numba.cuda.flags import CUDAFlags

from ....keys import targets
from .. import environment
from .. import numba_compat
from ..extensions import numba_runs
from ..locks import compiler_lock
from ....keys.config import CompileConfig
from .... import memos

# ---------------------------------------------------------------------------
# numba flags


class _TrackedFlags(CUDAFlags):
    """CUDAFlags whose compute_capability records what is asked of it (see
    `targets`), and which keep it out of numba's mangled names (so IR built
    for one target can serve another)."""

    def values(self):
        # numba logs every option before each pass: not a read by the compiler.  (Also its flags'
        # hash and ==, thousands of times a compile: every option's default, then those set.)
        defaults = _DEFAULTS.get(type(self))
        if defaults is None:
            defaults = _DEFAULTS[type(self)] = {name: option.default for name, option in self.options.items()}
        return {**defaults, **self._values}

    def _summary_args(self):
        return [
            (name, value)
            for name, value in sorted(self._values.items())
            if name != "compute_capability" and self.options[name].default != value
        ]


# a flags class -> its options' defaults, in order
_DEFAULTS: Dict[type, Dict[str, Any]] = memos.memo("backends.numba_cuda.stages.compiling._DEFAULTS", {})


def _read_cc(self):
    value = self._values.get("compute_capability")
    return None if value is None else targets.TrackedCC(value)


def _write_cc(self, value):
    self._values["compute_capability"] = tuple(value)


_TrackedFlags.compute_capability = property(_read_cc, _write_cc)


def typing_flags(config: CompileConfig) -> _TrackedFlags:
    """numba flags for typing: the target only (typed IR serves every config)."""
    flags = _TrackedFlags()
    flags.no_compile = True
    flags.no_cpython_wrapper = True
    flags.no_cfunc_wrapper = True
    flags.inline = "never"
    flags.error_model = "numpy"
    flags.compute_capability = config.cc
    return flags


def lowering_flags(config: CompileConfig) -> _TrackedFlags:
    """numba flags for lowering: the target and the fields lowering reads."""
    flags = typing_flags(config)
    if config.debug or config.lineinfo:
        flags.debuginfo = True
    if config.lineinfo:
        flags.dbg_directives_only = True
    if config.debug:
        flags.error_model = "python"
        flags.dbg_extend_lifetimes = True
        flags.nvvm_options = {"g": None}
    if config.fastmath:
        flags.fastmath = True
    return flags


def lowering_key(config: CompileConfig):
    """What a device function's lowering depends on besides its typed IR: the
    lowering fields and numba's settings that lowering reads (as the llvm
    token), so a memoised lowering is reused only where the kernel's would be."""
    from ....toolchain import numba_settings

    settings = numba_settings(reload=False)
    return tuple(sorted(config.stage_fields("llvm").items())) + tuple(sorted(settings.items()))


@contextlib.contextmanager
def numba_compiling():
    """numba's global compiler lock (safe against Ctrl-C: `locks`), the CUDA
    target, NRT forced off (`numba_compat.nrt_off`), and what code there
    reads of the environment recorded (`environment.recorded`).  Every run of
    numba's pipeline (typing, lowering) is inside it: the first installs the
    patches (`install_patches`)."""
    install_patches()
    with compiler_lock(), nbutils.numba_target_override(), numba_compat.nrt_off(), environment.recorded():
        numba_runs()  # (what numba registers from here on follows from what was hashed)
        yield


# ---------------------------------------------------------------------------
# Pipelines


@register_pass(mutates_CFG=False, analysis_only=True)
class _StopAfterTyping(FunctionPass):
    _name = "gpucache_stop_after_typing"

    def __init__(self):
        FunctionPass.__init__(self)

    def run_pass(self, state):
        raise _EarlyPipelineCompletion(
            {
                "func_id": state.func_id,
                "func_ir": state.func_ir,
                "typemap": state.typemap,
                "calltypes": state.calltypes,
                "return_type": state.return_type,
                "args": tuple(state.args),
                "metadata": dict(state.metadata or {}),
            }
        )


class TypingPipeline(CUDACompiler):
    """numba-cuda's untyped and typed passes, stopping before lowering.

    numba numbers every function it compiles from a process-global counter and
    puts that number in the symbol name.  Here the number is derived from the
    function's source identity instead, so the same inputs give the same NVVM
    IR, PTX and cubin bytes in every compile and every process.
    """

    uid: Optional[int] = None

    def compile_extra(self, func):
        from_function = FunctionIdentity.from_function
        if self.uid is not None:  # (numbered here, not by content: `numbering._numbered_by_content`)
            from_function = functools.partial(
                numba_compat.original("numba.cuda.core.bytecode:FunctionIdentity.from_function"), FunctionIdentity)
        self.state.func_id = from_function(func)
        if self.uid is not None:
            self.state.func_id.unique_id = self.uid
            self.state.func_id.unique_name = f"{self.state.func_id.func_qualname}${self.uid}"
        ExtractByteCode().run_pass(self.state)
        self.state.lifted = ()
        self.state.lifted_from = None
        return self._compile_bytecode()

    def define_pipelines(self):
        pm = PassManager("cuda")  # (numba's name: a failure reads "Failed in cuda mode pipeline", as numba's)
        for impl, desc in DefaultPassBuilder.define_untyped_pipeline(self.state).passes:
            pm.add_pass(CUDATranslateBytecode if impl is TranslateByteCode else impl, desc)
        pm.passes.extend(DefaultPassBuilder.define_typed_pipeline(self.state).passes)
        pm.add_pass(_StopAfterTyping, "stop after typing")
        pm.finalize()
        return [pm]


class LoweringPipeline(CUDACompiler):
    """numba-cuda's lowering passes, run on typed IR from `TypingPipeline`."""

    def define_pipelines(self):
        return [self.define_cuda_lowering_pipeline(self.state)]


# ---------------------------------------------------------------------------
# The compile running on this thread


class _ActiveConfig(threading.local):
    """The compile running on this thread: the kernel's config, whether it is
    typing or lowering, and (when forced) the library functions already given
    fresh proxies."""

    def __init__(self):
        self.config: Optional[CompileConfig] = None
        self.phase: Optional[str] = None  # "typing" or "lowering"
        self.fresh: Optional[set] = None
        self.def_line = None  # (code, line of def) of the function being lowered, for debug info


active = _ActiveConfig()


@contextlib.contextmanager
def compiling_for(config: CompileConfig, phase: str, fresh: Optional[bool] = None):
    """Mark this thread as typing or lowering for `config`; ``fresh`` (typing
    only) makes new proxies for the library functions numba reaches."""
    previous = (active.config, active.phase, active.fresh)
    active.config, active.phase = config, phase
    if fresh is not None:
        active.fresh = set() if fresh else None
    try:
        yield
    finally:
        active.config, active.phase, active.fresh = previous


# ---------------------------------------------------------------------------
# numba's functions replaced on the first compile

# What `install_patches` gives numba in place of each `numba_compat.PATCHES`
# target (what makes the replacement from numba's original): each module of
# this package adds its own when it is imported (`replace_in_numba`), and the
# package imports them all.
_replacements: Dict[str, Callable[[Any], Any]] = memos.state(
    "backends.numba_cuda.stages.compiling._replacements", {},
    "the patches of numba's functions the stages install: the declared table")
_patches_installed = False  # (numba_compat.install is idempotent too: this keeps each compile's check cheap)


def replace_in_numba(replacements: Mapping[str, Callable[[Any], Any]]) -> None:
    """Have `install_patches` apply `replacements` (a `numba_compat.PATCHES`
    target -> what makes its replacement from numba's original)."""
    _replacements.update(replacements)


def install_patches() -> None:
    """Apply `numba_compat.PATCHES`, with this package's replacements, if not
    applied yet.  The first compile does (`numba_compiling`), so that
    importing gpucache_ext changes nothing of numba's; each replacement acts
    only inside a compile of ours anyway."""
    global _patches_installed
    if _patches_installed:
        return
    numba_compat.install(_replacements)
    _patches_installed = True
