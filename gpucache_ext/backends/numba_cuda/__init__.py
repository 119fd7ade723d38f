"""numba-cuda as a backend (`backend.NumbaCuda`): typing and lowering by
numba-cuda's compiler (`stages`: split in two, numbered by the source
identity, device functions through proxies), libNVVM through numba-cuda's
binding, nvJitLink with numba's helpers linked in.

What its tokens read besides the snapshot: numba's extension tables where
user code registered (`extensions`), the environment variables code numba
ran read (`environment`), numba's settings that lowering reads
(`toolchain.numba_settings`).  What it refuses: numba's CUDA runtime on
(`numba_compat.check_numba_runtime`).

Its modules: `backend` (what the pipeline asks), `stages/` (the compile
stages on numba-cuda's compiler, imported by the first compile),
`numba_compat` (every change to numba's state, in one place), `extensions`
(numba's extension API in user code), `environment` (what numba's run reads
of the environment), `locks` (numba's compiler lock, safe on Ctrl-C),
`proxies` (a cache's device-function proxies).  Importing the package
imports none of them.
"""
