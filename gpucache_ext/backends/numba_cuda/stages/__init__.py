"""The four compile stages, each callable on its own, all without a GPU.

    typing  Python function + argument types -> typed numba IR   (numba-cuda)  `typed`
    llvm    typed IR + lowering fields      -> NVVM IR text     (numba-cuda)  `llvm`
    ptx     NVVM IR + NVVM options + arch   -> PTX / LTO-IR     (libNVVM)     `ptx`
    cubin   PTX + link options + sm         -> cubin            (nvJitLink)   `cubin`

numba-cuda runs typing and lowering as one pipeline; here they are split
(`compiling`), so a change of a lowering-only field lowers the cached typed
IR again instead of re-typing.  The target is always passed explicitly.

Three things numba-cuda would otherwise do behind the token's back are
handled here:

* Reads of the target.  Lowering reads the compute capability for a few
  operations only.  `compiling._TrackedFlags` records every read, so the
  pipeline knows whether an artifact is valid for every target or only for
  the one it was built for.
* Process-wide counters.  numba numbers functions and shared arrays from
  global counters that end up in symbol names; here both are derived from the
  source identity (`numbering`), so equal inputs give byte-identical outputs.
* Device functions.  numba compiles a called ``@cuda.jit(device=True)``
  function for the current GPU (failing without one) and caches it by argument
  types alone.  `DeviceProxy` (`device`) replaces it: it types the device
  function once and lowers it for the calling kernel's target, with the device
  function's own options (fastmath, debug, lineinfo, forceinline, inline), as
  numba does.

Importing the package imports every stage module: each adds its replacements
of numba's functions to those the first compile installs (`install_patches`).
"""

from __future__ import annotations

# numba's compiler loads with the stages (a compile that every stage serves from a cache loads
# neither): inside a compile of the cache's, the lowerings and templates numba's modules register
# as they load are numba's, not the user's (`extensions.derived_during`), and need no walk later
from ..extensions import numba_runs

numba_runs()

# first: numba-cuda imports without libNVVM, nvJitLink and NVRTC; its import says which extra brings them
from ....toolchain import required  # noqa: F401
from ....pipeline.artifacts import CubinArtifact, LLVMArtifact, PTXArtifact
from ..numba_compat import check_numba_runtime
from ..signatures import normalize_signature
from ....pipeline.debuginfo import debug_source_files, source_file_stats
from ....errors import def_line_of
from .compiling import install_patches
from .numbering import symbol_uid
from .typed import TypedFunction, run_typing
from .llvm import canonical_modules, run_llvm
from .ptx import nvvm_options, run_ptx
from .cubin import run_cubin
from .device import DeviceProxy

__all__ = ["CubinArtifact", "LLVMArtifact", "PTXArtifact", "check_numba_runtime", "def_line_of",
           "install_patches", "symbol_uid", "TypedFunction", "normalize_signature", "run_typing",
           "canonical_modules", "debug_source_files", "run_llvm", "source_file_stats", "nvvm_options",
           "run_ptx", "run_cubin", "DeviceProxy"]
