"""Launching what the cache compiled, as numba-cuda launches.

`kernel` (`Kernel`: a numba-cuda ``CUDADispatcher`` whose variants come from
the cache), holding its parts: `builds` (its compiles through the cache),
`variants` (a sweep's variants, `use`), `inspection` (numba's ``inspect_*``),
`simulated` (its launches on numba's simulator) and `batch` (compiles begun
ahead, for a cell's kernels compiled one behind another); with `compiled` (a
variant as numba holds it, and the image a GPU loads), `tuning` (`tune`),
`registry` (the live kernels, `refresh_all`) and `arguments` (a launch's
arguments checked against the declared signatures, as numba's dispatch
checks them); `decorators`
(``gpucache_ext.jit`` for plain Python files), `device` (the GPU's target,
or the default one), `spec` (`KernelSpec`: what a kernel is built with, as
one record) and `simulator` (launches on numba's CUDA simulator where there
is no GPU).
"""
