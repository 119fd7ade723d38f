"""Code a kernel links besides its own: numba-cuda's helpers and external code.

numba-cuda links more than the kernel's PTX when it loads a kernel:

* CUDA C++ helpers of its own (the float16 shims, as in-memory `.cu` sources;
  `reshape_funcs.cu` when the code calls ``numba_attempt_nocopy_reshape``);
* the files given to ``cuda.declare_device(..., link=[...])`` for external
  device functions: ``.cu`` sources (compiled with NVRTC), ``.ptx``,
  ``.ltoir``, ``.cubin``, ``.fatbin``, ``.o`` and ``.a`` files, or numba's
  in-memory `LinkableCode` objects.

Here each is read once into a `LinkInput` (its bytes and a content digest), so
the cubin stage links exactly what was hashed.  numba's own helpers follow
from the kernel's code: they travel with the llvm and ptx artifacts.  What
external functions link does not change the kernel's IR or PTX: it is read
when the kernel's sources are identified, and keys the cubin stage alone, so
editing a linked file relinks the cubin and rebuilds nothing else.  A ``.cu``
source's digest covers the headers it includes (those found beside it, in the
working directory and in numba's search paths; headers of the CUDA toolkit
are covered by the NVRTC version), and its NVRTC output is memoised by that
digest, the target and the NVRTC version.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import re
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Iterable, List, Optional, Tuple

from ..errors import UnsupportedKernelError

# file extension -> kind; the kinds are cuda.core ObjectCode's
KINDS = {"cu": "cu", "ptx": "ptx", "ltoir": "ltoir", "cubin": "cubin", "fatbin": "fatbin",
         "o": "object", "a": "library", "lib": "library"}

_INCLUDE = re.compile(rb'^\s*#\s*include\s*[<"]([^">]+)[">]', re.M)


@dataclasses.dataclass(frozen=True)
class LinkInput:
    """One input of the link: what it is called, its kind, its bytes, and
    the digest of everything it depends on (for a .cu, its headers too)."""

    name: str
    kind: str
    data: bytes = dataclasses.field(repr=False)
    digest: str

    def describe(self) -> dict:
        return {"name": self.name, "kind": self.kind, "digest": self.digest}


def canonical(inputs: Iterable[LinkInput]) -> Tuple[LinkInput, ...]:
    """`inputs` without duplicates (by content), in digest order: what a link
    is given, whichever way its inputs were found."""
    by_digest = {link.digest: link for link in inputs}
    return tuple(by_digest[d] for d in sorted(by_digest))


def read(item, origin: str = "") -> LinkInput:
    """A path (str or PathLike) or numba `LinkableCode` object as a `LinkInput`."""
    if isinstance(item, (str, os.PathLike)):
        path = Path(item)
        kind = KINDS.get(path.suffix.lstrip(".").lower())
        if kind is None:
            raise UnsupportedKernelError(
                f"{origin}cannot link {path.name}: numba-cuda links files ending in "
                f"{', '.join('.' + ext for ext in KINDS)}"
            )
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise UnsupportedKernelError(f"{origin}cannot read the linked file {path}: {exc.strerror}") from None
        return LinkInput(path.name, kind, data, _digest(kind, data, path.parent))
    kind = getattr(item, "kind", None)
    data = getattr(item, "data", None)
    if kind is None or data is None:
        raise UnsupportedKernelError(
            f"{origin}cannot link a {type(item).__name__}: give a file path or one of numba's "
            "LinkableCode objects (cuda.CUSource, cuda.PTXSource, ...)"
        )
    if any(not _numbas_own(callback) for callback in
           (getattr(item, "setup_callback", None), getattr(item, "teardown_callback", None))):
        raise UnsupportedKernelError(
            f"{origin}links {item.name}, which has setup or teardown callbacks; the staged cache "
            "cannot run them (they run at module load on the GPU); link the code without them"
        )
    if isinstance(data, str):
        data = data.encode()
    kind = "cu" if kind == "cu" else _kind_name(kind)
    return LinkInput(str(item.name), kind, bytes(data), _digest(kind, bytes(data), None))


def _numbas_own(callback) -> bool:
    """No callback, or one of numba-cuda's own (the float16 shims warn at load
    time when LTO is off; nothing the code depends on)."""
    return callback is None or (getattr(callback, "__module__", "") or "").startswith("numba.cuda.")


def _kind_name(kind) -> str:
    """numba's kind constants (cuda.core's names or driver enums) as KINDS values."""
    from numba.cuda.cudadrv.linkable_code import FILE_EXTENSION_MAP

    for ext, value in FILE_EXTENSION_MAP.items():
        if value == kind and ext in KINDS:
            return KINDS[ext]
    raise UnsupportedKernelError(f"cannot link code of kind {kind!r}")


def _digest(kind: str, data: bytes, folder: Optional[Path]) -> str:
    h = hashlib.sha256()
    h.update(kind.encode() + b"\0" + hashlib.sha256(data).digest())
    if kind == "cu":
        for name, content in sorted(_headers(data, folder).items()):
            h.update(name.encode() + b"\0" + hashlib.sha256(content).digest())
        from numba.cuda.core import config

        h.update(repr((nvrtc_identity(), getattr(config, "CUDA_NVRTC_EXTRA_SEARCH_PATHS", ""))).encode())
    return h.hexdigest()


def _search_paths(folder: Optional[Path]) -> List[Path]:
    """Where a .cu source's includes are looked for, the toolkit's own left out
    (the NVRTC version covers them)."""
    from numba.cuda.core import config

    paths = [] if folder is None else [folder]
    paths.append(Path.cwd())
    extra = getattr(config, "CUDA_NVRTC_EXTRA_SEARCH_PATHS", "") or ""
    paths.extend(Path(p) for p in extra.split(":") if p)
    import numba.cuda

    root = Path(numba.cuda.__file__).parent
    paths.extend([root / "include" / str(nvrtc_identity()[0][0]), root / "memory_management"])
    return paths


def _headers(source: bytes, folder: Optional[Path]) -> dict:
    """Every header `source` includes, transitively, that is found on the
    search paths: {path: content}."""
    found, pending = {}, [(source, folder)]
    search = _search_paths(folder)
    while pending:
        text, here = pending.pop()
        for name in _INCLUDE.findall(text):
            name = name.decode(errors="replace")
            for base in ([here] if here else []) + search:
                candidate = base / name
                if candidate.is_file():
                    key = str(candidate.resolve())
                    if key not in found:
                        found[key] = candidate.read_bytes()
                        pending.append((found[key], candidate.parent))
                    break
    return found


@functools.lru_cache(maxsize=1)
def nvrtc_identity() -> Tuple:
    from numba.cuda.cudadrv import nvrtc

    return (tuple(nvrtc._get_nvrtc_version()),)


# ---------------------------------------------------------------------------
# numba's own helpers


@functools.lru_cache(maxsize=1)
def reshape_helper() -> LinkInput:
    """numba-cuda's ``reshape_funcs.cu`` (linked when the code reshapes arrays)."""
    import numba.cuda

    return read(Path(numba.cuda.__file__).parent / "reshape_funcs.cu")


def reshape_functions() -> Tuple[str, ...]:
    from numba.cuda.dispatcher import reshape_funcs

    return tuple(reshape_funcs)


def _numba_shims():
    """numba-cuda's shim sources (float16, bfloat16, fp8): one process-wide
    source each, which grows with every shim any kernel has used."""
    shims = []
    for module in ("cuda_fp16", "cuda_bf16", "cuda_fp8"):
        try:
            shims.append(__import__(f"numba.cuda._internal.{module}", fromlist=["shim_obj"]).shim_obj)
        except (ImportError, AttributeError):
            pass
    return shims


_SHIM_DEFINITION = re.compile(r'(?=^[ \t]*extern "C" __device__)', re.M)
_DEFINED_NAME = re.compile(r'extern "C" __device__\s+[\w:<>\s\*&]*?\b(\w+)\s*\(')


def _pruned_shim(item, code: str) -> LinkInput:
    """A numba shim source cut down to the shims `code` calls: what a kernel
    links must not depend on what other kernels compiled before it."""
    text = item.data if isinstance(item.data, str) else bytes(item.data).decode()
    prefix, *definitions = _SHIM_DEFINITION.split(text)
    kept = {d.strip() + "\n" for d in definitions
            if (m := _DEFINED_NAME.search(d)) is not None and m.group(1) in code}
    source = prefix.strip() + "\n" + "".join(sorted(kept, key=lambda d: _DEFINED_NAME.search(d).group(1)))
    return LinkInput(str(item.name), "cu", source.encode(), _digest("cu", source.encode(), None))


def item_key(item):
    """What tells one link= item from another (a path, or the object itself)."""
    if isinstance(item, (str, os.PathLike)):
        return ("path", os.fspath(item))
    return ("object", id(item))


def library_inputs(library, code: str = "", origin: str = "", external=frozenset()) -> Tuple[LinkInput, ...]:
    """What numba would link with `library` (its files, and its linked
    libraries'), read, in a canonical order, leaving out the `external` items
    (`item_key`s: what the kernel's own external functions link, which the
    cubin stage links and keys itself).  `code` is the kernel's NVVM IR:
    numba's shared shim sources are cut down to what it calls."""
    shims = [id(obj) for obj in _numba_shims()]
    return canonical(_pruned_shim(item, code) if id(item) in shims else read(item, origin)
                     for item in getattr(library, "_linking_files", ()) if item_key(item) not in external)


def extern_link_items(extfn) -> Tuple:
    """The link= items and cooperative flag given to ``cuda.declare_device``."""
    from numba.cuda.descriptor import cuda_target

    selector = cuda_target.target_context._defns.get(extfn)
    items, cooperative = [], False
    for _, impl in getattr(selector, "versions", ()):
        for lib in getattr(impl, "libs", ()):
            items.extend(getattr(lib, "_linking_files", ()))
            cooperative = cooperative or bool(getattr(lib, "use_cooperative", False))
    return tuple(items), cooperative


# ---------------------------------------------------------------------------
# Linking


_compiled: "OrderedDict[Tuple, bytes]" = OrderedDict()
_compiled_lock = threading.Lock()
_COMPILED_LIMIT = 64


def compile_cu(link: LinkInput, cc: Tuple[int, int], lto: bool) -> bytes:
    """A .cu source compiled by NVRTC as numba-cuda compiles it (relocatable,
    with numba's include paths), memoised by digest, target and output."""
    key = (link.digest, tuple(cc), lto)
    with _compiled_lock:
        if key in _compiled:
            _compiled.move_to_end(key)
            return _compiled[key]
    data = _nvrtc(link.data, link.name, cc, lto)
    with _compiled_lock:
        _compiled[key] = data
        while len(_compiled) > _COMPILED_LIMIT:
            _compiled.popitem(last=False)
    return data


class _CapturedProgram:
    """Stands in for cuda.core's Program inside numba's nvrtc.compile, to take
    numba's exact NVRTC options (cuda.core asks the driver before it returns
    PTX, and there may be no driver)."""

    def __init__(self, source, language, options):
        self.source, self.options = source, options

    def compile(self, target, logs=None):
        raise _Captured(self)


class _Captured(Exception):
    def __init__(self, program):
        super().__init__()
        self.program = program


def _nvrtc(source: bytes, name: str, cc, lto: bool) -> bytes:
    """NVRTC's PTX (or LTO-IR) for `source`, with numba-cuda's options."""
    from cuda.bindings import nvrtc as api
    from numba.cuda.cudadrv import nvrtc as numba_nvrtc

    with _compiled_lock:  # numba's module global is swapped for the capture
        saved = numba_nvrtc.Program
        numba_nvrtc.Program = _CapturedProgram
        try:
            numba_nvrtc.compile(source, name, cc, ltoir=lto)
            raise RuntimeError("numba-cuda's nvrtc.compile did not build a program")
        except _Captured as captured:
            program = captured.program
        finally:
            numba_nvrtc.Program = saved
    options = program.options.as_bytes("nvrtc") if hasattr(program.options, "as_bytes") else []
    if lto and b"-dlto" not in options and b"--dlto" not in options:
        options = list(options) + [b"-dlto"]

    def check(result):
        err, *rest = result
        if err != api.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"NVRTC: {api.nvrtcGetErrorString(err)[1].decode()}")
        return rest[0] if rest else None

    src = program.source.encode() if isinstance(program.source, str) else program.source
    prog = check(api.nvrtcCreateProgram(src, name.encode(), 0, [], []))
    try:
        err, = api.nvrtcCompileProgram(prog, len(options), list(options))
        if err != api.nvrtcResult.NVRTC_SUCCESS:
            size = check(api.nvrtcGetProgramLogSize(prog))
            log = b" " * size
            check(api.nvrtcGetProgramLog(prog, log))
            raise UnsupportedKernelError(
                f"NVRTC could not compile {name}:\n{log.decode(errors='replace').strip()}")
        get_size, get = (api.nvrtcGetLTOIRSize, api.nvrtcGetLTOIR) if lto else \
            (api.nvrtcGetPTXSize, api.nvrtcGetPTX)
        out = b" " * check(get_size(prog))
        check(get(prog, out))
        if not lto:
            out = out.rstrip(b"\0")
    finally:
        api.nvrtcDestroyProgram(prog)
    return bytes(out)


def object_codes(inputs: Iterable[LinkInput], cc: Tuple[int, int], lto: bool) -> list:
    """cuda.core ObjectCode objects for the inputs."""
    from cuda.core import ObjectCode

    objects = []
    for link in inputs:
        if link.kind == "cu":
            data = compile_cu(link, cc, lto)
            make = ObjectCode.from_ltoir if lto else ObjectCode.from_ptx
            objects.append(make(data, name=link.name))
        else:
            make = getattr(ObjectCode, f"from_{link.kind}")
            objects.append(make(link.data, name=link.name))
    return objects
