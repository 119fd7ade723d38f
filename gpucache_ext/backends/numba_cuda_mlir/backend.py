"""`NumbaCudaMlir`, the backend (see the package's docstring)."""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Mapping

from ...errors import ConfigError, UnsupportedKernelError
from ...importing import lazy_module
from ...keys.stagespec import Chain
from ...sources.snapshot import rebind
from ..base import Backend
from . import translate

# numba-cuda-mlir's compiler, imported by the first compile (1-2 s)
compiler = lazy_module("gpucache_ext.backends.numba_cuda_mlir.compiler")

_PACKAGE = ("numba-cuda-mlir",)
_LOWERING = ("sm", "opt", "fastmath", "debug", "lineinfo", "launch_bounds", "lto")
# Which stage reads which field, as numba-cuda-mlir compiles: lowering writes the target, the
# optimisation level and fast math into the MLIR (its gpu.module's #nvvm.target) and reads
# debug, lineinfo and the launch bounds; code generation reads them again from its options;
# its linker is given the optimisation level, debug, lineinfo and the register cap.
MLIR_CHAIN = Chain(
    ("typing", "mlir", "ptx", "cubin"),
    tools={"typing": _PACKAGE, "mlir": _PACKAGE, "ptx": _PACKAGE, "cubin": _PACKAGE},
    reads={"typing": (), "mlir": _LOWERING, "ptx": ("sm", "opt", "fastmath", "debug", "lineinfo", "lto"),
           "cubin": ("sm", "opt", "debug", "lineinfo", "max_registers", "lto")})

# numba-cuda's libNVVM math options that numba-cuda-mlir does not take: it follows fastmath alone
_NOT_TAKEN = ("ftz", "prec_div", "prec_sqrt", "fma")


class NumbaCudaMlir(Backend):
    name = "mlir"
    chain = MLIR_CHAIN
    settings_name = "numba-cuda-mlir settings"

    def check_can_compile(self) -> None:
        import importlib.util
        import sys

        # (every compile asks: the search only until numba-cuda-mlir was imported)
        if "numba_cuda_mlir" not in sys.modules and importlib.util.find_spec("numba_cuda_mlir") is None:
            raise ConfigError(
                "the mlir backend compiles with numba-cuda-mlir, which is not installed; install it with "
                "pip install \"gpucache_ext[cu12,mlir]\" (Python 3.11 or later), or use --backend numba-cuda",
                field="backend")

    def check_config(self, config) -> None:
        given = [name for name in _NOT_TAKEN if getattr(config, name) is not None]
        if given:
            flags = ", ".join("--" + name.replace("_", "-") for name in given)
            raise ConfigError(
                f"numba-cuda-mlir takes no {flags}: its math follows --fastmath alone; leave "
                f"{'them' if len(given) > 1 else 'it'} out, or use --backend numba-cuda", field=given[0])
        if config.debug and config.opt:
            raise ConfigError("numba-cuda-mlir compiles --debug only at --opt 0 (ptxas has no optimised "
                              "debugging); add --opt 0", field="opt")

    def refuse(self, func) -> None:
        targetoptions = getattr(func, "targetoptions", None)
        if isinstance(targetoptions, dict) and targetoptions.get("device"):
            name = getattr(func, "__name__", "the function")
            raise UnsupportedKernelError(
                f"{name} is a device function (cuda.jit(device=True)): KernelCache compiles kernels, which "
                f"a device function becomes part of; compile a kernel that calls {name}")

    def signature(self, sig) -> tuple:
        return compiler.normalize_signature(sig)

    def default_sm(self) -> int:
        """``GPUCACHE_SM``, else 86: numba-cuda-mlir's GPU is asked at a launch (`launch`)."""
        from ...keys.config import configured_sm

        return configured_sm()

    def compiling(self):
        return contextlib.nullcontext()

    def settings(self, reload: bool = True) -> Mapping[str, Any]:
        return compiler.settings()

    def typing_components(self, plan) -> Dict[str, Any]:
        """None: what its typing reads besides the snapshot is its own code
        (its package's version is in every token).  Extensions user code
        registered in its registries are refused, naming them: no token covers
        them yet."""
        registered = compiler.user_extensions()
        if registered:
            raise UnsupportedKernelError(
                f"{plan.kernel}: user code registered numba-cuda-mlir extensions ({', '.join(registered[:3])}"
                f"{', ...' if len(registered) > 3 else ''}), which gpucache_ext does not key yet: a change to "
                "them would not be seen; compile with numba-cuda-mlir's own cuda.jit while they are registered")
        return {}

    def build(self, stage: str, plan, upstream):
        if stage == "typing":
            # (a numba-cuda kernel, in a sweep --backend numba-cuda,mlir: numba-cuda's names as numba-cuda-mlir's)
            proxy = translate.device_proxy(rebind, plan.kernel)
            pyfunc = translate.translated(rebind(plan.identity, proxy), plan.kernel)
            return compiler.run_typing(pyfunc, plan.argtypes, plan.config, plan.kernel)
        if stage == "mlir":
            return compiler.run_mlir(upstream, plan.config)
        return self.rebuild(stage, upstream, plan.config, plan.kernel, ())

    def rebuild(self, stage: str, upstream, config, kernel: str, links):
        if stage == "ptx":
            return compiler.run_ptx(upstream, config, kernel)
        if stage == "cubin":
            return compiler.run_cubin(upstream, config, kernel)
        raise ValueError(f"{self.name} builds {stage!r} from more than the bytes before it")
