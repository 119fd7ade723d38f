"""Exceptions raised by gpucache_ext.

Every error names the problem and, where there is one, the fix.  None of them
leaves a partial cache entry behind: a stage stores its artifact only after it
has fully succeeded.
"""

import linecache


class GpuCacheError(Exception):
    """Base class of every error raised by gpucache_ext."""


class ConfigError(GpuCacheError, ValueError):
    """A `CompileConfig` field was given a value it does not accept.

    ``field`` names the field (``"sm"``, ``"max_registers"``...); for a
    target, ``value`` is the one refused and ``why`` why, in words the magic
    puts after its own flag ("sm_37 is not a target this toolkit builds");
    both None otherwise.
    """

    def __init__(self, message, field=None, *, value=None, why=None):
        super().__init__(message)
        self.field, self.value, self.why = field, value, why


class CompileError(GpuCacheError):
    """A stage failed to compile a kernel.

    ``kernel`` is the kernel's qualified name, ``stage`` the failing stage.
    The original exception (a numba typing error, an NVVM or nvJitLink log)
    is chained as ``__cause__`` and summarised in the message.  A
    ``%%gpukernel`` cell fails with (a copy of) that original instead, at the
    cell line it names, and this error as its ``__cause__``.
    """

    def __init__(self, kernel, stage, message):
        super().__init__(f"{kernel}: {stage} stage failed: {message}")
        self.kernel = kernel
        self.stage = stage


def copy_error(exc):
    """An exception of `exc`'s type, arguments and attributes, without its
    traceback and chain (the original keeps them); None if it cannot be made."""
    try:
        copy = BaseException.__new__(type(exc))
        copy.args = exc.args
        copy.__dict__.update(vars(exc))
    except Exception:
        import logging

        logging.getLogger(__name__).debug("could not copy %s without its traceback", type(exc).__name__,
                                          exc_info=True)
        return None
    copy.__dict__.pop("_render_traceback_", None)
    return copy


def as_numba_raises(exc: "CompileError") -> BaseException:
    """What numba-cuda raises where this compile failed: a copy of the
    compiler's own error (numba's ``TypingError``, ``LoweringError``...),
    chained from `exc` by the caller; `exc` itself when the failure is the
    cache's own (no compiler error under it, or one that cannot be copied)."""
    original = exc
    while isinstance(original, CompileError) and original.__cause__ is not None:
        original = original.__cause__
    if original is exc:
        return exc
    return copy_error(original) or exc


class UnsupportedKernelError(GpuCacheError):
    """The kernel uses a feature the staged pipeline cannot cache soundly."""


class SnapshotChanged(Exception):
    """Something a compile reads changed between being hashed and being read
    for the compile (an array another thread wrote to, a header of a linked
    .cu file edited): the compile starts again from a new snapshot."""


class GpuCacheWarning(UserWarning):
    """Base class of the warnings gpucache_ext gives: what a user must see.

    Diagnostics go to the ``gpucache_ext`` logger (stdlib `logging`) instead.
    The categories below tell apart what can be acted on; to silence them
    all: ``warnings.filterwarnings("ignore", category=GpuCacheWarning)``."""


class SecurityWarning(GpuCacheWarning):
    """A cache tier that others could plant machine code in: a shared tier
    without a secret (then not used), or a cache folder other users can write to."""


class TierWarning(GpuCacheWarning, RuntimeWarning):
    """A persistent tier the cache goes on without for now: a shared server
    that does not answer, a disk folder it cannot write to or prune.  Compiles
    go on from the other tiers (nothing stale is served); the message says
    the fix."""


class DisplayWarning(GpuCacheWarning):
    """A view (the inspector, a report) could not be updated; the cell and
    the cache are unaffected."""


class ToolchainMissing(GpuCacheError, ImportError):
    """No CUDA toolchain (libNVVM, nvJitLink, NVRTC) is installed: gpucache_ext
    was installed without its ``cu12`` or ``cu13`` extra, and no CUDA toolkit
    provides them.  An ImportError too: it is raised where the compile core is
    first imported or used."""


def compile_error(qualname, stage, exc, pyfunc=None) -> CompileError:
    """A `CompileError` of `stage` naming the kernel and, where known, the
    source line (the compiler's location of the error, else `pyfunc`'s
    ``def``): what every backend's stages raise for a compiler's error."""
    message = str(exc).replace("\x00", "").strip() or type(exc).__name__
    loc = getattr(exc, "loc", None)
    filename, line = getattr(loc, "filename", None), getattr(loc, "line", None)
    if (filename is None or line is None) and pyfunc is not None:
        filename, line = pyfunc.__code__.co_filename, def_line_of(pyfunc.__code__)
    if filename is not None and line is not None and f"line {line}" not in message:
        source = linecache.getline(filename, line).strip()
        message += f'\n  File "{filename}", line {line}' + (f"\n    {source}" if source else "")
    return CompileError(qualname, stage, message)


def def_line_of(code) -> int:
    """The line of ``def`` itself (co_firstlineno is the first decorator's)."""
    for line in range(code.co_firstlineno, code.co_firstlineno + 20):
        if linecache.getline(code.co_filename, line).lstrip().startswith(("def ", "async def ")):
            return line
    return code.co_firstlineno
