"""The IPython stage: ``%%gpukernel`` and ``%gpucache``.

``%%gpukernel`` runs its cell as ordinary numba-cuda code in the user's
namespace, with ``cuda.jit`` standing in for numba's during the cell: kernels
become `Kernel` objects compiled through the shared `KernelCache` with the
magic's flags (a decorator's own options override them for that kernel);
device functions stay lazy numba dispatchers, lowered later for each calling
kernel.  After the cell, kernels with signatures are compiled and a report
says, per stage, what hit and what missed and why.

Bad flags raise `UsageError` before anything runs.  A failing cell (an
exception in the body, or a kernel that does not compile) fails the cell and
puts back the names it had bound to kernels, so earlier kernels stay usable.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import hashlib
import keyword
import linecache
import os
import re
import sys
import types
from typing import Any, Dict, List, Optional

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display
from traitlets import Bool, Unicode, default

from . import default_cache
from .cache import CompileResult
from .config import STAGES, CompileConfig, parse_sm
from .errors import CompileError, ConfigError, GpuCacheError
from .kernel import Kernel, check_options, explicit_options, gpu_available
from .report import CellReport
from .results import short_signature
from .sources import declare_signatures
from .stages import _def_line, normalize_signature

DEFAULT_SM = 86

_FLAG_OF_FIELD = {
    "sm": "--sm", "opt": "--opt", "fastmath": "--fastmath", "ftz": "--ftz",
    "prec_div": "--prec-div", "prec_sqrt": "--prec-sqrt", "fma": "--fma", "debug": "--debug",
    "lineinfo": "--lineinfo", "max_registers": "--max-registers",
    "launch_bounds": "--launch-bounds", "lto": "--lto",
}


def _parse_launch_bounds(text):
    if text is None:
        return None
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UsageError(
            f"--launch-bounds {text}: use T[,B[,C]] (max threads per block, min blocks "
            "per SM, max blocks per cluster), e.g. --launch-bounds 256,2"
        ) from None


@magics_class
class GpuCacheMagics(Magics):
    """The ``%%gpukernel`` cell magic and the ``%gpucache`` line magic.

    Configure with ``c.GpuCacheMagics.<trait>`` in an IPython profile, or with
    the environment variables named in each trait's help.
    """

    default_sm = Unicode(
        help="Target used when a cell gives no --sm (env GPUCACHE_SM). Empty: the "
             "current GPU's compute capability, else sm_86.",
    ).tag(config=True)
    cache_dir = Unicode(
        help="Directory of the disk cache tier (env GPUCACHE_DIR; 'off' for none). "
             "Empty: the platform's user cache folder.",
    ).tag(config=True)
    redis_url = Unicode(
        help="Redis URL of the shared cache tier (env GPUCACHE_REDIS_URL); empty: none. "
             "Set GPUCACHE_SECRET to sign its entries.",
    ).tag(config=True)
    quiet = Bool(help="Do not show the per-cell report (env GPUCACHE_QUIET=1).").tag(config=True)
    audit = Unicode(
        help="Audit the cache's hits by compiling them again from nothing and comparing "
             "(env GPUCACHE_AUDIT): 'off', 'all', or the fraction of hits to audit, e.g. '0.1'; "
             "audits run in a background thread.",
    ).tag(config=True)

    @default("default_sm")
    def _default_sm(self):
        return os.environ.get("GPUCACHE_SM", "")

    @default("cache_dir")
    def _default_cache_dir(self):
        return os.environ.get("GPUCACHE_DIR", "")

    @default("redis_url")
    def _default_redis_url(self):
        return os.environ.get("GPUCACHE_REDIS_URL", "")

    def __init__(self, shell=None, session=None, **kwargs):
        super().__init__(shell=shell, **kwargs)
        # the `gpucache_ext.session.Session` that registered these magics (None: made standalone)
        self.session = session

    @property
    def cache(self):
        """The cache the magics compile into: the session's, else the default one."""
        return self.session.cache if self.session is not None else default_cache()

    @default("audit")
    def _default_audit(self):
        return os.environ.get("GPUCACHE_AUDIT", "")

    @default("quiet")
    def _default_quiet(self):
        return os.environ.get("GPUCACHE_QUIET", "").lower() in ("1", "true", "yes")

    # -- %%gpukernel -------------------------------------------------------------
    @magic_arguments(name="%gpukernel")  # IPython prefixes one %: the usage reads %%gpukernel
    @argument("--sm", help="target: 86, 8.6 or sm_86 (default: GPUCACHE_SM, else the current "
                           "GPU's, else 86)")
    @argument("--opt", type=int, choices=[0, 1, 2, 3], default=None,
              help="libNVVM optimisation level (default 3)")
    @argument("--fastmath", action="store_true", help="fast math in lowering and libNVVM")
    @argument("--ftz", action=argparse.BooleanOptionalAction, default=None,
              help="flush denormals to zero (default: follow --fastmath)")
    @argument("--prec-div", action=argparse.BooleanOptionalAction, default=None,
              help="IEEE division (default: follow --fastmath)")
    @argument("--prec-sqrt", action=argparse.BooleanOptionalAction, default=None,
              help="IEEE square root (default: follow --fastmath)")
    @argument("--fma", action=argparse.BooleanOptionalAction, default=None,
              help="contract multiply-add (default: on, with or without --fastmath)")
    @argument("--lineinfo", action="store_true", help="line information for profilers")
    @argument("--debug", action="store_true", help="full debug information (use with --opt 0)")
    @argument("--max-registers", type=int, metavar="N", help="register limit per thread (1-255)")
    @argument("--launch-bounds", metavar="T[,B[,C]]",
              help="max threads per block[, min blocks per SM[, max blocks per cluster]]")
    @argument("--lto", action="store_true", help="link-time optimisation (LTO-IR through nvJitLink)")
    @argument("--sig", action="append", default=[], metavar="SIG",
              help="signature for kernels without one, e.g. 'void(float32[:])'; repeatable")
    @argument("--force", action="store_true", help="recompile every stage and store the results")
    @argument("--audit", action="store_true",
              help="compile every hit of this cell again from nothing and compare (slower)")
    @argument("--explain", action="store_true", help="show every stage's token components")
    @argument("--simulate", action="store_true", help="run launches on numba's CUDA simulator")
    @argument("--quiet", action="store_true", help="no per-cell report")
    @cell_magic
    def gpukernel(self, line, cell):
        """Compile the numba-cuda kernels of this cell through gpucache_ext's staged cache.

        The cell is ordinary numba-cuda code: @cuda.jit kernels and
        @cuda.jit(device=True) functions, plus any other Python.  Kernels are
        bound to objects launched like numba's (k[blocks, threads](args)) that
        also expose .ptx, .llvm_ir, .cubin, .resources and .inspect().
        """
        args = parse_argstring(self.gpukernel, line)
        if not cell.strip():
            raise UsageError("%%gpukernel needs a cell of numba-cuda code below the magic line")
        config = self._config(args)
        signatures = self._signatures(args.sig)
        report = _run_cell(self.shell, cell, config, signatures, args, line)
        cache = self.cache
        reported = self.session.audits_reported if self.session is not None else {}
        seen = reported.get(cache, 0)
        if cache.audit_mismatch_count > seen:
            report.audit_findings = cache.audit_mismatches(since=seen)
        reported[cache] = cache.audit_mismatch_count
        if not (args.quiet or self.quiet) or report.audit_findings:
            display(report)

    def _config(self, args) -> CompileConfig:
        try:
            sm = args.sm if args.sm is not None else self.resolved_default_sm()
            return CompileConfig(
                sm=sm, opt=3 if args.opt is None else args.opt, fastmath=args.fastmath,
                ftz=args.ftz, prec_div=args.prec_div, prec_sqrt=args.prec_sqrt, fma=args.fma,
                debug=args.debug, lineinfo=args.lineinfo, max_registers=args.max_registers,
                launch_bounds=_parse_launch_bounds(args.launch_bounds), lto=args.lto,
            )
        except ConfigError as exc:
            flag = _FLAG_OF_FIELD.get(exc.field, exc.field)
            given = getattr(args, (exc.field or "").replace("-", "_"), None)
            if exc.field == "sm" and args.sm is None:
                raise UsageError(f"default target {sm!r} (GpuCacheMagics.default_sm or "
                                 f"GPUCACHE_SM): {exc}") from None
            raise UsageError(f"{flag} {given}: {exc}") from None

    def resolved_default_sm(self):
        """The target for cells without --sm: configured, else this GPU's, else 86."""
        if self.default_sm:
            return self.default_sm
        if gpu_available():
            from .kernel import device_cc

            major, minor = device_cc()
            try:
                return parse_sm((major, minor))
            except ConfigError:
                pass
        return DEFAULT_SM

    @staticmethod
    def _signatures(sigs):
        parsed = []
        for sig in sigs:
            if len(sig) > 1 and sig[0] == sig[-1] and sig[0] in "'\"":
                sig = sig[1:-1]  # IPython's argument splitting keeps quotes
            try:
                normalize_signature(sig)
            except TypeError as exc:
                raise UsageError(f"--sig {sig!r}: {exc}") from None
            parsed.append(sig)
        return parsed

    # -- %gpucache ----------------------------------------------------------------
    @line_magic
    def gpucache(self, line):
        """Inspect the kernel cache.

        %gpucache                 the live inspector: per-stage numbers, a chart of hits and
                                  misses per cell, the entries and why they were built, actions
        %gpucache stats           per-stage hits, misses, entries and bytes
        %gpucache clear [STAGE]   drop every entry, or one stage's (typing, llvm, ptx, cubin)
        %gpucache explain NAME    how kernel NAME was compiled, and what would miss now
        """
        words = line.split()
        cache = self.cache
        if not words:
            if self.session is not None:
                return self.session.inspector(cache)
            from .widgets import inspector

            return inspector(cache)
        if words[0] == "stats":
            if len(words) > 1:
                raise UsageError("%gpucache stats takes no arguments")
            from .widgets import stats_view

            return stats_view(cache)
        command, rest = words[0], words[1:]
        if command == "clear":
            if len(rest) > 1 or (rest and rest[0] not in STAGES):
                raise UsageError(f"%gpucache clear [STAGE]: STAGE is one of {', '.join(STAGES)}")
            cache.clear(rest[0] if rest else None)
            print(f"cleared {rest[0] if rest else 'every'} stage")
            return None
        if command == "explain":
            if len(rest) != 1:
                raise UsageError("%gpucache explain NAME: NAME is a kernel bound by %%gpukernel")
            kernel = self.shell.user_ns.get(rest[0])
            if not isinstance(kernel, Kernel):
                raise UsageError(f"%gpucache explain {rest[0]}: no %%gpukernel kernel of that name")
            print(explain_kernel(kernel))
            return None
        raise UsageError(f"%gpucache {command}: unknown command; use stats, clear [STAGE] or explain NAME")


def explain_kernel(kernel: Kernel) -> str:
    """The last compile of each signature, and what would miss if compiled now."""
    if not kernel.results:
        return f"{kernel.__name__} has not been compiled yet"
    lines = [kernel.inspect(), "", "if compiled now:"]
    for argtypes in kernel.results:
        predicted = kernel.cache.explain(kernel.py_func, argtypes, kernel.config,
                                         link=kernel.options.get("link") or ())
        misses = predicted.misses
        shown = short_signature(argtypes)[1:-1]
        if not misses:
            lines.append(f"  ({shown}): every stage hits")
        for stage, reasons in misses.items():
            lines.append(f"  ({shown}): {stage} misses: {'; '.join(reasons)}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Running a cell


class _CellContext:
    """What the kernels defined by one running %%gpukernel cell get: its
    config, signatures and flags, and where their compile results go."""

    def __init__(self, config, signatures, args, collect):
        self.config = config
        self.signatures = signatures
        self.args = args
        self.collect = collect
        self.kernels: List[Kernel] = []

    def device_defaults(self) -> Dict[str, Any]:
        """The cell's flags that lower a device function, as decorator options."""
        config = self.config
        defaults = {name: True for name in ("fastmath", "debug", "lineinfo") if getattr(config, name)}
        if config.debug:
            defaults["opt"] = False  # numba warns about debug with opt
        return defaults

    def make_kernel(self, func, sigs, options) -> Kernel:
        kernel = Kernel(func, sigs or self.signatures, self.config, default_cache(), options,
                        simulate=self.args.simulate, on_compile=self.collect, force=self.args.force,
                        audit=True if self.args.audit else None)
        self.kernels.append(kernel)
        return kernel


def _real_jit():
    """numba's own ``jit``."""
    from numba.cuda import decorators

    return decorators.jit


class CellJit:
    """Stands in for ``numba.cuda.jit``, however it is reached.

    While a %%gpukernel cell runs, ``numba.cuda.jit`` and every name in the
    user's namespace bound to numba's own ``jit`` are this object, and it
    makes `Kernel` objects with the running cell's flags.  A name that keeps
    it after the cell (``from numba.cuda import jit`` inside a cell) still
    gets each later cell's flags; outside a %%gpukernel cell it is numba's
    ``jit`` itself.
    """

    def __init__(self):
        self.active: Optional[_CellContext] = None

    def __call__(self, func_or_sig=None, device=False, **options):
        from numba.cuda.core.sigutils import is_signature

        if self.active is None:
            return _real_jit()(func_or_sig, device=device, **options)
        if func_or_sig is None or is_signature(func_or_sig) or isinstance(func_or_sig, list):
            sigs = [] if func_or_sig is None else (
                list(func_or_sig) if isinstance(func_or_sig, list) else [func_or_sig])
            return lambda func: self._make(func, sigs, device, options)
        return self._make(func_or_sig, [], device, options)

    def _make(self, func, sigs, device, options):
        if self.active is None:  # the decorator was made in a cell and applied after it
            return _real_jit()(sigs or None, device=device, **options)(func)
        if device:
            # A lazy dispatcher: gpucache_ext types and lowers it per calling
            # kernel, for the kernel's target (a signature here would make numba
            # compile it now, for the current GPU).  As numba, it is lowered with
            # its own options: the cell's flags, overridden by its decorator's.
            # numba still checks the options; those it cannot have are refused.
            check_options(options, "@cuda.jit(device=True, ...)")
            dispatcher = _real_jit()(device=True, **{**self.active.device_defaults(), **options})(func)
            if sigs:  # calls are typed against them, as numba does
                declare_signatures(dispatcher, sigs)
            return dispatcher
        return self.active.make_kernel(func, sigs, options)

    def __repr__(self):
        return "<gpucache_ext stand-in for numba.cuda.jit>"


JIT = CellJit()


@contextlib.contextmanager
def _jit_standing_in(namespace, context: _CellContext):
    """numba.cuda.jit, and the namespace's names for numba's jit, are `JIT`
    while the block runs; `JIT` makes kernels for `context`."""
    import numba.cuda

    # (numba.cuda.decorators.jit stays numba's: its own wrappers call it.)
    real = _real_jit()
    aliases = [name for name, value in namespace.items() if value is real]
    saved = numba.cuda.jit
    numba.cuda.jit = JIT
    for name in aliases:
        namespace[name] = JIT
    JIT.active = context
    try:
        yield
    finally:
        JIT.active = None
        numba.cuda.jit = saved
        for name in aliases:
            if namespace.get(name) is JIT:
                namespace[name] = real


def _capture_numba_kernels(namespace, before, context: _CellContext):
    """Kernels the cell made with numba's own jit, reached in a way the stand-in
    could not cover (a partial, an alias kept in a module): bind them as Kernels
    with the cell's flags too.  Options they were given explicitly are kept."""
    from numba.cuda.dispatcher import CUDADispatcher

    for name, value in list(namespace.items()):
        if (isinstance(value, CUDADispatcher) and not value.targetoptions.get("device")
                and before.get(name) is not value):
            namespace[name] = context.make_kernel(value.py_func, [],
                                                  explicit_options(value.targetoptions))


def _cell_filename(cell: str) -> str:
    """A name derived from the cell's text, so an unchanged cell keeps its name
    (and its line-number-dependent debug info keeps hitting) across runs."""
    return f"<gpukernel-{hashlib.sha1(cell.encode()).hexdigest()[:12]}>"


class _ImportsAsAssignments(ast.NodeTransformer):
    """Turn the cell's module-level imports into plain assignments.

    CPython compiles ``cuda.grid(1)`` differently when ``cuda`` was imported in
    the same compilation unit (LOAD_ATTR instead of LOAD_METHOD), so a kernel's
    bytecode, and with it its token, would depend on which cell holds the
    imports.  Written as assignments, imports bind the same names to the same
    modules and kernels compile to the same bytecode wherever the imports are.
    """

    def visit_FunctionDef(self, node):  # only module-level imports matter
        return node

    visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

    def visit_Import(self, node):
        assigns = []
        for alias in node.names:
            if alias.asname:  # import a.b as c: c is the submodule
                target, value = alias.asname, _call("__import__", alias.name, fromlist=["_"])
            else:  # import a.b: binds a, the top package
                target, value = alias.name.split(".")[0], _call("__import__", alias.name)
            assigns.append(_assign(target, value, node))
        return assigns

    def visit_ImportFrom(self, node):
        if node.level or any(alias.name == "*" for alias in node.names):
            return node  # relative and star imports stay as written
        fromlist = [a.name for a in node.names]
        return [_imported_name(node, alias, fromlist) for alias in node.names]


def _call(func, *args, fromlist=None):
    keywords = []
    if fromlist is not None:
        keywords.append(ast.keyword(arg="fromlist", value=ast.Tuple(
            elts=[ast.Constant(name) for name in fromlist], ctx=ast.Load())))
    return ast.Call(func=ast.Name(id=func, ctx=ast.Load()),
                    args=[ast.Constant(a) for a in args], keywords=keywords)


def _imported_name(node, alias, fromlist):
    """``name = __import__(module, fromlist=...).name``, raising ImportError (as
    ``from module import name`` does) when the module has no such name."""
    module = _call("__import__", node.module, fromlist=fromlist)
    assign = _assign(alias.asname or alias.name,
                     ast.Attribute(value=module, attr=alias.name, ctx=ast.Load()), node)
    message = f"cannot import name {alias.name!r} from {node.module!r}"
    raise_error = ast.Raise(exc=ast.Call(func=ast.Name(id="ImportError", ctx=ast.Load()),
                                         args=[ast.Constant(message)], keywords=[]),
                            cause=ast.Constant(None))
    handler = ast.ExceptHandler(type=ast.Name(id="AttributeError", ctx=ast.Load()), name=None,
                                body=[raise_error])
    guarded = ast.Try(body=[assign], handlers=[handler], orelse=[], finalbody=[])
    return ast.fix_missing_locations(ast.copy_location(guarded, node))


def _assign(target, value, node):
    assign = ast.Assign(targets=[ast.Name(id=target, ctx=ast.Store())], value=value)
    return ast.fix_missing_locations(ast.copy_location(assign, node))


def _compile_cell(source: str, filename: str):
    """The cell's code, numbered as IPython numbers the cell: line 1 is the
    magic's own, so the code starts on line 2 (a SyntaxError says so too)."""
    tree = _ImportsAsAssignments().visit(ast.parse("\n" + source, filename, "exec"))
    return compile(ast.fix_missing_locations(tree), filename, "exec")


def _run_cell(shell, cell, config, signatures, args, line=""):
    source = shell.transform_cell(cell)
    filename = _register_cell(shell, source, line, _running_cell_number(shell))
    code = _compile_cell(source, filename)

    results: List[CompileResult] = []
    collecting = [True]

    def collect(result):
        if collecting[0]:
            results.append(result)

    namespace = shell.user_ns
    before = dict(namespace)
    context = _CellContext(config, signatures, args, collect)
    try:
        with _jit_standing_in(namespace, context):
            exec(code, namespace)
        _capture_numba_kernels(namespace, before, context)
        for kernel in context.kernels:
            kernel.compile_declared()
    except BaseException as exc:
        _restore_kernel_names(namespace, before, context.kernels)
        shown = _as_cell_error(shell, exc, filename, context)
        if shown is exc:
            raise
        raise shown from exc
    finally:
        collecting[0] = False
    return CellReport(results, explain=args.explain)


def _restore_kernel_names(namespace, before, kernels):
    made = {id(k) for k in kernels}
    for name, value in list(namespace.items()):
        if id(value) in made:
            if name in before:
                namespace[name] = before[name]
            else:
                del namespace[name]


# ---------------------------------------------------------------------------
# A failing cell reads as a plain cell's error
#
# IPython shows a plain cell's error as the cell's own lines ("Cell In[7],
# line 6") and the frames below them.  A %%gpukernel cell's error would also
# show the frames of the magic, of this package and, for a kernel that does
# not compile, of numba's compiler, and no line of the kernel at all: a
# compile runs after the cell, from this module.  So the cell is registered
# as IPython registers cells (its lines in linecache, its number with
# IPython's compiler), and the exception the cell fails with shows, once, as
# IPython would show it with only the cell's frames: numba's own exception
# for a kernel that does not compile, at the line numba failed on.  It keeps
# its whole chain: `%debug` opens at that line and reaches the real frames
# with ``exceptions``, and `%tb` prints everything.

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _register_cell(shell, source: str, line: str, number: Optional[int]) -> str:
    """Name the cell's code and give tracebacks its lines, the magic line
    first; with `number`, IPython labels the file ``Cell In[number]``."""
    filename = _cell_filename(source)
    magic = ("%%gpukernel " + line).rstrip() + "\n"
    lines = [magic] + [text if text.endswith("\n") else text + "\n" for text in source.splitlines(True)]
    linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)
    names = _cell_names(shell)
    if number is not None and names is not None:
        names[filename] = number
    return filename


def _cell_names(shell) -> Optional[Dict[str, int]]:
    """IPython's map from a cell's code name to its execution count (what
    its tracebacks read as ``Cell In[N]``), if this shell has one."""
    names = getattr(getattr(shell, "compile", None), "_filename_map", None)
    return names if isinstance(names, dict) else None


def _running_cell_number(shell) -> Optional[int]:
    """The execution count of the IPython cell running this magic: that of
    the nearest calling frame whose code is a cell's."""
    names = _cell_names(shell)
    frame = sys._getframe(1)
    while names is not None and frame is not None:
        number = names.get(frame.f_code.co_filename)
        if number is not None:
            return number
        frame = frame.f_back
    return None


def _is_cell_file(shell, filename) -> bool:
    names = _cell_names(shell) or {}
    return isinstance(filename, str) and (
        filename in names or filename.startswith(("<gpukernel-", "<ipython-input-")))


def _check_cell_syntax(lines):
    """IPython input transformer (``input_transformers_post``): a %%gpukernel
    cell whose code does not parse fails before it runs, its SyntaxError shown
    as a plain cell's is, at the cell's line and with no frames."""
    if not lines or not lines[0].startswith("get_ipython().run_cell_magic('gpukernel', "):
        return lines
    try:
        call = ast.parse("".join(lines)).body[0].value
        _, line, body = (ast.literal_eval(arg) for arg in call.args)
    except (SyntaxError, ValueError, AttributeError, IndexError, TypeError):
        return lines  # not IPython's form of a %%gpukernel cell: leave it to the magic
    if not isinstance(body, str) or not body.strip():
        return lines
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        return lines
    source = shell.transform_cell(body)
    filename = _register_cell(shell, source, line, shell.execution_count)
    try:
        _compile_cell(source, filename)
    except SyntaxError as exc:
        raise exc.with_traceback(None) from None
    return lines


def _as_cell_error(shell, exc, filename, context):
    """The exception a failing cell raises, set to show as a plain cell's.

    A kernel that did not compile (a `CompileError` chaining the compiler's
    error) fails the cell with a copy of the compiler's error, at the line of
    the cell the compiler reported (else the kernel's ``def``), chained to the
    CompileError.  Any other exception is itself, shown from the cell's first
    frame on without this package's frames; one raised after the cell's code
    ran (by a compile), at the kernel it names."""
    original = exc
    while isinstance(original, CompileError) and original.__cause__ is not None:
        original = original.__cause__
    if original is not exc:
        shown = _copy_error(original)
        if shown is not None:
            frame = _frame_at(_compile_location(shell, exc, original, context))
            # compiled by a launch in the cell: the launch's line, then the kernel's
            _show_once(shell, shown, _joined(_cell_frames(exc.__traceback__, filename), frame),
                       hide_chain=True)
            return shown.with_traceback(frame)
    frames = _cell_frames(exc.__traceback__, filename)
    ours = frames is None or isinstance(exc, GpuCacheError)  # its chain is this package's
    if frames is None:
        frames = _frame_at(_compile_location(shell, exc, exc, context))
    _show_once(shell, exc, frames, hide_chain=ours)
    return exc


def _copy_error(exc):
    """An exception of `exc`'s type, arguments and attributes, without its
    traceback and chain (the original keeps them); None if it cannot be made."""
    try:
        copy = BaseException.__new__(type(exc))
        copy.args = exc.args
        copy.__dict__.update(vars(exc))
    except Exception:
        return None
    copy.__dict__.pop("_render_traceback_", None)
    return copy


_FILE_LINE = re.compile(r'File "([^"]+)", line (\d+)|\bat (<[^>]+>|\S+) \((\d+)\)')


def _compile_location(shell, exc, original, context):
    """(filename, line, function name) of the line of a cell a compile failed
    on: the compiler's location, else the kernel's ``def``; None if unknown."""
    for filename, line in _reported_locations(original, exc):
        if _is_cell_file(shell, filename) and linecache.getline(filename, line).strip():
            return filename, line, _function_at(shell, context, filename, line)
    kernel = _kernel_named(context, getattr(exc, "kernel", None))
    if kernel is not None:
        code = kernel.py_func.__code__
        return code.co_filename, _def_line(code), kernel.py_func.__name__
    return None


def _reported_locations(original, exc):
    """Where the compiler says it failed, most precise first: the errors' own
    ``loc``, the statement numba's compiler frames were at (innermost first),
    then the places named in the messages."""
    chain, seen = [], set()
    error = original
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        chain.append(error)
        error = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    for error in chain:
        loc = _loc(error, "loc")
        if loc:
            yield loc
    for error in chain:
        for entry in reversed(_entries(error.__traceback__)):
            f_locals = entry.tb_frame.f_locals
            for name in ("loc", "inst", "stmt", "expr", "self"):
                value = f_locals.get(name)
                loc = _loc(value) if name == "loc" else _loc(value, "loc")
                if loc:
                    yield loc
    for error in (*chain, exc):
        for match in _FILE_LINE.finditer(str(error)):
            filename, line = match.group(1, 2) if match.group(1) else match.group(3, 4)
            yield filename, int(line)


def _loc(value, attribute=None):
    """(filename, line) of a numba ``Loc`` (or of `value`'s `attribute`), else None."""
    try:
        if attribute is not None:
            value = getattr(value, attribute, None)
        filename, line = getattr(value, "filename", None), getattr(value, "line", None)
    except Exception:  # whatever the object, looking must not fail the error path
        return None
    return (filename, line) if isinstance(filename, str) and isinstance(line, int) else None


def _entries(tb) -> list:
    entries = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    return entries


def _kernel_named(context, qualname):
    if not qualname:
        return None
    for kernel in context.kernels:
        func = kernel.py_func
        if qualname in (func.__qualname__, f"{func.__module__}.{func.__qualname__}"):
            return kernel
    return None


def _function_at(shell, context, filename, line) -> Optional[str]:
    """The name of the function whose code spans `line` of `filename`: a
    kernel of this cell, or a function, kernel or device function of the
    user's namespace."""
    from numba.cuda.dispatcher import CUDADispatcher

    funcs = [kernel.py_func for kernel in context.kernels]
    for value in list(shell.user_ns.values()):
        if isinstance(value, (Kernel, CUDADispatcher)):
            funcs.append(value.py_func)
        elif isinstance(value, types.FunctionType):
            funcs.append(value)
    for func in funcs:
        code = getattr(func, "__code__", None)
        if code is None or code.co_filename != filename:
            continue
        lines = [start for start, _, _ in code.co_lines() if start is not None]
        if lines and code.co_firstlineno <= line <= max(lines):
            return func.__name__
    return None


class _Marker(Exception):
    pass


def _frame_at(location):
    """A one-entry traceback at `location` (filename, line, function name or
    None), inside a function of that name where there is one: where a
    compiler found an error that running the cell never reached.  Tracebacks
    and ``%debug`` show the file's lines there.  None for no location."""
    if location is None:
        return None
    filename, line, name = location
    marker = _Marker()
    if name and name.isidentifier() and not keyword.iskeyword(name):
        source = "\n" * (line - 1) + f"def {name}(): raise __marker__\n{name}()\n"
    else:
        source = "\n" * (line - 1) + "raise __marker__\n"
    try:
        exec(compile(source, filename, "exec"), {"__name__": "__main__", "__marker__": marker})
    except _Marker:
        pass
    inner = _entries(marker.__traceback__)[-1]
    return types.TracebackType(None, inner.tb_frame, inner.tb_lasti, inner.tb_lineno)


def _cell_frames(tb, filename):
    """The traceback from the cell's own frame on, without this package's
    frames (an error raised in them shows at the cell line that called in);
    None if the cell's code is not in it."""
    entries = _entries(tb)
    start = next((i for i, e in enumerate(entries) if e.tb_frame.f_code.co_filename == filename), None)
    if start is None:
        return None
    shown = None
    for entry in reversed(entries[start:]):
        if not os.path.abspath(entry.tb_frame.f_code.co_filename).startswith(_PACKAGE_DIR):
            shown = types.TracebackType(shown, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return shown


def _joined(tb, tail):
    """Traceback `tb` (possibly None) followed by `tail`."""
    for entry in reversed(_entries(tb)):
        tail = types.TracebackType(tail, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return tail


def _show_once(shell, exc, tb, hide_chain):
    """Have IPython show `exc` with traceback `tb` (and, with `hide_chain`,
    without the exceptions it chains) the next time it shows `exc`: when the
    cell fails.  After that (``%tb``) IPython shows the whole of it."""

    def render():
        exc.__dict__.pop("_render_traceback_", None)
        chain = exc.__cause__, exc.__context__, exc.__suppress_context__
        if hide_chain:
            exc.__cause__ = exc.__context__ = None
        try:
            return shell.InteractiveTB.structured_traceback(type(exc), exc, tb, tb_offset=0)
        except Exception:  # as IPython would have shown it
            return shell.InteractiveTB.structured_traceback(type(exc), exc, exc.__traceback__)
        finally:  # (setting __cause__ sets __suppress_context__: restored last)
            exc.__cause__, exc.__context__, exc.__suppress_context__ = chain

    exc._render_traceback_ = render


def load(shell):
    """Start a `gpucache_ext.session.Session` on `shell`: magics, hooks, settings."""
    from .session import Session

    Session(shell).load()


def unload(shell):
    """Take down the session `load` started (if any)."""
    from .session import current

    session = current(shell)
    if session is not None:
        session.unload()
