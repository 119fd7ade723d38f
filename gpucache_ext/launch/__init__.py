"""What a launchable kernel holds whatever compiler it launches through: its
parts, each written against a Protocol of what it asks of the kernel.

`builds` (`Builds`: its compiles through the cache), `variants`
(`VariantSet`: a sweep's variants, `use`), `batch` (compiles begun ahead,
for a cell's kernels compiled one behind another), `registry` (the live
kernels, `refresh_all`) and `spec` (`KernelSpec`: what a kernel is built
with, as one record).  The kernel itself is its backend's: numba-cuda's
(`backends.numba_cuda.launch.kernel.Kernel`, a ``CUDADispatcher``) holds
these parts with its own (numba's inspection, the simulator, its launch).
"""
