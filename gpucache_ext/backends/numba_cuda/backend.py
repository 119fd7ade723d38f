"""`NumbaCuda`, the backend (see the package's docstring)."""


from __future__ import annotations

from typing import Any, Dict, Mapping

from ...pipeline.audit import source_files_component
from .environment import environment_components
from ...errors import GpuCacheError, SnapshotChanged, UnsupportedKernelError
from .extensions import derived_during, extensions_component
from ...importing import lazy_module
from .numba_compat import check_numba_runtime
from .proxies import DeviceProxies
from .signatures import normalize_signature
from ...sources.snapshot import rebind
from ...keys.stagespec import DEFAULT_CHAIN
from ...pipeline import debuginfo
from ...keys.tokens import parts_digest
from ...toolchain import numba_settings
from ..base import Backend

# numba-cuda's compiler, imported by the first compile: the cache opens, lists and reports
# without it (under numba's CUDA simulator numba-cuda's compiler cannot be imported at all)
compiler = lazy_module("gpucache_ext.backends.numba_cuda.stages")


class NumbaCuda(Backend):
    name = "numba-cuda"
    chain = DEFAULT_CHAIN  # typing, llvm, ptx, cubin
    settings_name = "numba settings"

    def check_can_compile(self) -> None:
        check_numba_runtime()

    def refuse(self, func) -> None:
        from .launch.device import simulator_imported

        if simulator_imported():
            raise GpuCacheError(
                "numba's CUDA simulator is on (NUMBA_ENABLE_CUDASIM=1 when numba.cuda was imported), and "
                "numba-cuda's compiler cannot be imported under it, so KernelCache cannot compile; unset "
                "NUMBA_ENABLE_CUDASIM to compile (no GPU is needed), or use gpucache_ext.jit, whose kernels "
                "run on the simulator while it is on")
        targetoptions = getattr(func, "targetoptions", None)
        if isinstance(targetoptions, dict) and targetoptions.get("device"):
            name = getattr(func, "__name__", "the function")
            raise UnsupportedKernelError(
                f"{name} is a device function (cuda.jit(device=True)): KernelCache compiles kernels, which "
                f"a device function becomes part of; compile a kernel that calls {name}, or, for the device "
                f"function's own PTX, numba.cuda.compile_ptx({name}.py_func, sig, device=True, cc=...)")

    def signature(self, sig) -> tuple:
        return normalize_signature(sig)

    def device_proxies(self, lock, limit):
        return DeviceProxies(lock, limit)

    def default_sm(self) -> int:
        from .launch.device import default_sm

        return default_sm()

    def compiling(self):
        return derived_during()  # (what numba registers meanwhile follows from what was hashed)

    def settings(self, reload: bool = True) -> Mapping[str, Any]:
        return numba_settings(reload)

    def typing_components(self, plan) -> Dict[str, Any]:
        environment = environment_components()  # what code numba ran has read of the environment
        plan.environment = parts_digest(environment) if environment else None
        # numba's extension tables, where user code registered
        plan.extensions = extensions_component(plan.environment)
        return {**({"numba extensions": plan.extensions} if plan.extensions is not None else {}), **environment}

    def debug_source_files(self, artifact):
        return debuginfo.debug_source_files(artifact)

    def build(self, stage: str, plan, upstream):
        return getattr(self, "_" + stage)(plan, upstream)

    @staticmethod
    def _typing(plan, _):
        """Typed from the snapshot through device proxies."""
        proxies = plan.pipeline.proxies
        # (a device function types against both: what it typed under others is not reused)
        extensions = None if plan.extensions is None and plan.environment is None else (
            None if plan.extensions is None else plan.extensions.digest, plan.environment)
        proxy_for = proxies.fresh(extensions) if plan.forced else proxies.under(extensions)
        pyfunc = rebind(plan.identity, proxy_for)
        typed = compiler.run_typing(pyfunc, plan.argtypes, plan.config, kernel=True,
                                  uid=compiler.symbol_uid(plan.identity.digest), qualname=plan.kernel,
                                  fresh=plan.forced, debug_filename=plan.identity.debug_filename,
                                  def_line=plan.identity.def_line)
        # keep the proxies the typed IR refers to alive as long as it is cached
        typed.proxies = tuple(proxy_for(dispatcher, dev) for dispatcher, dev in plan.identity.devices)
        typed.snapshot_bytes = plan.identity.snapshot_bytes
        plan.check_library_reads("typed")
        return typed

    @staticmethod
    def _llvm(plan, typed):
        """Lowered with the numba settings its token hashed: numba reads them
        from its config module as it lowers, where another thread may have
        set one meanwhile (then the compile starts again)."""
        llvm = compiler.run_llvm(typed, plan.config, plan.identity.link_keys)
        if numba_settings(reload=False) != plan.settings:
            raise SnapshotChanged(f"numba's settings changed while {plan.kernel} was being lowered")
        plan.check_library_reads("lowered")
        return llvm

    def rebuild(self, stage: str, upstream, config, kernel: str, links):
        if stage == "ptx":
            return compiler.run_ptx(upstream, config, kernel)
        if stage == "cubin":
            return compiler.run_cubin(upstream, config, kernel, links)
        raise ValueError(f"{self.name} builds {stage!r} from more than the bytes before it")

    def _ptx(self, plan, llvm):
        return self.rebuild("ptx", llvm, plan.config, plan.kernel, ())

    def _cubin(self, plan, ptx):
        """The source files a lineinfo cubin names are hashed in its token,
        and must not change while nvJitLink reads them."""
        cubin = self.rebuild("cubin", ptx, plan.config, plan.kernel, plan.identity.links)
        if source_files_component(plan.sources) != plan.sources_part:
            raise SnapshotChanged(f"a source file of {plan.kernel} changed while it was being linked")
        return cubin
