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
editing a linked file relinks the cubin and rebuilds nothing else.

A ``.cu`` source's digest covers everything NVRTC reads compiling it, and its
NVRTC output is used only where that is still what it reads.  NVRTC 12.9
cannot say what it read (it has no ``-M``/``-MD``: those options are refused),
and headers handed to it in memory are matched by spelling alone (no folders,
so two ``b.h`` of different folders cannot both be given, and
``#include_next`` fails), so neither is used.  Instead `reads` finds where
NVRTC's preprocessor finds each include, by its rules (measured: see `_Scan`),
under numba-cuda's exact options (numba names a file by its basename, so a
quoted include is looked for in the working directory, not beside the file,
then in numba's folders and ``NUMBA_CUDA_NVRTC_EXTRA_SEARCH_PATHS``): comments
and line splices are removed first, macros naming a header are expanded by
every definition the files give, every branch of a conditional is followed
(hashing a header NVRTC skips is sound, it only costs reuse), and an include
whose name cannot be told is refused by name.  The digest hashes the
options, NVRTC's version, where each include resolved (so a header that
appears or goes where it is looked for first is seen), and the content of
every file read outside the toolkit's folders, read again on every call (an
edit that keeps size and mtime is seen); files are named relative to their
search folder or the working directory, never by where the machine keeps
them, so the same files give the same digest in every checkout, venv and
working directory, as entries shared between processes need.  The toolkit's folders (numba's, the
CUDA toolkit's, CCCL's) are not scanned (CCCL builds names out of
function-like macros): the versions of the packages that install them cover
them.  `compile_cu` finds the reads again before and after NVRTC runs and
refuses code whose reads are not what `LinkInput.digest` hashed; its
process-wide memo keys on that digest, so it cannot serve code compiled from
other headers.
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

from ..backends.numba_cuda import numba_compat
from ..errors import SnapshotChanged, UnsupportedKernelError
from ..importing import front_end_module
from .. import memos

# file extension -> kind; the kinds are cuda.core ObjectCode's
KINDS = {"cu": "cu", "ptx": "ptx", "ltoir": "ltoir", "cubin": "cubin", "fatbin": "fatbin",
         "o": "object", "a": "library", "lib": "library"}



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
        return LinkInput(path.name, kind, data, _digest(kind, data, path.name))
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
    return LinkInput(str(item.name), kind, bytes(data), _digest(kind, bytes(data), str(item.name)))


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


def _digest(kind: str, data: bytes, name: str) -> str:
    h = hashlib.sha256()
    h.update(kind.encode() + b"\0" + hashlib.sha256(data).digest())
    if kind == "cu":
        h.update(reads(data, name, _nvrtc_options(None, False)).digest.encode())
    return h.hexdigest()


# ---------------------------------------------------------------------------
# What NVRTC reads for a .cu source


@dataclasses.dataclass(frozen=True)
class Reads:
    """What NVRTC reads compiling one source with given options: `digest`
    covers the options, the toolkit's versions, where every include (and
    ``__has_include``) resolves, every folder it was looked for in first
    (`probes`), and the content of every file read outside the toolkit's
    folders (`files`: path -> sha256)."""

    digest: str
    probes: Tuple[Tuple[str, bool], ...]
    files: Tuple[Tuple[str, str], ...]


_reads_memo: "OrderedDict[Tuple, Reads]" = memos.memo("toolchain.linking._reads_memo", OrderedDict())
_READS_LIMIT = 256


def reads(source: bytes, name: str, options: Tuple[bytes, ...]) -> Reads:
    """What NVRTC reads for `source`, named `name`, under `options` (numba's,
    less the target: see `_nvrtc_options`), in the working directory.  Where
    each include resolves is remembered, keyed by the source, its name, the
    options and the working directory, and found again only when one of the
    places it was looked for gains or loses a file or a header read changes;
    the headers' contents are hashed on every call, so that an edit that
    keeps a file's size and mtime is seen."""
    cwd = os.getcwd()
    key = (hashlib.sha256(source).digest(), name, options, cwd)
    with _compiled_lock:
        memo = _reads_memo.get(key)
    if memo is not None and all(os.path.isfile(path) == found for path, found in memo.probes):
        if all(_content_digest(path) == digest for path, digest in memo.files):
            return memo
    found = _Scan(source, name, options, cwd).run()
    with _compiled_lock:
        _reads_memo[key] = found
        _reads_memo.move_to_end(key)
        while len(_reads_memo) > _READS_LIMIT:
            _reads_memo.popitem(last=False)
    return found


def _content_digest(path: str) -> Optional[str]:
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None


# Comments (replaced by a space, as the preprocessor does) and the literals
# that may hold what looks like one (kept).
_LEXEME = re.compile(
    rb'(?P<raw>R"(?P<delim>[^()\\ \t\n"]{0,16})\((?:.|\n)*?\)(?P=delim)")'
    rb'|(?P<string>"(?:\\.|[^"\\\n])*")|(?P<char>\'(?:\\.|[^\'\\\n])*\')'
    rb'|(?P<comment>//[^\n]*|/\*(?:.|\n)*?\*/)')
_DIRECTIVE = re.compile(rb'^[ \t]*#[ \t]*(include_next|include|import|define|if|elif|elifdef|elifndef)\b(.*)$',
                        re.M)
_HAS_INCLUDE = re.compile(rb'\b__has_include(_next)?\s*\(\s*("[^"\n]*"|<[^>\n]*>|[A-Za-z_]\w*)\s*\)')
_DEFINITION = re.compile(rb'\s*([A-Za-z_]\w*)(\()?\s*(.*)$')
_NAME = re.compile(rb'[A-Za-z_]\w*')


def _directives(text: bytes) -> Tuple[list, list]:
    """The includes of a file, ``(directive, argument)``, and its object-like
    macro definitions, ``(name, body)``, in every branch of its conditionals
    (more than NVRTC reads is sound: it only costs reuse).  Function-like
    macros are recorded with a None body."""
    text = re.sub(rb"\\\r?\n", b"", text)
    text = _LEXEME.sub(lambda m: b" " if m.group("comment") else m.group(0), text)
    includes, defines = [], []
    for directive, rest in _DIRECTIVE.findall(text):
        if directive in (b"include", b"include_next", b"import"):
            includes.append((b"include_next" if directive == b"include_next" else b"include", rest.strip()))
            continue
        if directive == b"define":
            m = _DEFINITION.match(rest)
            if m is not None:
                defines.append((m.group(1), None if m.group(2) else m.group(3).strip()))
        # (a macro may hold one, to be tested later: every one is kept)
        includes.extend((b"include_next" if nxt else b"include", arg) for nxt, arg in _HAS_INCLUDE.findall(rest))
    return includes, defines


@dataclasses.dataclass(frozen=True)
class _File:
    path: str  # as NVRTC opens it (relative to the working directory, or absolute)
    found: Optional[int]  # index of the search folder it was found in (None: beside its includer)
    primary: bool = False


class _Scan:
    """Where NVRTC's preprocessor finds each include, found as it finds them
    (measured against NVRTC 12.9, see tests/test_nvrtc_hermetic.py):

    * ``"h"``: the includer's own folder (for the source, the folder of its
      *name*: numba names a file by its basename, so the working directory),
      then the ``--include-path`` folders in order; the folders of the files
      further up the include stack are not searched;
    * ``<h>``: the ``--include-path`` folders only;
    * ``#include_next``: the search folders after the one the includer was
      found in; in the source itself it is an ``#include``; for a header found
      beside its includer both readings are kept (the union is sound);
    * an absolute name: itself.

    Files in numba's own search folders (numba's headers, the CUDA toolkit's,
    CCCL's) are the toolkit's: they are not scanned (CCCL builds include names
    out of function-like macros), and their content is covered by the
    versions of the packages that install them and NVRTC's.
    """

    def __init__(self, source: bytes, name: str, options: Tuple[bytes, ...], cwd: str):
        self.source, self.name, self.options, self.cwd = source, name, options, cwd
        self.search = [_option_value(o).decode() for o in options if _option_value(o) is not None]
        self.toolkit = [os.path.realpath(folder) for folder in _toolkit_folders(self.search)]
        self.probes: dict = {}

    def run(self) -> Reads:
        defines: dict = {}
        while True:
            records, files, seen, unresolved = set(), {}, set(), []
            found_defines: dict = {}
            pending = [(_File(self.name, None, primary=True), self.source)]
            while pending:
                file, text = pending.pop()
                includes, definitions = _directives(text)
                for macro, body in definitions:
                    found_defines.setdefault(macro, set()).add(body)
                for directive, argument in includes:
                    spellings = self._spellings(argument, defines)
                    if spellings is None:
                        unresolved.append((file.path, directive, argument))
                        continue
                    for angled, spelled in spellings:
                        for candidates in self._candidates(file, directive, angled, spelled):
                            hit = self._first(candidates)
                            records.add((self._label(file.path), directive.decode(), angled, spelled,
                                         None if hit is None else self._label(hit.path)))
                            if hit is None or (hit.path, hit.found) in seen:
                                continue
                            seen.add((hit.path, hit.found))
                            if self._in_toolkit(hit.path):
                                continue
                            try:
                                with open(self._absolute(hit.path), "rb") as handle:
                                    content = handle.read()
                            except OSError as exc:
                                raise UnsupportedKernelError(
                                    f"{self.name} includes {hit.path}, which cannot be read: {exc.strerror}") from None
                            files[self._absolute(hit.path)] = hashlib.sha256(content).hexdigest()
                            pending.append((hit, content))
            if found_defines == defines:
                break
            defines = found_defines
        if unresolved:
            path, directive, argument = unresolved[0]
            raise UnsupportedKernelError(
                f"{path}: cannot tell which header '#{directive.decode()} {argument.decode(errors='replace')}' "
                "reads (a macro the .cu source and its headers do not define as a \"name\" or <name>), so "
                "the cache cannot key its NVRTC compile on it; spell the header's name out")
        h = hashlib.sha256()
        h.update(repr((self._portable_options(), nvrtc_identity(), _toolkit_versions())).encode())
        for record in sorted(records, key=repr):
            h.update(repr(record).encode() + b"\0")
        for path, digest in sorted((self._label(path), digest) for path, digest in files.items()):
            h.update(path.encode() + b"\0" + digest.encode() + b"\0")
        return Reads(h.hexdigest(), tuple(sorted(self.probes.items())), tuple(sorted(files.items())))

    def _spellings(self, argument: bytes, defines: dict, depth: int = 0) -> Optional[List[Tuple[bool, str]]]:
        """The names an include's argument can stand for (a macro by every
        definition it has: more than one is sound), or None where that cannot
        be told."""
        argument = argument.strip()
        m = re.match(rb'"([^"\n]*)"\s*$', argument) or re.match(rb'<([^>\n]*)>\s*$', argument)
        if m is not None:
            return [(argument.startswith(b"<"), m.group(1).decode(errors="surrogateescape"))]
        if depth > 32 or _NAME.fullmatch(argument) is None or not defines.get(argument):
            return None
        spellings: List[Tuple[bool, str]] = []
        for body in defines[argument]:
            found = None if body is None else self._spellings(body, defines, depth + 1)
            if found is None:
                return None
            spellings.extend(found)
        return spellings

    def _candidates(self, file: _File, directive: bytes, angled: bool, spelled: str) -> List[List[_File]]:
        """The places NVRTC looks for `spelled`, in order (more than one list
        where its rule is not known exactly: every reading is kept)."""
        if os.path.isabs(spelled):
            return [[_File(spelled, None)]]
        search = [_File(os.path.join(folder, spelled), i) for i, folder in enumerate(self.search)]
        beside = [] if angled else [_File(os.path.join(os.path.dirname(file.path), spelled), None)]
        if directive == b"include" or file.primary:
            return [beside + search]
        if file.found is not None:
            return [search[file.found + 1:]]
        here = os.path.realpath(os.path.dirname(self._absolute(file.path)))
        readings = [search]
        readings.extend(search[i + 1:] for i, folder in enumerate(self.search)
                        if os.path.realpath(self._absolute(folder)) == here)
        return readings

    def _first(self, candidates: List[_File]) -> Optional[_File]:
        for candidate in candidates:
            path = self._absolute(candidate.path)
            found = os.path.isfile(path)
            self.probes[path] = found
            if found:
                return candidate
        return None

    def _absolute(self, path: str) -> str:
        return os.path.join(self.cwd, path)

    def _label(self, path: str) -> str:
        """A file as the digest names it: relative to the search folder it
        lies in (by the folder's place in numba's options), else to the
        working directory, else its absolute path.  What a file holds is
        hashed besides; its place in the machine is not, so that the same
        source and headers give the same digest in every checkout, venv and
        working directory (a disk or shared entry of another process is
        compiled from what it hashed, and checked again, see `compile_cu`)."""
        absolute = os.path.normpath(self._absolute(path))
        for index, folder in enumerate(self._folders):
            if absolute.startswith(folder + os.sep):
                return f"<search {index}>/{os.path.relpath(absolute, folder)}"
        cwd = os.path.normpath(self.cwd)
        if absolute.startswith(cwd + os.sep):
            return f"<cwd>/{os.path.relpath(absolute, cwd)}"
        return absolute

    @functools.cached_property
    def _folders(self) -> List[str]:
        return [os.path.normpath(self._absolute(folder)) for folder in self.search]

    def _portable_options(self) -> Tuple[bytes, ...]:
        """The options with each search folder named by its place (see `_label`)."""
        index = iter(range(len(self.search)))
        return tuple(f"--include-path=<search {next(index)}>".encode() if _option_value(option) is not None
                     else option for option in self.options)

    def _in_toolkit(self, path: str) -> bool:
        real = os.path.realpath(self._absolute(path))
        return any(real.startswith(folder + os.sep) for folder in self.toolkit)


def _option_value(option: bytes) -> Optional[bytes]:
    """The folder of an include-path option, or None for another option."""
    for prefix in (b"--include-path=", b"-I"):
        if option.startswith(prefix):
            return option[len(prefix):]
    return None


def _toolkit_folders(search: List[str]) -> List[str]:
    """The search folders numba adds of its own (all but the extra ones)."""
    from numba.cuda.core import config

    extra = set(p for p in (getattr(config, "CUDA_NVRTC_EXTRA_SEARCH_PATHS", "") or "").split(":") if p)
    return [folder for folder in search if folder not in extra]


# The packages that install the toolkit's headers NVRTC reads
_TOOLKIT_PACKAGES = ("numba-cuda", "cuda-bindings", "nvidia-cuda-nvrtc-cu12", "nvidia-cuda-runtime-cu12",
                     "nvidia-cuda-cccl-cu12", "nvidia-cuda-nvrtc", "nvidia-cuda-runtime", "nvidia-cuda-cccl",
                     "cuda-toolkit")


@memos.cached("toolchain.linking._toolkit_versions", maxsize=1)
def _toolkit_versions() -> Tuple[Tuple[str, str], ...]:
    from importlib import metadata

    versions = []
    for dist in _TOOLKIT_PACKAGES:
        try:
            versions.append((dist, metadata.version(dist)))
        except metadata.PackageNotFoundError:
            versions.append((dist, "absent"))
    return tuple(versions)


_options_memo: dict = memos.memo("toolchain.linking._options_memo", {})


def _nvrtc_options(cc: Optional[Tuple[int, int]], lto: bool) -> Tuple[bytes, ...]:
    """numba-cuda's exact NVRTC options for target `cc`; for None, those that
    decide what NVRTC reads: the same less the target and the output kind
    (they change what the preprocessor defines, not where it looks, and the
    scan reads every branch)."""
    from numba.cuda.core import config

    key = (cc, lto, getattr(config, "CUDA_NVRTC_EXTRA_SEARCH_PATHS", ""))
    options = _options_memo.get(key)
    if options is None:
        if cc is None:
            from numba.cuda.cudadrv import nvrtc as numba_nvrtc

            everything = _nvrtc_options(min(numba_nvrtc.get_supported_ccs()), False)
            options = tuple(o for o in everything if not o.startswith((b"-arch", b"--gpu-architecture")))
        else:
            options = tuple(_capture(cc, lto).options_bytes)
        _options_memo[key] = options
    return options


@memos.cached("toolchain.linking.nvrtc_identity", maxsize=1)
def nvrtc_identity() -> Tuple:
    """NVRTC's version, as the installed front end (numba-cuda's, else
    numba-cuda-mlir's copy of it) loads NVRTC."""
    return (tuple(front_end_module("cudadrv.nvrtc")._get_nvrtc_version()),)


# ---------------------------------------------------------------------------
# numba's own helpers


@memos.cached("toolchain.linking.reshape_helper", maxsize=1)
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
    return LinkInput(str(item.name), "cu", source.encode(), _digest("cu", source.encode(), str(item.name)))


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


_compiled: "OrderedDict[Tuple, bytes]" = memos.memo("toolchain.linking._compiled", OrderedDict())
_compiled_lock = threading.RLock()
_COMPILED_LIMIT = 64


def compile_cu(link: LinkInput, cc: Tuple[int, int], lto: bool) -> bytes:
    """A .cu source compiled by NVRTC as numba-cuda compiles it (relocatable,
    with numba's include paths), memoised by what NVRTC reads, target and
    output.  What it reads is found again first, and again after the compile:
    where it is not what `link.digest` hashed (a header changed, appeared or
    went since the source was read, or during the compile), nothing is
    returned, since the code would not be what its token says."""
    before = _digest("cu", link.data, link.name)
    if before != link.digest:
        raise _changed(link)
    key = (before, tuple(cc), lto)
    with _compiled_lock:
        if key in _compiled:
            _compiled.move_to_end(key)
            return _compiled[key]
    data = _nvrtc(link.data, link.name, cc, lto)
    if _digest("cu", link.data, link.name) != before:
        raise _changed(link)
    with _compiled_lock:
        _compiled[key] = data
        while len(_compiled) > _COMPILED_LIMIT:
            _compiled.popitem(last=False)
    return data


class LinkedSourceChanged(SnapshotChanged, UnsupportedKernelError):
    """What NVRTC reads for a linked .cu source is not what its digest hashed:
    the compile starts again from a new read of it (`SnapshotChanged`); an
    audit of a hit built from the earlier headers has nothing to compare."""

    def __init__(self, name: str, message: str):
        super().__init__(message)
        self.name = name  # the linked source's


def _changed(link: LinkInput) -> LinkedSourceChanged:
    return LinkedSourceChanged(link.name,
        f"{link.name}, or a header it includes, changed while the kernel that links it compiled "
        "(a header was edited, or one appeared or went on NVRTC's search path)")


class _CapturedProgram:
    """Stands in for cuda.core's Program inside numba's nvrtc.compile, to take
    numba's exact NVRTC options (cuda.core asks the driver before it returns
    PTX, and there may be no driver)."""

    def __init__(self, source, language, options):
        self.source, self.options = source, options

    @property
    def options_bytes(self) -> List[bytes]:
        return list(self.options.as_bytes("nvrtc")) if hasattr(self.options, "as_bytes") else []

    def compile(self, target, logs=None):
        raise _Captured(self)


class _Captured(Exception):
    def __init__(self, program):
        super().__init__()
        self.program = program


def _capture(cc, lto: bool, source: bytes = b"", name: str = "<capture>") -> _CapturedProgram:
    """What numba-cuda's nvrtc.compile would hand NVRTC for `source`."""
    from numba.cuda.cudadrv import nvrtc as numba_nvrtc

    # (numba's module global is swapped for the capture: one at a time)
    with _compiled_lock, numba_compat.nvrtc_program_captured(_CapturedProgram):
        try:
            numba_nvrtc.compile(source, name, cc, ltoir=lto)
            raise RuntimeError("numba-cuda's nvrtc.compile did not build a program")
        except _Captured as captured:
            return captured.program


def _nvrtc(source: bytes, name: str, cc, lto: bool) -> bytes:
    """NVRTC's PTX (or LTO-IR) for `source`, with numba-cuda's options."""
    from cuda.bindings import nvrtc as api

    program = _capture(cc, lto, source, name)
    options = program.options_bytes
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
