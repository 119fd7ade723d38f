"""`Backend`: what the pipeline asks of a compiler (see the package's docstring)."""

from __future__ import annotations

from typing import Any, Dict, Mapping, Sequence

from ..keys.stagespec import Chain


class Backend:
    """One compiler, as the pipeline asks it.

    ``chain``: the per-target stages it runs, in order (each declared in
    `stagespec`, built by `build`); the fatbin after them is the core's.
    ``settings_name``: what the token of the stage built from typing calls
    `settings()`.  Every method gets the `pipeline.CompilePlan` of one
    compile where it needs one: its request, snapshot (`plan.identity`),
    config, and the tokens' parts it computed."""

    name: str = ""
    chain: Chain
    settings_name: str = "compiler settings"

    def check_can_compile(self) -> None:
        """Refuse, with the fix, what in this process would make its output
        differ from the compiler's own (numba-cuda: its CUDA runtime on)."""

    def compiling(self):
        """A context manager around each attempt of a compile (numba-cuda:
        what its compiler registers meanwhile follows from what was hashed)."""
        raise NotImplementedError

    def settings(self, reload: bool = True) -> Mapping[str, Any]:
        """The compiler's own settings that its lowering reads, as they are
        now (reloaded first unless `reload` is False): each token after
        typing hashes them."""
        raise NotImplementedError

    def typing_components(self, plan) -> Dict[str, Any]:
        """What its typing token reads besides the snapshot, the signature and
        the toolchain: {name: `tokens.Component`}.  May set what `build`
        needs on `plan`."""
        raise NotImplementedError

    def debug_source_files(self, artifact) -> Sequence[str]:
        """The source files whose lines the debug info of `artifact` (the
        chain's entry stage's) names: a stage that links embeds them, so its
        token hashes them (`StageSpec.links`)."""
        return ()

    def build(self, stage: str, plan, upstream):
        """Stage `stage`'s artifact, from `upstream` (the artifact of the stage
        before it; None for the first)."""
        raise NotImplementedError
