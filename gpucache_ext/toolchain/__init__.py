"""The toolchain: the tools that build each stage, and what they link.

This package's own module is the toolchain's fingerprint (below); beside it,
`linking` (the code a cubin links besides the kernel's), `fatbin` (several
targets in one image, nvFatbin) and `sass` (disassembly, nvdisasm).

The toolchain fingerprint each stage depends on, and numba's own settings.

A stage's output depends on the versions of the tools that run it: Python and
numba for typing (bytecode, type inference), llvmlite for lowering, libNVVM
and libdevice for PTX, nvJitLink for the cubin.  Each stage token includes
only its own part; the upstream token carries the rest.
From lowering on each part also names the CUDA major (12 or 13: which of the
extras ``gpucache_ext[cu12]``/``[cu13]`` is installed) and the tools' own
releases, so that a cache written under one major is a miss under the other:
libNVVM 12.9 and 13.x report the same ``nvvmVersion`` (2.0) and IR version,
so libNVVM's part also holds the release and build its PTX header names.

The toolchain must be installed at all (`require`): numba-cuda installs
without libNVVM, nvJitLink and NVRTC, which come from one of the extras.

Learning the libraries' part means loading them (libNVVM, NVRTC, nvJitLink)
and reading libdevice and libcudadevrt: 10-25 ms, more than a hit costs.  So
a cache with a disk tier remembers it in its folder (`MEMO_NAME`), keyed by
the identity of each library file (path, size, mtime, ctime, inode), found
the way numba and cuda.pathfinder will find it but without loading it, and by
the Python packages and environment variables that decide where they look.
A file that cannot be found that way is asked about (probed) every process.
Every value read from the memo is checked against the tools themselves before
a stage that uses them runs in this process (`confirm`), so nothing is ever
stored under a fingerprint the code was not built with.  A disk tier with a
secret signs its folder's memo as it signs entries (`sign_memo`): a memo
someone else wrote there is not read.

numba also reads environment variables (and `.numba_config.yaml`) at every
compile.  Those that change output are either folded into the llvm token
(`numba_settings`) or neutralised by the pipeline (see `NEUTRALISED_SETTINGS`).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import platform
import sys
import threading
from collections import Counter
from importlib import metadata
from pathlib import Path
from typing import Callable, Dict, NamedTuple, Optional, Tuple

from ..backends.numba_cuda import numba_compat
from ..errors import GpuCacheError, ToolchainMissing
from ..importing import front_end, front_end_module, installed
from ..keys.stagespec import DEFAULT_CHAIN, STAGE_SPEC, Chain
from ..store.signing import Keyring
from ..keys.tokens import Component, component
from .. import memos

log = logging.getLogger(__name__)

# numba settings that change lowered code, and so enter the llvm token:
#   OPT             debug info's isOptimized flag
#   BOUNDSCHECK     bounds checks on array indexing
#   FULL_TRACEBACKS debug printing in bounds-check failures
#   CUDA_DEBUG_POLY, CUDA_DEBUG_POLY_USE_TYPED_CONST  debug info of variables of several types: numba-cuda
#                   turns it on where the CUDA runtime is 13.2 or later (`numba.cuda.debuginfo`), so a
#                   minor release of CUDA 13 changes lowered code
SETTINGS_READ_BY_LOWERING = ("OPT", "BOUNDSCHECK", "FULL_TRACEBACKS", "CUDA_DEBUG_POLY",
                             "CUDA_DEBUG_POLY_USE_TYPED_CONST")

# Settings that would change output but that the pipeline makes irrelevant:
#   CUDA_DEBUGINFO_DEFAULT, OPT (as defaults): debug and opt are always passed.
#   FORCE_CUDA_CC, CUDA_DEFAULT_PTX_CC: the arch always comes from CompileConfig.sm.
#   CUDA_ENABLE_NRT: compiling is refused while it is on (numba_compat.check_numba_runtime),
#   and it is forced off while compiling.
NEUTRALISED_SETTINGS = (
    "CUDA_DEBUGINFO_DEFAULT", "FORCE_CUDA_CC", "CUDA_DEFAULT_PTX_CC", "CUDA_ENABLE_NRT",
)


# Where each distribution keeps its version at run time (cheaper than metadata).
_VERSION_MODULES = {"numba": "numba", "numpy": "numpy", "llvmlite": "llvmlite",
                    "numba-cuda": "numba_cuda", "cuda-core": "cuda.core",
                    "cuda-bindings": "cuda.bindings", "cuda-pathfinder": "cuda.pathfinder"}


@memos.cached("toolchain._version", maxsize=None)
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


# ---------------------------------------------------------------------------
# Probes: ask the tools themselves (loads the libraries, reads the files)


def _probe_nvvm() -> str:
    from cuda.bindings import nvvm

    return (".".join(map(str, nvvm.version())) + "/ir" + ".".join(map(str, nvvm.ir_version()))
            + "/" + _nvvm_build())


# An empty module: what libNVVM writes for it is only its header, which names its release and build.
_EMPTY_MODULE = """target triple = "nvptx64-nvidia-cuda"
target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
!nvvmir.version = !{{!0}}
!0 = !{{i32 {0}, i32 {1}, i32 {2}, i32 {3}}}
"""


def _nvvm_build() -> str:
    """libNVVM's release and build ("release 13.5, V13.5.37 CL-39125733"), from the header
    of the PTX it writes for an empty module (``nvvmVersion`` says 2.0 from CUDA 11.2 to 13)."""
    from cuda.bindings import nvvm

    module = _EMPTY_MODULE.format(*nvvm.ir_version()).encode()
    program = nvvm.create_program()
    try:
        nvvm.add_module_to_program(program, module, len(module), "gpucache_probe")
        nvvm.compile_program(program, 0, [])  # (libNVVM's default target: one it builds)
        ptx = bytearray(nvvm.get_compiled_result_size(program))
        nvvm.get_compiled_result(program, ptx)
    finally:
        nvvm.destroy_program(program)
    header = [line[2:].strip() for line in bytes(ptx).decode("ascii", "replace").splitlines()
              if line.startswith("//") and ("Build ID" in line or "release" in line)]
    return " ".join(header) or "unknown build"


def _probe_nvjitlink() -> str:
    from cuda.bindings import nvjitlink

    return ".".join(map(str, nvjitlink.version()))


def _probe_nvfatbin() -> str:
    from cuda.bindings import nvfatbin

    return ".".join(map(str, nvfatbin.version()))


def _probe_nvrtc() -> str:
    try:
        from .linking import nvrtc_identity

        return ".".join(map(str, nvrtc_identity()[0]))
    except Exception:  # pragma: no cover - NVRTC comes with numba-cuda[cu12]
        log.debug("NVRTC could not be loaded", exc_info=True)
        return "absent"


def _probe_nvrtc_archs() -> str:
    nvrtc = front_end_module("cudadrv.nvrtc")

    return " ".join(f"{major}.{minor}" for major, minor in sorted(nvrtc.get_supported_ccs()))


def _probe_libdevice() -> str:
    data = front_end_module("cudadrv.nvvm").LibDevice().get()
    if front_end() == "numba.cuda":  # (pinned: every compile links the bytes hashed here, `numba_compat.SETTINGS`)
        numba_compat.pin_libdevice(data)
    return hashlib.sha256(data).hexdigest()


def _probe_cudadevrt() -> str:
    return hashlib.sha256(cudadevrt()).hexdigest() if _cudadevrt_path() else "absent"


@memos.cached("toolchain._cudadevrt_location", maxsize=1)
def _cudadevrt_location() -> str:
    """Where numba looks for libcudadevrt.a (a bare file name where it found no folder)."""
    return front_end_module("cudadrv.libs").get_cudalib("cudadevrt", static=True)


def _cudadevrt_path():
    path = _cudadevrt_location()
    return path if os.path.isfile(path) else None


@memos.cached("toolchain.cudadevrt", maxsize=1)
def cudadevrt() -> bytes:
    """libcudadevrt.a, which grid synchronisation links (the CUDA toolkit's, or
    the nvidia-cuda-runtime wheel's that numba-cuda[cu12] brings)."""
    path = _cudadevrt_path()
    if path is None:
        from ..errors import UnsupportedKernelError

        raise UnsupportedKernelError(
            "grid synchronisation needs libcudadevrt.a, which was not found; "
            "pip install nvidia-cuda-runtime-cu12 (numba-cuda[cu12] brings it)")
    with open(path, "rb") as handle:
        return handle.read()


# ---------------------------------------------------------------------------
# Locating the files without loading them, and the files the probes used


def _locate_dynamic(libname: str) -> Optional[str]:
    """The file cuda.pathfinder will load for `libname` (as cuda.bindings and
    numba do), found without loading it: one already loaded, else the pip
    wheels' or conda's copy.  None where only the system loader would find it
    (LD_LIBRARY_PATH, ld.so.conf, CUDA_HOME as a fallback): that needs dlopen,
    and where cuda.bindings does not load it through cuda.pathfinder."""
    try:
        from cuda import pathfinder
        from cuda.pathfinder._dynamic_libs.lib_descriptor import LIB_DESCRIPTORS
        from cuda.pathfinder._dynamic_libs.platform_loader import LOADER
        from cuda.pathfinder._dynamic_libs.search_steps import EARLY_FIND_STEPS, SearchContext, run_find_steps

        bindings = importlib.import_module(f"cuda.bindings._internal.{libname.lower()}")
        if getattr(bindings, "load_nvidia_dynamic_lib", None) is not pathfinder.load_nvidia_dynamic_lib:
            return None
        desc = LIB_DESCRIPTORS[libname]
        found = run_find_steps(SearchContext(desc), EARLY_FIND_STEPS)
        loaded = LOADER.check_if_already_loaded_from_elsewhere(desc)
    except Exception:  # pathfinder's internals moved: probe instead
        log.debug("cuda-pathfinder's search steps are not there; probing %s instead", libname, exc_info=True)
        return None
    if loaded is not None:
        return loaded.abs_path
    return found.abs_path if found is not None else None


def _loaded_dynamic(libname: str) -> Optional[str]:
    """The file cuda.pathfinder loaded for `libname` (after a probe)."""
    from cuda.pathfinder import load_nvidia_dynamic_lib

    return load_nvidia_dynamic_lib(libname).abs_path


def _numba_path(which: str):
    """numba's own decision (its cached one if made), which loads no library."""
    cuda_paths = front_end_module("cuda_paths")

    cached = getattr(cuda_paths.get_cuda_paths, "_cached_result", None)
    if cached is not None:
        return cached[which].info
    decide = {"libdevice": cuda_paths._get_libdevice_path,
              "static_cudalib_dir": cuda_paths._get_static_cudalib_dir}[which]
    return decide().info


def _locate_libdevice() -> Optional[str]:
    try:
        return _numba_path("libdevice")
    except Exception:
        log.debug("numba-cuda found no libdevice", exc_info=True)
        return None


def _loaded_libdevice() -> Optional[str]:
    return front_end_module("cudadrv.libs").get_libdevice()


def _locate_cudadevrt() -> Optional[str]:
    """As numba's `get_cudalib("cudadevrt", static=True)`, without its
    `get_cuda_paths()`, which loads NVRTC and libNVVM."""
    try:
        _staticnamepattern = front_end_module("cudadrv.libs")._staticnamepattern
        find_lib = front_end_module("misc.findlib").find_lib

        candidates = find_lib("cudadevrt", _numba_path("static_cudalib_dir"), static=True)
        return max(candidates) if candidates else _staticnamepattern % "cudadevrt"
    except Exception:
        log.debug("numba-cuda found no libcudadevrt", exc_info=True)
        return None


# ---------------------------------------------------------------------------
# The CUDA major, and whether the toolchain is installed at all

# What to install, in the words every error that needs it uses.
INSTALL_CU12 = 'pip install "gpucache_ext[cu12]"'
INSTALL_CU13 = 'pip install "gpucache_ext[cu13]"'
# numba-cuda-mlir alone (no numba-cuda)
INSTALL_MLIR_CU12 = 'pip install "gpucache_ext[mlir-cu12]"'
INSTALL_MLIR_CU13 = 'pip install "gpucache_ext[mlir-cu13]"'
# The libraries the stages load: libNVVM (ptx), nvJitLink (cubin), NVRTC (targets, linked .cu sources).
_REQUIRED_LIBRARIES = {"nvvm": "libNVVM", "nvJitLink": "nvJitLink", "nvrtc": "NVRTC"}


def cuda_major() -> int:
    """The CUDA major of the installed toolchain: cuda-bindings' (12 or 13),
    which loads the libraries of its own major only (libnvrtc.so.13...)."""
    version = _version("cuda-bindings")
    return int(version.split(".")[0]) if version[:1].isdigit() else 0


_toolchain_found = False


def require() -> None:
    """Raise `ToolchainMissing` unless libNVVM, nvJitLink and NVRTC can be
    found where cuda.bindings will look (the extras' wheels, conda, a CUDA
    toolkit on the loader's path).  Found without loading where it can be;
    asked of the loader only where not; once per process when found."""
    global _toolchain_found
    if _toolchain_found:
        return
    missing = [what for libname, what in _REQUIRED_LIBRARIES.items() if not _findable(libname)]
    if missing:
        major = cuda_major()
        mlir_alone = not installed("numba_cuda") and installed("numba_cuda_mlir")
        cu12, cu13 = (INSTALL_MLIR_CU12, INSTALL_MLIR_CU13) if mlir_alone else (INSTALL_CU12, INSTALL_CU13)
        raise ToolchainMissing(
            f"no CUDA toolchain: {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed "
            f"(cuda-bindings {_version('cuda-bindings')} looks for CUDA {major or '?'}'s). gpucache_ext brings "
            f"them with one of its extras: {cu12} (CUDA 12, the default: every target from sm_50) "
            f"or {cu13} (CUDA 13: needs a CUDA 13 driver, r580 or later, and builds sm_75 and later)")
    _toolchain_found = True


def _findable(libname: str) -> bool:
    if _locate_dynamic(libname) is not None:
        return True
    try:  # only the loader's own search would find it (LD_LIBRARY_PATH, a system toolkit): ask it
        _loaded_dynamic(libname)
        return True
    except Exception:
        log.debug("%s cannot be loaded", libname, exc_info=True)
        return False


class _Part(NamedTuple):
    probe: Callable[[], str]
    locate: Callable[[], Optional[str]]  # the file the probe will use, found cheaply
    used: Callable[[], Optional[str]]    # the file the probe used (after it ran)


# The parts of the fingerprint that cost a library load or a file read.
_PARTS: Dict[str, _Part] = {
    "libnvvm": _Part(_probe_nvvm, lambda: _locate_dynamic("nvvm"), lambda: _loaded_dynamic("nvvm")),
    "libdevice": _Part(_probe_libdevice, _locate_libdevice, _loaded_libdevice),
    "nvjitlink": _Part(_probe_nvjitlink, lambda: _locate_dynamic("nvJitLink"),
                       lambda: _loaded_dynamic("nvJitLink")),
    "nvrtc": _Part(_probe_nvrtc, lambda: _locate_dynamic("nvrtc"), lambda: _loaded_dynamic("nvrtc")),
    "nvrtc archs": _Part(_probe_nvrtc_archs, lambda: _locate_dynamic("nvrtc"),
                         lambda: _loaded_dynamic("nvrtc")),
    "cudadevrt": _Part(_probe_cudadevrt, _locate_cudadevrt, _cudadevrt_location),
    "nvfatbin": _Part(_probe_nvfatbin, lambda: _locate_dynamic("nvfatbin"),
                      lambda: _loaded_dynamic("nvfatbin")),
}



# ---------------------------------------------------------------------------
# The memo

MEMO_NAME = "toolchain-memo.json"
_MEMO_FORMAT = 2  # 2: libNVVM's part names its release and build
_MEMO_KEYS_PER_PART = 16  # environments sharing one folder each keep their entries

# Environment variables that change where the libraries are looked for.
_ENV_PREFIXES = ("CUDA_", "NUMBA_CUDA", "CONDA_")
_ENV_NAMES = ("LD_LIBRARY_PATH", "LD_PRELOAD", "PATH" if sys.platform == "win32" else "LD_AUDIT")

# Counts of probes run and values read from the memo in this process, by part.
probes: Counter = memos.state("toolchain.probes", Counter(), "a count of this process's probes, what stats say")
memo_reads: Counter = memos.state("toolchain.memo_reads", Counter(), "a count of this process's memo reads")

_lock = threading.RLock()
_values: Dict[str, str] = memos.memo("toolchain._values", {})
# part -> (memo folder, key)
_unconfirmed: Dict[str, Tuple[Optional[Path], Optional[str]]] = memos.memo("toolchain._unconfirmed", {})
# each folder's memo, as first read by this process
_memos: Dict[Path, Dict[str, Dict[str, str]]] = memos.memo("toolchain._memos", {})


class ToolchainChanged(GpuCacheError):
    """A library changed on disk after this process read its fingerprint from
    the memo (a wheel was reinstalled under a running kernel): the tokens
    computed with the old fingerprint must not be used.  Compiling again uses
    the new one; `KernelCache.compile` does so by itself."""


def memo_path(directory) -> Path:
    return Path(directory) / MEMO_NAME


# folder -> the keyring its disk tier signs with
_memo_keyrings: Dict[Path, Keyring] = memos.state(
    "toolchain._memo_keyrings", {},
    "the keyring each disk tier signs its folder's toolchain memo with, as the tiers registered it")


def sign_memo(directory, keyring) -> None:
    """Sign and check the memo in `directory` with `keyring` (a disk tier
    with a secret does): a folder others can write to must not be able to
    feed this process another toolchain's fingerprint."""
    with _lock:
        _memo_keyrings[Path(directory)] = keyring
        _memos.pop(Path(directory), None)


def _memo_keyring(directory: Path):
    # (no secret: unsigned, and a signed memo read unchecked)
    return _memo_keyrings.get(Path(directory)) or Keyring(allow_unsigned=True)


@memos.cached("toolchain._environment", maxsize=1)
def _environment() -> str:
    """What, besides the files themselves, decides which files are found and
    how they are asked: interpreter, the packages that search, the environment."""
    env = {name: value for name, value in os.environ.items()
           if name.startswith(_ENV_PREFIXES) or name in _ENV_NAMES}
    return json.dumps({
        "memo": _MEMO_FORMAT, "python": sys.version, "executable": sys.executable,
        "prefix": sys.prefix, "platform": sys.platform, "machine": platform.machine(),
        "packages": {dist: _version(dist) for dist in
                     ("numba", "numba-cuda", "numba-cuda-mlir", "cuda-bindings", "cuda-pathfinder",
                      "cuda-core")},
        "env": env,
    }, sort_keys=True)


def file_identity(path: str) -> list:
    """What changes whenever the file at `path` is replaced or rewritten."""
    absolute = os.path.abspath(path)
    try:
        st = os.stat(absolute)
    except OSError:
        return [absolute, "missing"]
    return [absolute, os.path.realpath(absolute), st.st_size, st.st_mtime_ns, st.st_ctime_ns,
            st.st_ino, st.st_dev]


def _key(name: str, path: str) -> str:
    text = json.dumps([_environment(), name, file_identity(path)])
    return hashlib.sha256(text.encode()).hexdigest()


def _read_memo(directory: Path) -> Dict[str, Dict[str, str]]:
    """The memo's parts, or {} where it is absent, unreadable or malformed."""
    try:  # (a memo that is not signed as its folder's entries are is not read)
        data = json.loads(_memo_keyring(directory).open(memo_path(directory).read_bytes())[0])
        if data.get("format") != _MEMO_FORMAT:
            return {}
        parts = data["parts"]
        if all(isinstance(keys, dict) and all(isinstance(v, str) for v in keys.values())
               for keys in parts.values()):
            return parts
    except Exception:
        log.debug("the toolchain memo in %s is unreadable; asking the tools again", directory, exc_info=True)
    return {}


def _write_memo(directory: Path, name: str, key: Optional[str], value: Optional[str],
                drop: Optional[str] = None):
    """Record `value` for `key` (and forget `drop`); a write that fails is skipped."""
    parts = _read_memo(directory)
    keys = parts.setdefault(name, {})
    keys.pop(drop, None)
    if key is not None and value is not None:
        keys.pop(key, None)
        keys[key] = value
    while len(keys) > _MEMO_KEYS_PER_PART:
        keys.pop(next(iter(keys)))
    from ..store.fsutil import write_atomically

    data = _memo_keyring(directory).sign(json.dumps({"format": _MEMO_FORMAT, "parts": parts},
                                                    sort_keys=True).encode())
    try:
        write_atomically(memo_path(directory), data, ".tmp-toolchain-")
    except OSError:
        pass


def _same_file(a: Optional[str], b: Optional[str]) -> bool:
    return a is not None and b is not None and os.path.realpath(a) == os.path.realpath(b)


def _probe(name: str, directory: Optional[Path], path: Optional[str], key: Optional[str]) -> str:
    """Ask the tool, and remember the answer where it is known to be about the
    file that was located (the probe used that very file, unchanged)."""
    part = _PARTS[name]
    require()  # (a missing toolchain said as such, not as the probe's failure deep in numba-cuda)
    probes[name] += 1
    value = part.probe()
    if directory is not None and key is not None:
        try:
            used = part.used()
        except Exception:
            log.debug("could not tell which %s file is in use", name, exc_info=True)
            used = None
        if _same_file(used, path) and _key(name, path) == key \
                and _read_memo(directory).get(name, {}).get(key) != value:
            _write_memo(directory, name, key, value)
    return value


def _part(name: str, directory=None) -> str:
    """This process's value of one part: asked once, or read from the memo in
    `directory` (None: no memo, always ask)."""
    with _lock:
        value = _values.get(name)
        if value is not None:
            return value
        directory = None if directory is None else Path(directory)
        path = key = None
        if directory is not None:
            path = _PARTS[name].locate()
            if path is not None:
                key = _key(name, path)
                if directory not in _memos:
                    _memos[directory] = _read_memo(directory)
                value = _memos[directory].get(name, {}).get(key)
                if value is not None:
                    memo_reads[name] += 1
                    _unconfirmed[name] = (directory, key)
        if value is None:
            value = _probe(name, directory, path, key)
        _values[name] = value
        return value


def _stage_parts(stage: str) -> Tuple[str, ...]:
    """The libraries of `stage`'s fingerprint (the tools its spec names that are parts)."""
    spec = STAGE_SPEC.get(stage)
    return tuple(tool for tool in spec.tools if tool in _PARTS) if spec is not None else ()


def confirm(stage: str) -> None:
    """Before `stage` runs in this process: check the parts of its fingerprint
    that came from the memo against the tools it is about to use (loading
    them, which the stage does anyway).  Raises `ToolchainChanged` where one
    differs, after taking the new value; nothing was compiled yet."""
    changed = []
    with _lock:
        for name in _stage_parts(stage):
            if name not in _unconfirmed:
                continue
            directory, old_key = _unconfirmed.pop(name)
            path = _PARTS[name].locate()
            key = _key(name, path) if path is not None else None
            value = _probe(name, directory, path, key)
            if value != _values[name]:
                changed.append(f"{name} {_values[name][:16]} -> {value[:16]}")
                _values[name] = value
                if key != old_key:  # the file was replaced: its old entry is of no use
                    _write_memo(directory, name, None, None, drop=old_key)
    if changed:
        raise ToolchainChanged(
            f"the toolchain changed on disk while this process ran ({'; '.join(changed)}); "
            "compile again to use the new one")


def forget() -> None:
    """Drop this process's values (for tests): the next use asks or reads the memo again."""
    global _toolchain_found
    with _lock:
        _values.clear()
        _unconfirmed.clear()
        _memos.clear()
        _toolchain_found = False
    _environment.cache_clear()
    _cudadevrt_location.cache_clear()
    cudadevrt.cache_clear()
    numba_compat.pin_libdevice(None)


def supported_archs(directory=None) -> Tuple[Tuple[int, int], ...]:
    """The compute capabilities NVRTC compiles for, as (major, minor)."""
    text = _part("nvrtc archs", directory)
    return tuple(tuple(int(x) for x in cc.split(".")) for cc in text.split())


# The library parts a stage's token may name (`keys.stagespec.StageSpec.tools`), each
# by its version and digest (remembered in a disk tier's folder, `_part`), or
# by their first 16 characters; a tool that is neither these nor python or the
# CUDA major is a package, named by its version.
_PART_LENGTHS: Dict[str, Optional[int]] = {"libnvvm": None, "libdevice": 16, "nvjitlink": None, "cudadevrt": 16,
                                           "nvrtc": None, "nvfatbin": None}


def _tool(tool: str, directory) -> str:
    if tool == "python":
        return platform.python_implementation() + " " + platform.python_version()
    if tool == "cuda":
        return str(cuda_major())
    if tool in _PART_LENGTHS:
        return _part(tool, directory)[:_PART_LENGTHS[tool]]
    return _version(tool)


def stage_toolchain(stage: str, directory=None, chain: Optional[Chain] = None) -> dict:
    """The tool versions `stage` runs with in `chain` (a backend's; None:
    numba-cuda's), as its spec and the chain declare them, as a dict (learned
    once per process; `directory`: a disk tier's folder, where they are
    remembered between processes)."""
    return tool_versions(stage_tools(stage, chain), directory)


@memos.cached("toolchain.stage_tools", maxsize=256)
def stage_tools(stage: str, chain: Optional[Chain] = None) -> Tuple[str, ...]:
    """The tools `stage`'s token names in `chain` (None: numba-cuda's)."""
    spec = STAGE_SPEC.get(stage)
    if spec is None:
        raise ValueError(f"unknown stage {stage!r}")
    chain = chain or DEFAULT_CHAIN
    return chain.tools_of(stage) if stage in chain.stages else spec.tools


def tool_versions(tools, directory=None) -> dict:
    """{tool: its version} for each of `tools` (a stored entry's are checked
    against these: `codec.decode`)."""
    return {tool: _tool(tool, directory) for tool in tools}


def toolchain_component(stage: str, directory=None, chain: Optional[Chain] = None) -> Component:
    return _versions_component(tuple(stage_toolchain(stage, directory, chain).items()))


@memos.cached("toolchain._versions_component", maxsize=256)
def _versions_component(versions: Tuple[Tuple[str, str], ...]) -> Component:
    return component(dict(versions), " ".join(f"{k} {v}" for k, v in versions))


def numba_settings(reload: bool = True) -> dict:
    """numba's current values of the settings that lowering reads.

    Reloads numba's configuration first (unless `reload` is False), as each
    numba compile does, so the values are the ones the next compile will
    use.  numba's reload reads its environment variables and its config file
    and changes nothing unless they changed: it is skipped while they are
    as at the last reload (a set of values and a stat, not a reparse).
    """
    from numba.cuda.core import config

    global _numba_inputs
    if reload:
        seen = _numba_config_inputs()
        if seen != _numba_inputs:
            config.reload_config()
            _numba_inputs = seen
    if not hasattr(config, "CUDA_DEBUG_POLY"):  # (set where numba-cuda's debuginfo is first imported)
        try:
            importlib.import_module("numba.cuda.debuginfo")
        except Exception:  # numba's simulator: nothing is lowered
            log.debug("numba-cuda's debuginfo could not be imported", exc_info=True)
    return {name: _plain(getattr(config, name, None)) for name in SETTINGS_READ_BY_LOWERING}


_numba_inputs = None


def _numba_config_inputs():
    """What numba's `reload_config` reads: its NUMBA_* environment variables
    and its config file (.numba_config.yaml in the working directory)."""
    data = getattr(os.environ, "_data", None)
    if isinstance(data, dict) and data and isinstance(next(iter(data)), bytes):
        variables = tuple(sorted((k, v) for k, v in data.items() if k[:6] == b"NUMBA_"))
    else:
        variables = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("NUMBA_")))
    try:
        info = os.stat(".numba_config.yaml")
        config_file = (os.path.abspath(".numba_config.yaml"), info.st_size, info.st_mtime_ns, info.st_ino)
    except OSError:
        config_file = None
    return variables, config_file


def _plain(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
