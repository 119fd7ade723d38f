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

    def check_config(self, config) -> None:
        """Refuse, with a `ConfigError` naming the flag and the fix, a config
        with a field this compiler does not take (numba-cuda-mlir: libNVVM's
        math options besides fastmath)."""

    def refuse(self, func) -> None:
        """Refuse, naming the fix, a compile of `func` that cannot be (numba-cuda:
        under its simulator; a device function, which a kernel compiles with)."""

    def signature(self, sig) -> tuple:
        """`sig` (as a user writes one) as the argument types a compile is keyed on."""
        raise NotImplementedError

    def device_proxies(self, lock, limit):
        """What a cache's typing calls its device functions through (numba-cuda:
        `proxies.DeviceProxies`), at most ``limit()`` of them."""
        return None

    def default_sm(self) -> int:
        """The target a kernel gets where none is named: the GPU's, else a default."""
        raise NotImplementedError

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

    def rebuild(self, stage: str, upstream, config, kernel: str, links):
        """A stage of the chain's back (keyed on the bytes before it) built from
        those bytes alone: what its `build` does from `upstream`, for the audit
        of a stored entry (`config`: the entry's, `links`: the code it linked)."""
        raise NotImplementedError
