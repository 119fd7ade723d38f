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

import difflib
import os
from typing import TYPE_CHECKING, Dict, List

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display
from traitlets import Bool, Unicode, default

from ..defaults import default_cache
from ..keys.config import (FLAG_OF, Targets, add_config_arguments, check_cell_flags, config_from_flags, option_of,
                           supported_ccs)
from ..keys.stagespec import ALL_STAGES
from ..backends.numba_cuda.launch.device import cuda_simulator_on, default_sm, gpu_available
from ..launch.spec import KernelSpec
from ..errors import ConfigError
from ..queries import compare_entries, find_entry, resource_moves, resource_rows, reused_note
from ..pipeline.results import FatbinResult, short_signature
from ..sweeps import combinations, parse_values
from .report import and_join, cutoff_text, refusals_between

if TYPE_CHECKING:
    from ..backends.numba_cuda.launch.kernel import Kernel

# (numba-cuda's compiler, and so `cell`, `Kernel` and `stages`, are imported when
# first used: under numba's CUDA simulator they cannot be, and the magic still loads)


def _config_arguments(magic):
    """The magic's arguments for the config's fields (but --sm), as the fields declare them (`config.Flag`)."""
    declared = []
    add_config_arguments(lambda *args, **kwargs: declared.append(argument(*args, **kwargs)))
    for decorate in reversed(declared):  # (IPython adds the arguments in the order the decorators are written)
        magic = decorate(magic)
    return magic


def _parse(magic, line):
    """`parse_argstring`, with the flag meant named where one is not known
    (``--fast-math``: did you mean ``--fastmath``?)."""
    try:
        return parse_argstring(magic, line)
    except UsageError as exc:
        message = str(exc)
        if "unrecognized arguments:" not in message:
            raise
        known = [flag for action in magic.parser._actions for flag in action.option_strings]
        squeezed = {flag.replace("-", ""): flag for flag in known}  # --fast-math, --max_registers
        hints = []
        for given in message.split("unrecognized arguments:", 1)[1].split():
            if not given.startswith("-"):
                continue
            name = given.split("=", 1)[0]
            match = squeezed.get(name.replace("-", "").replace("_", "")) or next(
                iter(difflib.get_close_matches(name, known, n=1, cutoff=0.7)), None)
            if match:
                hints.append(f"{name}: did you mean {match}?")
        if not hints:
            raise
        raise UsageError(f"{message} ({'; '.join(hints)})") from None


@magics_class
class GpuCacheMagics(Magics):
    """The ``%%gpukernel`` cell magic and the ``%gpucache`` line magic.

    Configure with ``c.GpuCacheMagics.<trait>`` in an IPython profile, or with
    the environment variables named in each trait's help.
    """

    default_sm = Unicode(
        help="Target used when a cell gives no --sm and there is no GPU (env GPUCACHE_SM); "
             "on a GPU, its compute capability. Empty: sm_86.",
    ).tag(config=True)
    cache_dir = Unicode(
        help="Directory of the disk cache tier (env GPUCACHE_DIR; 'off' for none). "
             "Empty: the platform's user cache folder.",
    ).tag(config=True)
    redis_url = Unicode(
        help="Redis URL of the shared cache tier (env GPUCACHE_REDIS_URL); empty: none. "
             "It is used only with a secret to sign and check its entries (GPUCACHE_SECRET), "
             "or unsigned where GPUCACHE_SHARED_UNSIGNED=1.",
    ).tag(config=True)
    quiet = Bool(help="Do not show the per-cell report (env GPUCACHE_QUIET=1).").tag(config=True)
    auto = Bool(help="Run every cell that defines CUDA kernels (numba's cuda.jit) as a %%gpukernel cell "
                     "with the default flags, as %gpucache auto does (env GPUCACHE_AUTO=1).").tag(config=True)
    audit = Unicode(
        help="Audit the cache's hits by compiling them again from nothing and comparing "
             "(env GPUCACHE_AUDIT): 'first' (the default: the first hit of each kernel served by "
             "the disk or shared tier), 'all', a fraction of every hit besides, e.g. '0.1', or 'off'; "
             "audits run in a low-priority background thread once the cell is done.",
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
        # the `gpucache_ext.ipython.session.Session` that registered these magics (None: made standalone)
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

    @default("auto")
    def _default_auto(self):
        return os.environ.get("GPUCACHE_AUTO", "").lower() in ("1", "true", "yes", "on")

    # -- %%gpukernel -------------------------------------------------------------
    @magic_arguments(name="%gpukernel")  # IPython prefixes one %: the usage reads %%gpukernel
    @argument("--sm", help=FLAG_OF["sm"].help.replace("target:", "target (default: the current GPU's, else "
                                                       "GPUCACHE_SM, else 86):"))
    @argument("--ptx", metavar="SM", help="with several targets: whose PTX the fatbin carries for newer "
                                          "GPUs, at most the lowest target (default: the lowest), or none")
    @_config_arguments
    @argument("--block", metavar="N[,N...]",
              help="block sizes (threads) whose occupancy the report shows, e.g. 128,256,512")
    @argument("--dynamic-shared", metavar="BYTES",
              help="dynamic shared memory a block is launched with (4096 or 4K), for occupancy")
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
        args = _parse(self.gpukernel, line)
        if not cell.strip():
            raise UsageError("%%gpukernel needs a cell of numba-cuda code below the magic line")
        spec = self._spec(args)
        signatures = self._signatures(args.sig)
        quiet = args.quiet or self.quiet  # (also silences the lines of compiles at later launches)
        auto = self.session is not None and self.session.auto.wrapped(cell)  # (%gpucache auto ran it)
        if cuda_simulator_on():  # numba compiles nothing there: the cell runs as a plain cell
            from .simulated import SimulatorNote, run_simulated_cell

            value = run_simulated_cell(self.shell, cell, line, auto)
            if not quiet:
                display(SimulatorNote())
            return value
        from .cell import CellRequest, run_cell

        before = self.cache
        refusals = before.tier_info()  # (asks no server: what the tiers refused so far)
        request = CellRequest(spec, tuple(signatures), quiet=quiet, explain=args.explain)
        report, value = run_cell(self.shell, cell, request, line, auto)
        cache = self.cache
        reported = self.session.audits_reported if self.session is not None else {}
        seen = reported.get(cache, 0)
        if cache.audit_mismatch_count > seen:
            report.audit_findings = cache.audit_mismatches(since=seen)
        reported[cache] = cache.audit_mismatch_count
        # the tiers' signing marks the cell's hits; what they refused during the cell gets a line
        report.tiers = cache.tier_info()
        report.refused = refusals_between(refusals if cache is before else (), report.tiers)
        if not quiet or report.audit_findings or report.refused:
            display(report)
        return value  # the cell's last expression, as a plain cell's: Out[N], _, shown after the report

    def _spec(self, args) -> KernelSpec:
        """How the cell's kernels are built: its config (a sweep's first
        values), its `Targets` where --sm lists several (or --ptx is given),
        the sweep's variants, and the flags."""
        targets = None
        try:
            blocks = parse_values("block", args.block) if args.block is not None else ()
            dynamic = parse_values("dynamic_shared", args.dynamic_shared) if args.dynamic_shared else (0,)
            if len(dynamic) > 1:
                raise ValueError(f"--dynamic-shared {args.dynamic_shared}: give one size (the kernel's launches "
                                 "use one)")
            sm = args.sm if args.sm is not None else self.resolved_default_sm()
            if "," in str(sm) or args.ptx is not None:
                targets = Targets(sm, args.ptx)
                sm = targets.sms[0]
            # several values of a flag: a sweep (`gpucache_ext.sweeps`), its first values bound
            config, swept = check_cell_flags(*config_from_flags(args, sm))
            variants = combinations(config, swept) if any(len(v) > 1 for v in swept.values()) else ()
            return KernelSpec(config, targets, pinned=args.sm is not None or targets is not None,
                              variants=tuple(variants), blocks=tuple(blocks), dynamic_shared=dynamic[0],
                              simulate=args.simulate, force=args.force, audit=True if args.audit else None)
        except ConfigError as exc:
            flag = option_of(exc.field)
            given = getattr(args, (exc.field or "").replace("-", "_"), None)
            if exc.field == "sm" and args.sm is None:
                raise UsageError(f"default target {sm!r} (GpuCacheMagics.default_sm or "
                                 f"GPUCACHE_SM): {exc}") from None
            if exc.field in ("sm", "ptx") and exc.why:  # the values as a flag takes them
                which = "" if str(exc.value) == str(given) else f"sm {exc.value}: "
                targets = ", ".join(str(major * 10 + minor) for major, minor in supported_ccs())
                written = "--sm 86 or --sm sm_86; several targets: --sm 80,86,90" if exc.field == "sm" \
                    else "--ptx 80 or --ptx compute_80; --ptx none for no PTX"
                raise UsageError(f"{flag} {given}: {which}{exc.why}; use one of {targets} ({written})") from None
            raise UsageError(f"{flag} {given}: {exc}") from None
        except ValueError as exc:  # (a flag's text: it names the flag)
            raise UsageError(str(exc)) from None

    def resolved_default_sm(self):
        """The target for cells without --sm, as `gpucache_ext.backends.numba_cuda.launch.device.default_sm`
        decides: this GPU's, else the setting (which may list several), else 86."""
        if self.default_sm and not gpu_available():
            return self.default_sm
        return default_sm("")

    @staticmethod
    def _signatures(sigs):
        if cuda_simulator_on():  # (numba's simulator takes them as they are)
            return list(sigs)
        from ..backends import backend

        normalize_signature = backend().signature  # (the default backend's: numba-cuda's where installed)
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

        %gpucache                 the live inspector: per-stage numbers, the persistent tiers
                                  (signed or not, what they refused), a chart of hits and misses
                                  per cell, the entries and why they were built, actions
        %gpucache stats           per-stage hits, misses, entries and bytes; per persistent tier
                                  where it is, whether its entries are signed, what it refused
        %gpucache clear [STAGE] [--tiers TIERS] [--yes]
                                  drop one stage's entries (typing, llvm, ptx, cubin, fatbin; every
                                  stage without STAGE) from this process's memory; --tiers disk,shared
                                  (or all) clears those persistent tiers too, which every notebook and
                                  process using them shares: it asks first, naming the tiers and how
                                  many entries each loses (--yes: do not ask; needed without a prompt)
        %gpucache explain NAME    how kernel NAME was compiled (which stages were rebuilt to the same
                                  bytes, so the next were reused), and what would miss now
        %gpucache diff A B        two ptx entries' PTX, or two cubin entries' SASS, side by side (A and B:
                                  tokens, or their first 6+ hex digits, as the inspector lists them)
        %gpucache auto [on|off]   run every later cell that defines CUDA kernels as a %%gpukernel cell
                                  with the default flags (GpuCacheMagics.auto, GPUCACHE_AUTO=1)
        """
        words = line.split()
        cache = self.cache
        if not words:
            if self.session is not None:
                return self.session.inspector(cache)
            from ..widgets import inspector

            return inspector(cache)
        if words[0] == "stats":
            if len(words) > 1:
                raise UsageError("%gpucache stats takes no arguments")
            from ..widgets import stats_view

            return stats_view(cache)
        command, rest = words[0], words[1:]
        if command == "auto":
            if len(rest) > 1 or (rest and rest[0] not in ("on", "off")) or self.session is None:
                raise UsageError("%gpucache auto [on|off]: every later cell that defines CUDA kernels runs as a "
                                 "%%gpukernel cell (on, the default), or as written (off)")
            self.session.auto.on = not rest or rest[0] == "on"
            print("%gpucache auto: " + ("cells that define CUDA kernels run as %%gpukernel cells, with the default "
                                        "flags (a cell's own %%gpukernel line keeps its flags)"
                                        if self.session.auto.on else "off: cells run as written"))
            return None
        if command == "clear":
            print(clear_entries(cache, rest))
            return None
        if command == "explain":
            if len(rest) != 1:
                raise UsageError("%gpucache explain NAME: NAME is a kernel bound by %%gpukernel")
            if cuda_simulator_on():
                raise UsageError(f"%gpucache explain {rest[0]}: numba's CUDA simulator is on "
                                 "(NUMBA_ENABLE_CUDASIM=1), so no kernel is compiled or cached")
            from ..backends.numba_cuda.launch.kernel import Kernel

            kernel = self.shell.user_ns.get(rest[0])
            if not isinstance(kernel, Kernel):
                raise UsageError(f"%gpucache explain {rest[0]}: no %%gpukernel kernel of that name")
            print(explain_kernel(kernel))
            return None
        if command == "diff":
            print(diff_entries(cache, rest))
            return None
        raise UsageError(f"%gpucache {command}: unknown command; use stats, clear [STAGE] [--tiers TIERS], "
                         "explain NAME, "
                         "diff TOKEN_A TOKEN_B or auto [on|off]")


_CLEAR_USAGE = "%gpucache clear [STAGE] [--tiers TIERS] [--yes]"


def clear_entries(cache, words: List[str], ask=input) -> str:
    """``%gpucache clear``: drop a stage (every stage without one) from this
    process's memory, and from the persistent tiers ``--tiers`` names
    (``disk``, ``shared``, comma-separated, or ``all``; memory is always
    cleared) once the user confirms (`ask`, the prompt; ``--yes`` skips it,
    and is needed where there is no prompt).  What it did, as text."""
    from ..queries.clearing import clear_stage, plan_clear

    stage, tiers, yes = None, None, False
    words = list(words)
    while words:
        word = words.pop(0)
        if word in ("--yes", "-y"):
            yes = True
        elif word == "--tiers" or word.startswith("--tiers="):
            value = word.partition("=")[2] if "=" in word else (words.pop(0) if words else "")
            if not value:
                raise UsageError(f"{_CLEAR_USAGE}: --tiers needs a value: memory, disk, shared (comma-separated) "
                                 "or all")
            tiers = value
        elif word.startswith("-") or stage is not None:
            raise UsageError(f"{_CLEAR_USAGE}: {word!r} is not understood; STAGE is one of "
                             f"{', '.join(ALL_STAGES)} (or all), TIERS e.g. disk or all")
        else:
            stage = word
    named = ("memory",) if tiers is None else ("memory", *(t.strip() for t in tiers.split(",") if t.strip()))
    try:
        clear_stage(stage)
    except ValueError as exc:
        raise UsageError(f"{_CLEAR_USAGE}: {exc}") from None
    try:
        plan = plan_clear(cache, stage, "all" if tiers == "all" else tuple(dict.fromkeys(named)))
    except ValueError as exc:
        reason = str(exc).partition(" is invalid: ")[2] or str(exc)
        raise UsageError(f"{_CLEAR_USAGE}: --tiers {tiers}: {reason}") from None
    if plan.persistent and not yes:
        question = plan.question()
        try:
            answer = ask(f"{question} [y/N] ")
        except (EOFError, OSError, NotImplementedError):  # no prompt: nbclient, a script, captured stdin
            # (ipykernel's StdinNotImplementedError is a NotImplementedError)
            raise UsageError(f"{question} There is no prompt to confirm it here: add --yes "
                             f"(%gpucache clear {plan.stage or 'all'} --tiers {tiers} --yes).") from None
        if answer.strip().lower() not in ("y", "yes"):
            return f"nothing deleted: {plan.what} kept in every tier"
    outcome = plan.run()
    kept = [name for name in cache.tier_names() if name not in plan.names]
    if kept and "not chosen, so kept" in outcome.text:  # (it names the entries kept)
        return f"{outcome.text} (--tiers {','.join(kept)} clears them too)"
    return outcome.text


def diff_entries(cache, tokens: List[str]) -> str:
    """``%gpucache diff A B``: the two entries side by side, as text; the
    stage is the entries' own (`gpucache_ext.queries.compare_entries`)."""
    if len(tokens) != 2:
        raise UsageError("%gpucache diff TOKEN_A TOKEN_B: give two ptx or two cubin entries' tokens "
                         "(or their first 6+ hex digits; %gpucache lists the entries)")
    try:
        stage, first = find_entry(cache, tokens[0])
        return compare_entries(cache, stage, first, tokens[1]).text()
    except ValueError as exc:
        raise UsageError(f"%gpucache diff: {exc}") from None


def explain_kernel(kernel: "Kernel") -> str:
    """The last compile of each signature (and the stages in it rebuilt to the
    same bytes as before), what would miss if compiled now, and how resources
    moved across the kernel's cached variants (where they did)."""
    if not kernel.results:
        return f"{kernel.__name__} has not been compiled yet"
    lines = [kernel.inspect()]
    same = []
    for argtypes, result in kernel.results.items():
        each = result.per_target.items() if isinstance(result, FatbinResult) else [(None, result)]
        same += [f"  ({short_signature(argtypes)[1:-1]}){'' if sm is None else f' sm_{sm}'}: {phrase}"
                 for sm, one in each for phrase in cutoff_text(one)]
    if same:
        lines += ["", "rebuilt to the same bytes in the last compile:", *same]
    lines += ["", "if compiled now:"]
    # a multi-target kernel: each target (a PTX-only one builds no cubin); its fatbin is
    # rebuilt where a member's bytes change, which only compiling them tells
    targets = [(None, kernel.config)] if kernel.targets is None else \
        [(sm, kernel.config.replace(sm=sm)) for sm in kernel.targets.builds]
    for argtypes in kernel.results:
        for sm, config in targets:
            predicted = kernel.cache.explain(kernel.py_func, argtypes, config,
                                             link=kernel.options.get("link") or ())
            misses = {stage: reasons for stage, reasons in predicted.misses.items()
                      if not (stage == "cubin" and sm is not None and sm not in kernel.targets.sms)}
            shown = f"({short_signature(argtypes)[1:-1]})" + ("" if sm is None else f" sm_{sm}")
            if not misses:
                lines.append(f"  {shown}: every stage hits")
            lines += [f"  {shown}: {line}" for line in predicted_misses(misses, predicted.reused_if)]
    from ..views.variants import resource_moves_text

    moves = resource_moves_text(kernel_moves(kernel))
    if moves:
        lines += ["", "resources across cached variants:", *(f"  {line}" for line in moves.splitlines())]
    return "\n".join(lines)


def kernel_moves(kernel: "Kernel"):
    """How resources moved across the cached cubin variants of `kernel`'s
    code (`gpucache_ext.queries.resource_moves`): the variants built from the
    code of its last compiles, not those of an earlier definition of its name."""
    results = list(kernel.results.values())
    rows = [row for row in resource_rows(kernel.cache, results[0].kernel) if row.place == results[0].place]
    current = {result.stages["cubin"].token for result in results}
    sources = {row.source for row in rows if row.token in current}
    return resource_moves([row for row in rows if row.source in sources] if sources else rows)


def predicted_misses(misses, reused_if) -> List[str]:
    """A line per stage that would miss (`KernelCache.explain(...).misses`):
    "ptx misses: opt 3 -> 2".  A stage that would miss only because the one
    before it does (``explain(...).reused_if``: stage -> that stage), and is
    found again if that one rebuilds to the same bytes, joins that one's
    line: "llvm misses: entry was evicted or cleared; ptx and cubin reused if
    llvm rebuilds to the same bytes"."""
    heads: Dict[str, List[str]] = {}  # a stage that misses on its own -> the stages reused with it
    head_of: Dict[str, str] = {}
    for stage in misses:
        head = head_of.get(reused_if.get(stage, ""))
        if head is not None:
            heads[head].append(stage)
            head_of[stage] = head
        else:
            heads[stage] = []
            head_of[stage] = stage
    lines = []
    for stage, reused in heads.items():
        line = f"{stage} misses: {'; '.join(misses[stage])}"
        if reused:
            line += f"; {and_join(reused)} {reused_note(stage)}"
        lines.append(line)
    return lines
