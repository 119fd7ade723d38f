"""The IPython layer: ``%%gpukernel`` and ``%gpucache``.

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
import linecache
import os
from typing import Any, Dict, List, Optional

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display
from traitlets import Bool, Unicode, default

from . import default_cache
from .cache import CompileResult
from .config import STAGES, CompileConfig, parse_sm
from .errors import ConfigError, GpuCacheError
from .kernel import Kernel, check_options, explicit_options, gpu_available
from .report import CellReport
from .results import short_signature
from .sources import declare_signatures
from .stages import normalize_signature

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
        report = _run_cell(self.shell, cell, config, signatures, args)
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
    tree = _ImportsAsAssignments().visit(ast.parse(source, filename, "exec"))
    return compile(ast.fix_missing_locations(tree), filename, "exec")


def _run_cell(shell, cell, config, signatures, args):
    source = shell.transform_cell(cell)
    filename = _cell_filename(source)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
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
        if isinstance(exc, GpuCacheError):
            raise exc.with_traceback(None) from None
        # the same exception, its traceback cut to the cell's frames
        raise exc.with_traceback(_cell_frames(exc.__traceback__, filename))  # noqa: B904
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


def _cell_frames(tb, filename):
    """The traceback from the cell's own frame on (drops this module's frames)."""
    start = tb
    while start is not None and start.tb_frame.f_code.co_filename != filename:
        start = start.tb_next
    return start or tb


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
