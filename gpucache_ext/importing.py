"""Importing what needs numba-cuda's compiler, and saying why it failed.

The package's lazy names (``from gpucache_ext import Kernel``) and its lazily
imported modules (`lazy_module`: numba-cuda's compiler, which the cache opens
without, as under numba's CUDA simulator) import on first use; a failure is
an ImportError that names its cause, where it happened and any installed
package outside gpucache_ext's requirements, chained to the original.  An
AttributeError must not escape: ``from gpucache_ext import X`` would turn it
into "cannot import name" and hide the cause.
"""

from __future__ import annotations

import importlib
import sys
import types

from . import memos


def import_failure(what: str, module: str, error: BaseException) -> ImportError:
    """The ImportError for `what` (a name or module) whose import of `module`
    raised `error`; its ``lazy_import_cause`` is the first cause (a lazy
    import inside another says that one once)."""
    cause = getattr(error, "lazy_import_cause", error)
    failure = ImportError(_import_failure(what, cause), name=module)
    failure.lazy_import_cause = cause
    return failure


class _LazyModule(types.ModuleType):
    def __init__(self, name: str):
        super().__init__(name)
        self.__dict__["_lazy_name"] = name

    def __getattr__(self, attribute):
        name = self.__dict__["_lazy_name"]
        try:
            module = importlib.import_module(name)
        except Exception as error:
            from .errors import ToolchainMissing

            if isinstance(error, ToolchainMissing):
                raise  # (it says what is missing and what to install; where it was found out does not help)
            failure = import_failure(name, name, error)
            raise failure from failure.lazy_import_cause
        return getattr(module, attribute)


def import_named(where: str, what: str, wrong_form: str):
    """The object `where` names as "module:attribute" (a user's tier, a
    backend, an artifact class), imported now; a ValueError that says what
    was named (`what`) and what went wrong (`wrong_form` where it is not
    "module:attribute") otherwise."""
    module_name, colon, attribute = where.partition(":")
    if not colon or not module_name or not attribute:
        raise ValueError(f"{what} {where!r} {wrong_form}")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"{what} {where!r}: {type(exc).__name__}: {exc}; name an object importable here as "
                         "'module:Class'") from None


def lazy_module(name: str) -> types.ModuleType:
    """`name`, imported when an attribute is first read (numba-cuda's compiler
    cannot be imported under its simulator, nor need it be to read a cache)."""
    return _LazyModule(name)


def _import_failure(what, error):
    import traceback

    frames = traceback.extract_tb(error.__traceback__)
    # where: the innermost module body that was running (the import that failed), else the innermost frame
    where = next((frame for frame in reversed(frames) if frame.name == "<module>"), frames[-1] if frames else None)
    text = f"{what} could not be imported: {type(error).__name__}: {error}"
    if where is not None:
        text += f" (in {where.filename}, line {where.lineno})"
    unmet = _unmet_requirements()
    if unmet:
        text += (". The installed packages do not meet gpucache_ext's requirements: " + "; ".join(unmet)
                 + ". Reinstall gpucache_ext with pip, or install those versions")
    return text


def _unmet_requirements():
    """'numpy 2.5.5 installed, needs >=1.24,<2.5' for each requirement the
    environment breaks: the core requirements, and those of each extra that
    looks installed (every package it names is: numba-cuda's cu12 bounds
    numpy, numba-cuda-mlir's mlir-cu12 does not)."""
    from importlib import metadata

    try:
        from packaging.requirements import Requirement
    except ImportError:  # packaging is not a requirement of ours: without it, say nothing more
        return []
    try:
        requires = [Requirement(line) for line in metadata.requires("gpucache_ext") or []]
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return []

    def installed_version(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    core, extras = [], {}
    for requirement in requires:
        if requirement.name == "gpucache_ext":
            continue  # (an extra naming others)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            core.append(requirement)
            continue
        for extra in _extras_of(requirement):
            if requirement.marker.evaluate({"extra": extra}):  # (not for another platform or Python)
                extras.setdefault(extra, []).append(requirement)
    applying = core + [requirement for wanted in extras.values()
                       if all(installed_version(r.name) is not None for r in wanted) for requirement in wanted]
    unmet = []
    for requirement in dict.fromkeys(applying):
        version = installed_version(requirement.name)
        if version is None:
            unmet.append(f"{requirement.name} is not installed, needs {requirement.specifier or 'any version'}")
        elif not requirement.specifier.contains(version, prereleases=True):
            unmet.append(f"{requirement.name} {version} installed, needs {requirement.specifier}")
    return unmet


def _extras_of(requirement) -> list:
    """The extras a requirement's marker names (``extra == "cu12"``)."""
    import re

    return re.findall(r'extra\s*==\s*["\']([^"\']+)["\']', str(requirement.marker))


# numba-cuda's front end (its typing, its file search, its dispatcher classes), as numba-cuda ships
# it and as numba-cuda-mlir carries a copy of it: an install of either backend alone has one of them.
# (the package installed, the front end's package in it), numba-cuda's first
_FRONT_ENDS = (("numba_cuda", "numba.cuda"), ("numba_cuda_mlir", "numba_cuda_mlir.numba_cuda"))


@memos.cached("importing.installed", maxsize=None)
def installed(package: str) -> bool:
    """Whether top-level `package` ("numba_cuda", "numba_cuda_mlir") can be
    imported here (imported or found; not imported by asking)."""
    import importlib.util

    if package in sys.modules:
        return True
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # (a finder that refuses it: not importable here)
        return False


def front_end() -> str:
    """The package of numba-cuda's front end installed here: numba-cuda's own
    where it is installed, else numba-cuda-mlir's copy of it.  Both search
    for the CUDA libraries and type Python values with the same code (one is
    a copy of the other), so what is asked of one is what the other answers.
    Raises ImportError, saying what to install, where neither is."""
    for package, front in _FRONT_ENDS:
        if installed(package):
            return front
    raise ImportError(
        'neither numba-cuda nor numba-cuda-mlir is installed: pip install "gpucache_ext[cu12]" '
        '(numba-cuda), or "gpucache_ext[mlir-cu12]" (numba-cuda-mlir alone, Python 3.11 or later)')


def front_end_module(name: str) -> types.ModuleType:
    """The module `name` ("typing.typeof", "cudadrv.nvrtc") of the installed front end (`front_end`)."""
    return importlib.import_module(f"{front_end()}.{name}")


def loaded_class(module: str, name: str) -> tuple:
    """``(module.name,)`` where `module` ("numba.cuda.dispatcher") is already
    imported, else ``()``: a value can be an instance of no class that was
    never imported, so ``isinstance(value, loaded_class(...))`` asks without
    importing numba-cuda (which an install of numba-cuda-mlir alone lacks)."""
    cls = getattr(sys.modules.get(module), name, None)
    return (cls,) if isinstance(cls, type) else ()
