"""The stages, declared once (`StageSpec`): whether its entries persist,
whether it is keyed on the bytes before it (early cutoff), whether it may
read the target, whether it is built per target, whether it links, and the
tools its token names.  A backend runs its stages in the order its `Chain`
says, which makes each one's upstream.  The tuples other modules iterate
(`STAGES`, `ALL_STAGES`, `KEYED_ON_BYTES`...) are made from the
declarations; adding a stage is an edit here and its backend's chain and
build.  Imports nothing of the package: everything may read it.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Optional, Tuple


@dataclasses.dataclass(frozen=True)
class StageSpec:
    """One stage of the pipeline, declared once: the driver (`pipeline`),
    the miss prediction, the codec, the toolchain part of its token, the
    reasons and the views read these declarations (the config fields a stage
    reads are declared with the fields: `config.Flag.stages`, `FIELD_STAGES`)."""

    name: str
    persisted: bool  # held by the persistent tiers (typed IR is not portable: memory only)
    keyed_on_bytes: bool = False  # its token hashes the upstream artifact's digest (early cutoff)
    reads_target: bool = False  # may read the target while it runs: the pipeline tracks whether it did
    per_target: bool = True  # built for each target (the fatbin: once for a list of targets, `Targets`)
    # the tools it runs whatever the backend, whose versions its token names
    # (the backend's own packages are its chain's: `Chain.tools_of`)
    tools: Tuple[str, ...] = ()
    # its token names the code linked in with it (`linking`) and the source
    # files its input's debug info names (a lineinfo cubin embeds them)
    links: bool = False
    max_entries: int = 1024  # what the memory tier keeps of it by default (`KernelCache(max_entries=)`)
    # its artifacts' class ("module:Class"), which says what of one persists
    # and how it is read back (`state`, `rebuild`: see `pipeline.artifacts`)
    artifact: Optional[str] = None

    def __post_init__(self):
        if self.persisted and not self.artifact:
            raise ValueError(f"stage {self.name!r} persists: name its artifacts' class as artifact='module:Class'")


_ARTIFACTS = "gpucache_ext.pipeline.artifacts:"
_CUDA_TOOLS = ("cuda", "cuda-bindings")  # (from lowering on: the CUDA major, and the bindings the tools are called by)
STAGE_SPECS: Tuple[StageSpec, ...] = (
    StageSpec("typing", persisted=False, reads_target=True, max_entries=256, tools=("python", "numpy")),
    # (package versions only: checking an llvm entry loads no library, `gpucache verify`)
    StageSpec("llvm", persisted=True, reads_target=True, max_entries=512,
              artifact=_ARTIFACTS + "LLVMArtifact", tools=_CUDA_TOOLS),
    # numba-cuda-mlir's lowering: MLIR text (gpu, arith, memref, cf dialects), its target in it
    # (the PTX ISA it names follows the NVRTC installed)
    StageSpec("mlir", persisted=True, reads_target=True, max_entries=512,
              artifact=_ARTIFACTS + "MLIRArtifact", tools=("nvrtc",) + _CUDA_TOOLS),
    StageSpec("ptx", persisted=True, keyed_on_bytes=True, artifact=_ARTIFACTS + "PTXArtifact",
              tools=("libnvvm", "libdevice") + _CUDA_TOOLS),
    # (NVRTC compiles the .cu sources linked in, numba's helpers among them)
    StageSpec("cubin", persisted=True, keyed_on_bytes=True, links=True, artifact=_ARTIFACTS + "CubinArtifact",
              tools=("nvjitlink", "cuda-core", "cudadevrt", "nvrtc") + _CUDA_TOOLS),
    StageSpec("fatbin", persisted=True, per_target=False, max_entries=256, artifact=_ARTIFACTS + "FatbinArtifact",
              tools=("nvfatbin",) + _CUDA_TOOLS),
)
STAGE_SPEC: Dict[str, StageSpec] = {spec.name: spec for spec in STAGE_SPECS}
# The stages a target may go through, of every backend's chain (the driver builds each).
TARGET_STAGES: Tuple[str, ...] = tuple(spec.name for spec in STAGE_SPECS if spec.per_target)
# Every stage the cache keeps: `TARGET_STAGES`, then the fatbin a list of targets is assembled into.
ALL_STAGES: Tuple[str, ...] = tuple(spec.name for spec in STAGE_SPECS)
# The stages keyed on the bytes of the artifact before them (early cutoff):
# a hit there may come from an upstream stage rebuilt to the same bytes.
KEYED_ON_BYTES: Tuple[str, ...] = tuple(spec.name for spec in STAGE_SPECS if spec.keyed_on_bytes)
# Stages that may read the target while they run (tracked, see `CompileConfig.sm`).
TARGET_TRACKED_STAGES: Tuple[str, ...] = tuple(spec.name for spec in STAGE_SPECS if spec.reads_target)
# The stages the persistent tiers hold.
PERSISTENT_STAGES: Tuple[str, ...] = tuple(spec.name for spec in STAGE_SPECS if spec.persisted)
# Those of a target's build (a target's entries, what an audit compiles again), of every backend.
TARGET_PERSISTENT_STAGES: Tuple[str, ...] = tuple(name for name in TARGET_STAGES if STAGE_SPEC[name].persisted)


@dataclasses.dataclass(frozen=True)
class Chain:
    """The per-target stages one backend runs, in order: each is built from
    the one before it.  The driver and the miss prediction walk it the same
    way: the `entry` stage (the last one keyed on its token) is looked up
    first, and the `front` before it is built only where it misses; the
    `back` after it is keyed on the bytes before each (early cutoff).  It
    starts with typing (its token holds the kernel's snapshot) and ends with
    ptx and cubin, which the fatbin is assembled from.  ``tools``: per
    stage, the backend's own packages its token names besides the stage's
    own tools (numba-cuda: numba, llvmlite and itself), so that no two
    compilers' entries share a token.  ``reads``: per stage, the config
    fields its token hashes in this chain, where the compiler reads them
    elsewhere than the fields' own declarations say (`config.Flag.stages`:
    numba-cuda's); a chain that gives them gives every stage's."""

    stages: Tuple[str, ...]
    tools: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()  # (given as a dict: stage -> its packages)
    reads: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()  # (given as a dict: stage -> the fields it reads)
    # typing up to `entry`: keyed on their tokens, built in one thread (made from `stages`)
    front: Tuple[str, ...] = dataclasses.field(init=False, repr=False, compare=False)
    # the stages after `entry`, each keyed on the bytes before it (made from `stages`)
    back: Tuple[str, ...] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        for name in ("tools", "reads"):
            given = getattr(self, name)
            if isinstance(given, dict):
                object.__setattr__(self, name, tuple((stage, tuple(names)) for stage, names in given.items()))
        problems = [f"{name!r} is not a per-target stage declared in STAGE_SPECS"
                    for name in self.stages if name not in STAGE_SPEC or not STAGE_SPEC[name].per_target]
        ends = self.stages[:1] == ("typing",) and self.stages[-2:] == ("ptx", "cubin")
        if not ends or len(set(self.stages)) != len(self.stages):
            problems.append("a chain starts with typing, ends with ptx then cubin, and names each stage once")
        keyed = [STAGE_SPEC[name].keyed_on_bytes for name in self.stages if name in STAGE_SPEC]
        if keyed[:2] != [False, False] or keyed != sorted(keyed):
            problems.append("the stages keyed on the bytes before them come last, "
                            "after typing and the one built from it")
        if self.reads and set(dict(self.reads)) != set(self.stages):
            problems.append("a chain that says which fields its stages read says it of every stage")
        if problems:
            raise ValueError(f"stage chain {self.stages}: " + "; ".join(problems))
        # (worked out once: every compile walks them)
        front = tuple(name for name in self.stages if not STAGE_SPEC[name].keyed_on_bytes)
        object.__setattr__(self, "front", front)
        object.__setattr__(self, "back", self.stages[len(front):])

    @property
    def entry(self) -> str:
        """The stage looked up first: the last one keyed on its token."""
        return self.front[-1]

    def upstream(self, stage: str) -> Optional[str]:
        """The stage `stage` is built from (None: typing; the fatbin's entry
        names its first cubin's)."""
        if stage not in self.stages and stage in STAGE_SPEC and not STAGE_SPEC[stage].per_target:
            return self.stages[-1]
        index = self.stages.index(stage)
        return self.stages[index - 1] if index else None

    def tools_of(self, stage: str) -> Tuple[str, ...]:
        """The tools `stage`'s token names in this chain: its own, then the backend's."""
        own = STAGE_SPEC[stage].tools
        return own + tuple(name for name in dict(self.tools).get(stage, ()) if name not in own)

    def reads_of(self, stage: str) -> Optional[Tuple[str, ...]]:
        """The config fields `stage`'s token hashes in this chain (None: as
        the fields declare, `config.FIELD_STAGES`)."""
        return dict(self.reads).get(stage) if self.reads else None

    def until(self, stage: str) -> Tuple[str, ...]:
        """The stages up to `stage`, included."""
        return self.stages[:self.stages.index(stage) + 1]


# numba-cuda's chain, the default backend's: what reads stored entries
# without a compile (an audit of what a tier holds, the CLI's explain) takes
# a stage's upstream from it where an entry names no other backend.
DEFAULT_CHAIN = Chain(("typing", "llvm", "ptx", "cubin"), tools={
    "typing": ("numba", "numba-cuda"), "llvm": ("llvmlite", "numba-cuda"), "ptx": ("numba-cuda",),
    "cubin": ("numba-cuda",)})
# The stages a compile of a numba-cuda kernel goes through, in order (numba-cuda-mlir's:
# typing, mlir, ptx, cubin; `backends.numba_cuda_mlir.backend.MLIR_CHAIN`).
STAGES: Tuple[str, ...] = DEFAULT_CHAIN.stages
# (the stages statistics always list: `backends.always_listed`)
