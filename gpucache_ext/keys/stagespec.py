"""The stages, declared once (`StageSpec`): what each is built from, whether
its entries persist, whether it is keyed on the bytes before it (early
cutoff), whether it may read the target, whether it is built per target, and
the tools its token names.  The tuples other modules iterate (`STAGES`,
`ALL_STAGES`, `KEYED_ON_BYTES`...) are made from the declarations; adding a
stage or changing one is an edit here (and its build, `pipeline.STAGE_TABLE`).
Imports nothing of the package: everything may read it.
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
    upstream: Optional[str]  # the stage it is built from (the fatbin: several targets' cubins and a PTX)
    persisted: bool  # held by the persistent tiers (typed IR is not portable: memory only)
    keyed_on_bytes: bool = False  # its token hashes the upstream artifact's digest (early cutoff)
    reads_target: bool = False  # may read the target while it runs: the pipeline tracks whether it did
    per_target: bool = True  # built for each target (the fatbin: once for a list of targets, `Targets`)
    tools: Tuple[str, ...] = ()  # the tools whose versions its token names (`toolchain.stage_toolchain`)


_CUDA_TOOLS = ("cuda", "cuda-bindings")  # (from lowering on: the CUDA major, and the bindings the tools are called by)
STAGE_SPECS: Tuple[StageSpec, ...] = (
    StageSpec("typing", None, persisted=False, reads_target=True, tools=("python", "numba", "numba-cuda", "numpy")),
    # (package versions only: checking an llvm entry loads no library, `gpucache verify`)
    StageSpec("llvm", "typing", persisted=True, reads_target=True, tools=("llvmlite", "numba-cuda") + _CUDA_TOOLS),
    StageSpec("ptx", "llvm", persisted=True, keyed_on_bytes=True,
              tools=("libnvvm", "libdevice", "numba-cuda") + _CUDA_TOOLS),
    # (NVRTC compiles the .cu sources linked in, numba's helpers among them)
    StageSpec("cubin", "ptx", persisted=True, keyed_on_bytes=True,
              tools=("nvjitlink", "cuda-core", "cudadevrt", "nvrtc", "numba-cuda") + _CUDA_TOOLS),
    StageSpec("fatbin", "cubin", persisted=True, per_target=False, tools=("nvfatbin",) + _CUDA_TOOLS),
)
STAGE_SPEC: Dict[str, StageSpec] = {spec.name: spec for spec in STAGE_SPECS}
# The stages each target goes through.
STAGES: Tuple[str, ...] = tuple(spec.name for spec in STAGE_SPECS if spec.per_target)
# Every stage the cache keeps: `STAGES`, then the fatbin a list of targets is assembled into.
ALL_STAGES: Tuple[str, ...] = tuple(spec.name for spec in STAGE_SPECS)
# The stages keyed on the bytes of the artifact before them (early cutoff):
# a hit there may come from an upstream stage rebuilt to the same bytes.
KEYED_ON_BYTES: Tuple[str, ...] = tuple(spec.name for spec in STAGE_SPECS if spec.keyed_on_bytes)
# Stages that may read the target while they run (tracked, see `CompileConfig.sm`).
TARGET_TRACKED_STAGES: Tuple[str, ...] = tuple(spec.name for spec in STAGE_SPECS if spec.reads_target)
# The stages the persistent tiers hold.
PERSISTENT_STAGES: Tuple[str, ...] = tuple(spec.name for spec in STAGE_SPECS if spec.persisted)
# Those of a target's build (a target's entries, what an audit compiles again).
TARGET_PERSISTENT_STAGES: Tuple[str, ...] = tuple(name for name in STAGES if STAGE_SPEC[name].persisted)
