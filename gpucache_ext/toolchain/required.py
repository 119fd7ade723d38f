"""Importing this module checks that the CUDA toolchain is installed.

numba-cuda installs and imports without libNVVM, nvJitLink and NVRTC: they
come from gpucache_ext's ``cu12`` or ``cu13`` extra.  The compile core
(`gpucache_ext.backends.numba_cuda.stages`) imports this first, so that a missing toolchain is a
`ToolchainMissing` naming the extras, not a library-not-found error from deep
inside numba-cuda's first compile.
"""

from . import require

require()
