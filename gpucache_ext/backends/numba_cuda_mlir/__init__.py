"""numba-cuda-mlir, NVIDIA's successor to numba-cuda, as a backend
(`backend.NumbaCudaMlir`, registered as "mlir").

Its stages (`compiler`): typing by numba-cuda-mlir's front end (its own copy
of numba-cuda's), stopped before lowering; lowering to one MLIR module
(``mlir``, kept as text); the ptx stage parses that text again and runs
numba-cuda-mlir's pass pipeline and its LLVM 7 bridge to libNVVM (libNVVM
from the NVVM IR for sm_100 and later), so it is keyed on the MLIR's bytes
(early cutoff); the cubin stage links with numba-cuda-mlir's nvJitLink
linker.  Each stage calls numba-cuda-mlir's own functions with the options
its ``cuda.jit`` gives them, so the PTX and cubin are its own
(tests/test_mlir_backend.py compares them with ``compile_ptx``).

No GPU is needed: numba-cuda-mlir asks the driver for the host's compute
capability even when given a target; inside a compile of ours it is
answered with the target (`compiler.answering_host_query`), so the linker
targets exactly the target the token names.

Importing the package imports no numba-cuda-mlir: `backend` imports
`compiler` at the first compile.
"""
