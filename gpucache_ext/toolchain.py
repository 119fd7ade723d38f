"""The toolchain fingerprint each stage depends on, and numba's own settings.

A stage's output depends on the versions of the tools that run it: Python and
numba for typing (bytecode, type inference), llvmlite for lowering, libNVVM
and libdevice for PTX, nvJitLink for the cubin.  Each stage token includes
only its own part; the upstream token carries the rest.

numba also reads environment variables (and `.numba_config.yaml`) at every
compile.  Those that change output are either folded into the llvm token
(`numba_settings`) or neutralised by the pipeline (see `NEUTRALISED_SETTINGS`).
"""

from __future__ import annotations

import functools
import importlib
import hashlib
import os
import platform
from importlib import metadata

from .tokens import Component, component

# numba settings that change lowered code, and so enter the llvm token:
#   OPT             debug info's isOptimized flag
#   BOUNDSCHECK     bounds checks on array indexing
#   FULL_TRACEBACKS debug printing in bounds-check failures
SETTINGS_READ_BY_LOWERING = ("OPT", "BOUNDSCHECK", "FULL_TRACEBACKS")

# Settings that would change output but that the pipeline makes irrelevant:
#   CUDA_DEBUGINFO_DEFAULT, OPT (as defaults): debug and opt are always passed.
#   FORCE_CUDA_CC, CUDA_DEFAULT_PTX_CC: the arch always comes from CompileConfig.sm.
#   CUDA_ENABLE_NRT: compiling is refused while it is on (stages.check_numba_runtime),
#   and it is forced off while compiling.
NEUTRALISED_SETTINGS = (
    "CUDA_DEBUGINFO_DEFAULT", "FORCE_CUDA_CC", "CUDA_DEFAULT_PTX_CC", "CUDA_ENABLE_NRT",
)


# Where each distribution keeps its version at run time (cheaper than metadata).
_VERSION_MODULES = {"numba": "numba", "numpy": "numpy", "llvmlite": "llvmlite",
                    "numba-cuda": "numba_cuda", "cuda-core": "cuda.core"}


def _version(dist: str) -> str:
    module = _VERSION_MODULES.get(dist)
    if module is not None:
        try:
            version = getattr(importlib.import_module(module), "__version__", None)
        except ImportError:
            version = None
        if isinstance(version, str):
            return version
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


@functools.lru_cache(maxsize=1)
def _libdevice_digest() -> str:
    from numba.cuda.cudadrv import nvvm

    return hashlib.sha256(nvvm.LibDevice().get()).hexdigest()


@functools.lru_cache(maxsize=1)
def _nvvm_version() -> str:
    from cuda.bindings import nvvm

    return ".".join(map(str, nvvm.version())) + "/ir" + ".".join(map(str, nvvm.ir_version()))


@functools.lru_cache(maxsize=1)
def _nvjitlink_version() -> str:
    from cuda.bindings import nvjitlink

    return ".".join(map(str, nvjitlink.version()))


@functools.lru_cache(maxsize=1)
def _cudadevrt_path():
    from numba.cuda.cudadrv.libs import get_cudalib

    path = get_cudalib("cudadevrt", static=True)
    return path if os.path.isfile(path) else None


@functools.lru_cache(maxsize=1)
def cudadevrt() -> bytes:
    """libcudadevrt.a, which grid synchronisation links (the CUDA toolkit's, or
    the nvidia-cuda-runtime wheel's that numba-cuda[cu12] brings)."""
    path = _cudadevrt_path()
    if path is None:
        from .errors import UnsupportedKernelError

        raise UnsupportedKernelError(
            "grid synchronisation needs libcudadevrt.a, which was not found; "
            "pip install nvidia-cuda-runtime-cu12 (numba-cuda[cu12] brings it)")
    with open(path, "rb") as handle:
        return handle.read()


@functools.lru_cache(maxsize=1)
def _cudadevrt_digest() -> str:
    return hashlib.sha256(cudadevrt()).hexdigest() if _cudadevrt_path() else "absent"


def _nvrtc_version() -> str:
    try:
        from .linking import _nvrtc_identity

        return ".".join(map(str, _nvrtc_identity()[0]))
    except Exception:  # pragma: no cover - NVRTC comes with numba-cuda[cu12]
        return "absent"


@functools.lru_cache(maxsize=None)
def stage_toolchain(stage: str) -> dict:
    """The tool versions `stage` runs with, as a dict (computed once per process)."""
    if stage == "typing":
        return {
            "python": platform.python_implementation() + " " + platform.python_version(),
            "numba": _version("numba"),
            "numba-cuda": _version("numba-cuda"),
            "numpy": _version("numpy"),
        }
    if stage == "llvm":
        return {"llvmlite": _version("llvmlite"), "numba-cuda": _version("numba-cuda")}
    if stage == "ptx":
        return {"libnvvm": _nvvm_version(), "libdevice": _libdevice_digest()[:16],
                "numba-cuda": _version("numba-cuda")}
    if stage == "cubin":
        # NVRTC compiles the .cu sources linked in (numba's helpers among them)
        return {"nvjitlink": _nvjitlink_version(), "cuda-core": _version("cuda-core"),
                "cudadevrt": _cudadevrt_digest()[:16], "nvrtc": _nvrtc_version(),
                "numba-cuda": _version("numba-cuda")}
    raise ValueError(f"unknown stage {stage!r}")


@functools.lru_cache(maxsize=None)
def toolchain_component(stage: str) -> Component:
    versions = stage_toolchain(stage)
    return component(versions, " ".join(f"{k} {v}" for k, v in versions.items()))


def numba_settings(reload: bool = True) -> dict:
    """numba's current values of the settings that lowering reads.

    Reloads numba's configuration first (unless `reload` is False), exactly
    as each numba compile does, so the values are the ones the next compile
    will use.
    """
    from numba.cuda.core import config

    if reload:
        config.reload_config()
    return {name: _plain(getattr(config, name, None)) for name in SETTINGS_READ_BY_LOWERING}


def _plain(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
