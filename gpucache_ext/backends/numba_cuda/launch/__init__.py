"""Launching what the cache compiled, as numba-cuda launches.

`kernel` (`Kernel`: a numba-cuda ``CUDADispatcher`` whose variants come from
the cache), holding the parts every backend's kernel holds
(`gpucache_ext.launch`: builds, variants, batch, registry, spec) and its own:
`inspection` (numba's ``inspect_*``) and `simulated` (its launches on numba's
simulator); with `compiled` (a variant as numba holds it, and the image a GPU
loads), `tuning` (`tune`), `arguments` (a launch's arguments checked against
the declared signatures, as numba's dispatch checks them), `decorators`
(``gpucache_ext.jit`` for plain Python files), `device` (the GPU's target,
or the default one) and `simulator` (what compiled code does to values, on
numba's CUDA simulator where there is no GPU).
"""
