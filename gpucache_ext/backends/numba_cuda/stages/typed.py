"""The typing stage: a Python function and its argument types -> typed numba
IR (`TypedFunction`), which every lowering of it reuses (the argument types a
signature gives: `gpucache_ext.backends.numba_cuda.signatures`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from numba.cuda import types as nbtypes
from numba.cuda.descriptor import cuda_target

from ....keys import targets
from ....keys.config import CompileConfig
from ....errors import CompileError, UnsupportedKernelError, compile_error
from .compiling import TypingPipeline, compiling_for, numba_compiling, typing_flags
from .numbering import numbered_afresh


@dataclass
class TypedFunction:
    """Typed numba IR, reusable by any number of lowerings."""

    qualname: str
    state: Dict[str, Any]
    target_reads: targets.TargetReads
    proxies: Tuple[Any, ...] = ()  # device proxies the typed IR refers to (kept alive)
    snapshot_bytes: int = 0  # the array copies the typed IR holds

    @property
    def return_type(self):
        return self.state["return_type"]

    @property
    def nbytes(self) -> int:
        return 4096 + 256 * len(self.state["typemap"]) + self.snapshot_bytes


def run_typing(pyfunc, argtypes, config: CompileConfig, *, kernel: bool, uid: Optional[int] = None,
               qualname=None, fresh: Optional[bool] = None, return_type=None,
               inline: str = "never", debug_filename: Optional[str] = None,
               def_line: Optional[int] = None) -> TypedFunction:
    """Type `pyfunc` for `argtypes`.  Kernels must return void; a device
    function may have a declared `return_type`, and be inlined into its
    callers (``inline="always"``: numba then lets it return a new array).
    ``fresh``: make new proxies for the library device functions reached (a
    forced compile); None keeps the enclosing compile's choice.
    ``debug_filename``, ``def_line``: the file and the line of ``def`` debug
    info names, as the typing token hashed them (see `llvm.lower`)."""
    qualname = qualname or pyfunc.__qualname__
    return_type = nbtypes.void if kernel else return_type
    # (numbered afresh before the pipeline is made: it copies numba's target context)
    with numba_compiling(), compiling_for(config, "typing", fresh), targets.track() as reads, \
            numbered_afresh():
        try:
            flags = typing_flags(config)
            flags.inline = inline
            pipeline = TypingPipeline(
                cuda_target.typing_context, cuda_target.target_context, None,
                tuple(argtypes), return_type, flags, {},
            )
            pipeline.uid = uid
            state = pipeline.compile_extra(pyfunc)
        except (CompileError, UnsupportedKernelError):
            raise
        except Exception as exc:
            raise compile_error(qualname, "typing", exc, pyfunc) from exc
    if kernel and state["return_type"] not in (nbtypes.void, nbtypes.none):
        raise CompileError(qualname, "typing", "a CUDA kernel must not return a value")
    state["debug_filename"] = debug_filename
    state["def_line"] = def_line
    if state["metadata"].get("launch_config_sensitive"):
        raise UnsupportedKernelError(
            f"{qualname} reads the launch configuration at compile time; "
            "such kernels are compiled per launch and cannot be cached ahead of it"
        )
    return TypedFunction(qualname, state, frozenset(reads))


