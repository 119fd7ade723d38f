"""gpucache explain: how a kernel's newest build went, read from the entries
the persistent tiers hold after the process that built it is gone.

    gpucache explain axpy                 its newest build: each stage hit or built, and why
    gpucache explain axpy --sm 80 86      the newest build of each of these targets

Each entry's header says why it was built (the reasons the cell report gave,
in the same words: `gpucache_ext.queries.explain_miss` wrote them), what it
was built from (``upstream``: the entry before it; an llvm entry carries its
typing's inputs) and when.  From those this rebuilds the newest build of a
target, stage by stage:

- the *anchor* is the kernel's newest entry for that target: it was built by
  the newest build that wrote anything (a build where every stage hit writes
  nothing);
- upstream of it, the entry each stage was built from; such an entry was
  built by the same build where it was built with the same config (each
  entry keeps its build's whole config: an entry of another config was
  found), stored just before (within the compile time of the stage after
  it and `_SAME_BUILD_SECONDS`), unless that stage missed only because its
  entry was dropped (then an earlier build of that config built both);
- downstream of it, the entry keyed on its bytes and the target's config: found,
  so a hit; a hit after a rebuilt stage is an early cutoff (the stage was
  rebuilt to the same bytes as before, and the next one reused);
- typing is kept in memory only: its reasons are those of the llvm entry's
  typing inputs against the nearest other llvm entry's
  (`gpucache_ext.queries.nearest`, `miss_reasons`, as a miss after a restart is
  explained).

The why chain starts at the last stage built and follows "ptx input changed"
upstream to the stage whose own inputs changed: the root cause.
`why_chain` does the same for one entry (``gpucache show``'s "built" line).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import re
import sys
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from ..keys.config import FIELD_STAGES, CompileConfig
from .. import backends
from ..keys.stagespec import PERSISTENT_STAGES, STAGE_SPEC, TARGET_PERSISTENT_STAGES, Chain
from ..keys.reasons import Reason, and_join, cutoff_phrase, own
from ..store.tiers import DROPPED
from ..keys.tokens import short_name, short_token
from ..units import format_age
from .output import CommandError

__all__ = ["CachedEntries", "Step", "Build", "add_explain", "cmd_explain", "entry_chain", "newest_builds",
           "why_chain"]

# How long after an entry was stored the entry built from it may be stored,
# beyond that stage's own compile time, to count as built by the same build
# (computing a digest, a lookup, writing the entry: milliseconds in practice)
_SAME_BUILD_SECONDS = 0.5
# how a miss says its very entry was cached and dropped since (`queries.explain_miss`)
_DROPPED_ENTRY = "entry was "
_BUILT_STAGES = TARGET_PERSISTENT_STAGES  # (those a target's build stores; typing: memory only)

BUILT, HIT, NOT_NEEDED, GONE, MISSING = "built", "hit", "not needed", "gone", "not cached"


def add_explain(add) -> None:
    """The explain command's arguments (`gpucache_ext.cli.parser`)."""
    explain = add("explain", help="how a kernel's newest build went: each stage hit or built, and why",
                  description="How the newest build of kernel NAME went, read from the disk cache (and the "
                  "shared cache when a Redis URL is set): each stage hit or built, why each built stage was "
                  "built, followed upstream to the root cause (cubin built because ptx input changed, ptx "
                  "because llvm input changed, llvm because fastmath False -> True), and the stages rebuilt "
                  "to the same bytes as before, so that the next ones were reused (early cutoff).  NAME as "
                  "gpucache ls shows it.  Exits 2 for a name or target the cache does not know.")
    explain.add_argument("name", metavar="NAME", help="a kernel's name, as gpucache ls shows it")
    explain.add_argument("--sm", nargs="+", type=_parse_sms, action="extend", metavar="N",
                         help="the targets whose newest build to explain, e.g. --sm 80 86 or --sm 80,86 "
                              "(default: the newest build's)")


def _parse_sms(text: str) -> List[int]:
    sms = []
    for part in filter(None, (p.strip().lower() for p in text.split(","))):
        match = re.fullmatch(r"(?:sm_|compute_|sm)?(\d+)(?:\.(\d))?", part)
        if not match:
            raise argparse.ArgumentTypeError(f"{text!r} is not a target; use e.g. 86, sm_86 or 8.6 (and give "
                                             "NAME before --sm)")
        whole, minor = match.groups()
        sms.append(int(whole) * 10 + int(minor) if minor is not None else int(whole))
    return sms


# -- the entries, as their headers tell --------------------------------------


@dataclass(frozen=True, eq=False)
class Held:
    """One stored entry's header (`store.tiers.Entry`, artifact not loaded) and the tiers holding it."""

    stage: str
    entry: object
    tiers: Tuple[str, ...]

    def __getattr__(self, name):  # the header's fields: token, kernel, created, reasons, upstream...
        if name == "entry":  # (not set yet: a copy being made)
            raise AttributeError(name)
        return getattr(self.entry, name)


class CachedEntries:
    """The headers of every entry the tiers hold (markers left out), by stage and token."""

    def __init__(self, tiers: Sequence, stages: Iterable[str] = PERSISTENT_STAGES):
        self.tiers = list(tiers)
        self.by_token: Dict[Tuple[str, str], Held] = {}
        for tier in self.tiers:
            for stage in stages:
                for entry in tier.entries(stage):
                    if entry.is_marker:
                        continue
                    held = self.by_token.get((stage, entry.token))
                    self.by_token[(stage, entry.token)] = (
                        Held(stage, entry, (tier.name,)) if held is None
                        else Held(stage, held.entry, held.tiers + (tier.name,)))

    def get(self, stage: str, token: str) -> Optional[Held]:
        return self.by_token.get((stage, token)) if token else None

    def of(self, kernel: str, place, stage: str) -> List[Held]:
        """The entries of one definition at `stage`, oldest first."""
        return sorted((h for (s, _), h in self.by_token.items()
                       if s == stage and h.kernel == kernel and h.place == place), key=lambda h: h.created)

    def dropped(self, stage: str, token: str) -> Optional[str]:
        """Why the entry is gone, where a tier keeps that record: "evicted from the disk tier 5m ago"."""
        for tier in self.tiers:
            found = tier.dropped(stage, token)
            if found is not None:
                why, when = found
                return f"{DROPPED.get(why, why)} from the {tier.name} tier {format_age(time.time() - when)} ago"
        return None


def _chain_of(held) -> Chain:
    """The chain a stored entry was built through (`backends.chain_of`)."""
    return backends.chain_of(held.config_fields)


def _reads(stage: str, fields, chain: Chain) -> dict:
    """The config fields `stage` reads in `chain`, at their effective values
    (as `CompileConfig.stage_fields`, without validating the target, which
    would ask the toolchain which targets it knows)."""
    values = dict(fields or {})
    values.update(CompileConfig.nvvm_math(SimpleNamespace(**{n: values.get(n) for n in
                                                              ("fastmath", "ftz", "prec_div", "prec_sqrt", "fma")})))
    declared = chain.reads_of(stage)
    if declared is not None:
        return {name: values.get(name) for name in declared}
    return {name: values.get(name) for name, read in FIELD_STAGES.items() if stage in read}


def _sm(held: Held) -> Optional[int]:
    return (held.config_fields or {}).get("sm")


def _says_upstream_changed(reasons, stage: str, chain: Chain) -> bool:
    return any(r.is_upstream and r.component == chain.upstream(stage) for r in map(Reason.of, reasons))


def _same_config(later: Held, earlier: Held) -> bool:
    """Whether two entries were built with one config: every entry keeps its
    build's whole config, and one build builds a target's stages with one
    (save the target of an llvm entry that several targets share: a fatbin's)."""
    mine, theirs = dict(later.config_fields or {}), dict(earlier.config_fields or {})
    if STAGE_SPEC[earlier.stage].reads_target:  # (its entry may serve every target that reads alike)
        mine.pop("sm", None), theirs.pop("sm", None)
    return mine == theirs


def _built_by_same_build(down: Held, up: Held) -> bool:
    """Whether `up`, the entry `down` was built from, was built by the build
    that built `down` (else that build found it): with the same config (an
    earlier build with that config found `up` and built `down` itself, so
    that `down` missed only where its entry was dropped since), and stored
    just before `down`."""
    if not _same_config(down, up) or not 0 <= down.created - up.created <= down.seconds + _SAME_BUILD_SECONDS:
        return False
    return _says_upstream_changed(down.reasons, down.stage, _chain_of(down)) or not all(
        str(r).startswith(_DROPPED_ENTRY) for r in down.reasons)


def typing_reasons(entries: CachedEntries, llvm: Held) -> Tuple[str, ...]:
    """Why typing was built for `llvm`, the entry of the stage built from
    it (llvm, or mlir; typed IR is not stored): its typing inputs, which that
    entry carries, against those of the nearest other entry of that stage and
    definition stored before it."""
    from ..queries.misses import miss_reasons, nearest

    def typing_parts(held):
        part = held.components.get("typing")
        return dict(part.parts) if part is not None and part.parts else None

    mine = typing_parts(llvm)
    if mine is None:
        return ()
    earlier = [(h.token, typing_parts(h)) for h in entries.of(llvm.kernel, llvm.place, llvm.stage)
               if h.token != llvm.token and h.created < llvm.created and typing_parts(h) is not None]
    found = nearest(earlier, mine)
    return tuple(map(str, miss_reasons("typing", mine, found[1]))) if found is not None else ()


# -- one build, stage by stage -----------------------------------------------


@dataclass(frozen=True)
class Step:
    """One stage of a build: its outcome (built, hit, not needed, gone, not
    cached), its entry's token and tiers, why it was built, and whether it
    was found because the stage before was rebuilt to the same bytes."""

    stage: str
    outcome: str
    token: Optional[str] = None
    tiers: Tuple[str, ...] = ()
    reasons: Tuple[str, ...] = ()
    cutoff: bool = False
    note: str = ""

    def as_dict(self) -> dict:
        return {"stage": self.stage, "outcome": self.outcome, "token": self.token, "tiers": list(self.tiers),
                "reasons": list(self.reasons), "cutoff": self.cutoff, "note": self.note}


def _step(held: Held, outcome: str, cutoff: bool = False) -> Step:
    return Step(held.stage, outcome, held.token, held.tiers, tuple(map(str, held.reasons)) if outcome == BUILT
                else (), cutoff)


@dataclass(frozen=True)
class Build:
    """A target's newest build of one kernel definition (see the module docstring)."""

    label: str
    kernel: str
    place: Optional[str]
    sm: Optional[int]
    signature: str
    config: str
    created: float
    steps: Tuple[Step, ...]
    why: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()  # (stage, its reasons), last built stage first
    other_targets: Tuple[int, ...] = ()

    @property
    def root_cause(self) -> Optional[Tuple[str, Tuple[str, ...]]]:
        """(stage, its own reasons) where the why chain ends, or None where nothing was built."""
        if not self.why:
            return None
        stage, reasons = self.why[-1]
        return stage, tuple(own(reasons)) or reasons

    @property
    def cutoffs(self) -> List[Tuple[str, Tuple[str, ...], List[str]]]:
        """(stage rebuilt to the same bytes, its own reasons, the stages reused after it)."""
        found = []
        for i, step in enumerate(self.steps):
            if step.outcome == BUILT and i + 1 < len(self.steps) and self.steps[i + 1].cutoff:
                reused = []
                for later in self.steps[i + 1:]:
                    if later.outcome != HIT:
                        break
                    reused.append(later.stage)
                found.append((step.stage, tuple(own(step.reasons)), reused))
        return found

    def as_dict(self, now: float) -> dict:
        root = self.root_cause
        return {"label": self.label, "kernel": self.kernel, "place": self.place, "sm": self.sm,
                "signature": self.signature, "config": self.config, "created": self.created,
                "age_seconds": round(max(0.0, now - self.created), 1),
                "stages": [step.as_dict() for step in self.steps],
                "why": [{"stage": stage, "reasons": list(reasons)} for stage, reasons in self.why],
                "root_cause": None if root is None else {"stage": root[0], "reasons": list(root[1])},
                "cutoffs": [{"stage": stage, "reasons": list(reasons), "reused": reused,
                             "text": cutoff_phrase(stage, reasons, reused)}
                            for stage, reasons, reused in self.cutoffs],
                "other_targets": list(self.other_targets)}


def _merged(why) -> List[Tuple[List[str], Tuple[str, ...]]]:
    """The why chain with stages that give the same reasons on one line: "cubin, ptx and llvm"."""
    merged: List[Tuple[List[str], Tuple[str, ...]]] = []
    for stage, reasons in why:
        if merged and merged[-1][1] == reasons:
            merged[-1][0].append(stage)
        else:
            merged.append(([stage], reasons))
    return merged


def _upstream_steps(entries: CachedEntries, anchor: Held) -> Dict[str, Step]:
    """The stages before `anchor` (built) back to llvm: the entry each was built from, built or found."""
    steps: Dict[str, Step] = {anchor.stage: _step(anchor, BUILT)}
    down, down_built, below = anchor, True, anchor.seconds
    chain = _chain_of(anchor)
    while down.stage != chain.entry:
        stage = chain.upstream(down.stage)
        up = entries.get(stage, down.upstream)
        if up is None:
            why = entries.dropped(stage, down.upstream) if down.upstream else None
            steps[stage] = Step(stage, GONE, down.upstream or None,
                                note=f"no longer cached{f' ({why})' if why else ''}" if down.upstream else
                                f"the {down.stage} entry does not name it (stored by an older version)")
            return steps
        if down_built:
            built = _built_by_same_build(down, up)
        else:  # `down` was found: `up` too, unless stored again since (same token, same bytes) by this build
            built = (up.created > down.created and _same_config(anchor, up)
                     and 0 <= anchor.created - up.created <= below + _SAME_BUILD_SECONDS)
        steps[stage] = _step(up, BUILT if built else HIT, cutoff=False)
        if built and not down_built:
            steps[down.stage] = dataclasses.replace(steps[down.stage], cutoff=True)
        below += up.seconds if built else 0.0
        down, down_built = up, built
    return steps


def _downstream_steps(entries: CachedEntries, anchor: Held) -> Dict[str, Step]:
    """The stages after `anchor`: the entries keyed on the bytes before them
    and the anchor's config, all found (a cutoff right after `anchor`)."""
    steps: Dict[str, Step] = {}
    before = anchor
    chain = _chain_of(anchor)
    built = [stage for stage in chain.stages if stage in _BUILT_STAGES]
    for stage in built[built.index(anchor.stage) + 1:]:
        wanted = _reads(stage, anchor.config_fields, chain)
        found = [h for h in entries.of(anchor.kernel, anchor.place, stage)
                 if h.created <= anchor.created and _reads(stage, h.config_fields, chain) == wanted
                 and getattr(h.components.get(before.stage), "digest", None) == before.digest]
        if not found:
            steps[stage] = Step(stage, MISSING, note=f"no {stage} entry built from the {before.stage} "
                                                     "entry's bytes is cached (not built, or since removed)")
            return steps
        before = found[-1]
        steps[stage] = _step(before, HIT, cutoff=stage == built[built.index(anchor.stage) + 1])
    return steps


def _typing_step(entries: CachedEntries, llvm: Optional[Step], chain: Chain) -> Step:
    """Typing, from the step of the stage built from it (`llvm`: llvm, or mlir)."""
    if llvm is None or llvm.outcome in (GONE, MISSING):
        return Step("typing", MISSING, note="typed IR is kept in memory only")
    if llvm.outcome == HIT:
        return Step("typing", NOT_NEEDED)
    held = entries.get(llvm.stage, llvm.token)
    reasons = typing_reasons(entries, held) if _says_upstream_changed(held.reasons, llvm.stage, chain) else ()
    return Step("typing", BUILT, reasons=reasons, note="typed IR is kept in memory only")


def _why(steps: Sequence[Step], stages: Chain) -> Tuple[Tuple[str, Tuple[str, ...]], ...]:
    """From the last stage built, its reasons, then the stage before's while
    the one after says "STAGE input changed" (or gives the same reasons: a
    first compile) and that stage was built."""
    built = [step for step in steps if step.outcome == BUILT]
    if not built:
        return ()
    by_stage = {step.stage: step for step in steps}
    step, chain = built[-1], []
    while True:
        chain.append((step.stage, step.reasons))
        if step.stage == stages.stages[0]:
            return tuple(chain)
        before = by_stage.get(stages.upstream(step.stage))
        if before is None or before.outcome != BUILT or not before.reasons or not (
                _says_upstream_changed(step.reasons, step.stage, stages) or before.reasons == step.reasons):
            return tuple(chain)
        step = before


def build_of(entries: CachedEntries, anchor: Held, label: str, others=()) -> Build:
    """The build that stored `anchor` (see the module docstring)."""
    chain = _chain_of(anchor)
    steps = {**_upstream_steps(entries, anchor), **_downstream_steps(entries, anchor)}
    steps["typing"] = _typing_step(entries, steps.get(chain.entry), chain)
    ordered = tuple(steps[stage] for stage in chain.stages if stage in steps)
    return Build(label, anchor.kernel, anchor.place, _sm(anchor), anchor.signature, anchor.config,
                 anchor.created, ordered, _why(ordered, chain), tuple(others))


def why_chain(entries: CachedEntries, held: Held) -> List[Tuple[str, Optional[str], Tuple[str, ...]]]:
    """Why one entry was built, followed upstream: [(stage, token, reasons)],
    the entry first, then the entry before it while the one after says
    "STAGE input changed" and that entry was built for it (typing: its
    reasons from the llvm entry's typing inputs, token None)."""
    chain = [(held.stage, held.token, tuple(map(str, held.reasons)))]
    stages = _chain_of(held)
    while held.stage in stages.back and _says_upstream_changed(held.reasons, held.stage, stages):
        up = entries.get(stages.upstream(held.stage), held.upstream)
        if up is None or not _built_by_same_build(held, up):
            return chain
        chain.append((up.stage, up.token, tuple(map(str, up.reasons))))
        held = up
    if held.stage == stages.entry and _says_upstream_changed(held.reasons, held.stage, stages):
        reasons = typing_reasons(entries, held)
        if reasons:
            chain.append((stages.stages[0], None, reasons))
    return chain


def entry_chain(tier, stage: str, header: dict) -> List[Tuple[str, Optional[str], Tuple[str, ...]]]:
    """`why_chain` of the entry whose header is `header`, in `tier` (what
    ``gpucache show`` prints as "built"); the entry alone where its reasons
    name no stage before it (nothing more to read) or the tier lists it not."""
    alone = [(stage, header["token"], tuple(map(str, header.get("reasons") or ())))]
    chain = _chain_of(SimpleNamespace(config_fields=header.get("config_fields")))
    if stage not in _BUILT_STAGES or stage not in chain.stages or not _says_upstream_changed(alone[0][2], stage,
                                                                                              chain):
        return alone
    entries = CachedEntries([tier], _BUILT_STAGES)
    held = entries.get(stage, header["token"])
    return why_chain(entries, held) if held is not None else alone


# -- which kernel, which targets ---------------------------------------------


def _definitions(entries: CachedEntries) -> Dict[str, Tuple[str, Optional[str]]]:
    """Each kernel definition's label (as gpucache ls shows it) -> (qualified name, place)."""
    from ..views.entries import kernel_labels

    rows = [{"stage": stage, "token": token, "kernel": held.kernel, "place": held.place, "created": held.created}
            for (stage, token), held in entries.by_token.items()]
    labels = kernel_labels(rows)
    return {labels[(r["stage"], r["token"])]: (r["kernel"], r["place"]) for r in rows}


def _matching(definitions, name: str) -> List[str]:
    """The labels `name` names: a label itself, else every definition whose
    short or qualified name it is."""
    if name in definitions:
        return [name]
    return sorted(label for label, (kernel, _) in definitions.items() if name in (kernel, short_name(kernel)))


def _unknown(definitions, name: str, where: str) -> CommandError:
    names = sorted(set(definitions) | {short_name(kernel) for kernel, _ in definitions.values()})
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    if close:
        hint = f" (did you mean {' or '.join(close)}?)"
    elif names:
        hint = f" (it holds {', '.join(names[:8])}{', ...' if len(names) > 8 else ''})"
    else:
        hint = " (it holds no entries)"
    return CommandError(f"no kernel named {name!r} in {where}{hint}; gpucache ls lists the kernels")


def newest_builds(entries: CachedEntries, name: str, sms: Optional[Sequence[int]] = None,
                  where: str = "the cache") -> List[Build]:
    """The newest build of kernel `name` per definition it names, for each
    target in `sms` (default: its newest build's target).  CommandError for
    a name or target the entries do not know (close names suggested)."""
    definitions = _definitions(entries)
    labels = _matching(definitions, name)
    if not labels:
        raise _unknown(definitions, name, where)
    builds = []
    for label in labels:
        kernel, place = definitions[label]
        stored = [h for stage in _BUILT_STAGES for h in entries.of(kernel, place, stage)]
        targets = sorted({_sm(h) for h in stored if _sm(h) is not None})
        wanted = list(dict.fromkeys(sms)) if sms else [_sm(max(stored, key=lambda h: h.created))]
        missing = [sm for sm in wanted if sm not in targets]
        if missing and len(labels) == 1:
            raise CommandError(f"{label} has no entries for {', '.join(f'sm_{sm}' for sm in missing)} in {where}; "
                               f"it was built for {', '.join(f'sm_{sm}' for sm in targets)}")
        for sm in (sm for sm in wanted if sm in targets):
            anchor = max((h for h in stored if _sm(h) == sm), key=lambda h: h.created)
            builds.append(build_of(entries, anchor, label, [t for t in targets if t not in wanted]))
    if not builds:
        raise CommandError(f"{name} has no entries for {', '.join(f'sm_{sm}' for sm in sms)} in {where}")
    return builds


# -- the command ---------------------------------------------------------------


def _tiers(disk, args) -> Tuple[list, List[str]]:
    """The tiers to read (the disk tier, the shared tier where a URL is set)
    and notes on those left out."""
    from .server import NotAnswering, quiet, redis_url, shared_tier

    tiers, notes = ([disk] if disk is not None else []), []
    url = redis_url(args)
    if url is None:
        return tiers, notes
    from ..store.shared import UnsignedSharedTier, unsigned_message

    try:
        with quiet():
            tiers.append(shared_tier(url))
    except UnsignedSharedTier:
        notes.append(f"the shared cache is not read: {unsigned_message(url)}")
    except NotAnswering as exc:
        if not tiers:
            raise
        notes.append(f"{exc}; read the disk cache only")
    if not tiers:
        raise CommandError(f"{args.disk_problem}; and {notes[0]}" if notes else args.disk_problem)
    return tiers, notes


def cmd_explain(disk, args, out) -> int:
    tiers, notes = _tiers(disk, args)
    for note in notes:
        print(f"gpucache explain: {note}", file=sys.stderr)
    from .server import quiet

    with quiet():
        entries = CachedEntries(tiers)
    where = " and ".join(tier.location for tier in tiers)
    sms = [sm for given in args.sm or () for sm in given]  # (--sm 80,86 90: each word a list)
    builds = newest_builds(entries, args.name, sms, where)
    now = time.time()
    if args.json:
        out({"name": args.name, "tiers": [tier.location for tier in tiers],
             "builds": [build.as_dict(now) for build in builds]})
        return 0
    for i, build in enumerate(builds):
        if i:
            out("")
        out("\n".join(build_lines(build, now)))
    return 0


def build_lines(build: Build, now: float) -> List[str]:
    """A build for people: a line per stage, the why chain, the root cause, the cutoffs."""
    target = f"sm_{build.sm}" if build.sm is not None else "?"
    lines = [f"{build.label} ({build.kernel}) {target}: newest build {format_age(now - build.created)} ago, "
             f"{build.signature} [{build.config}]"]
    for step in build.steps:
        outcome = step.outcome + (" (same bytes)" if step.cutoff else "")
        token = short_token(step.token) if step.token else ""
        said = ", ".join(step.reasons)
        if step.note:
            said += f" ({step.note})" if said else step.note
        lines.append(f"  {step.stage:<8}{outcome:<18}{token:<13}{said}".rstrip())
    if build.why:
        lines += [f"  {'why:' if i == 0 else '   <-'} {and_join(stages)} built because {', '.join(reasons) or '-'}"
                  for i, (stages, reasons) in enumerate(_merged(build.why))]
        stage, reasons = build.root_cause
        lines.append(f"  root cause: {', '.join(reasons)} ({stage})")
    else:
        lines.append("  nothing was built")
    for stage, reasons, reused in build.cutoffs:
        lines.append(f"  early cutoff: {cutoff_phrase(stage, reasons, reused)}")
    if build.other_targets:
        shown = " ".join(str(sm) for sm in build.other_targets)
        lines.append(f"  also built for {', '.join(f'sm_{sm}' for sm in build.other_targets)}: "
                     f"gpucache explain {build.label} --sm {shown}")
    return lines
