"""Launching what the cache compiled, as numba-cuda launches.

`kernel` (`Kernel`: a numba-cuda ``CUDADispatcher`` whose variants come from
the cache), `decorators` (``gpucache_ext.jit`` for plain Python files),
`device` (the GPU's target, or the default one), `spec` (`KernelSpec`: what
a kernel is built with, as one record) and `simulator` (launches on numba's
CUDA simulator where there is no GPU).
"""
