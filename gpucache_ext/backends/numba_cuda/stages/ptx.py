"""The ptx stage: NVVM IR compiled by libNVVM with a config's options ->
PTX, or LTO-IR (`PTXArtifact`)."""

from __future__ import annotations

from numba.cuda.cudadrv import nvvm

from ....pipeline.artifacts import LLVMArtifact, PTXArtifact
from ....keys.config import CompileConfig
from ....errors import compile_error


def nvvm_options(config: CompileConfig) -> dict:
    """The libNVVM options for `config`, exactly as passed to compile_ir."""
    options = {"arch": config.arch, "opt": config.opt}
    options.update({k: int(v) for k, v in config.nvvm_math().items()})
    if config.debug:
        options["g"] = None
    if config.lto:
        options["gen-lto"] = None
    return options


def run_ptx(llvm: LLVMArtifact, config: CompileConfig, qualname="kernel") -> PTXArtifact:
    """Compile NVVM IR with libNVVM for config.sm."""
    options = nvvm_options(config)
    # No numba lock: libNVVM's API is thread-safe (a program per call), and
    # this reads nothing of numba's but the libdevice bytes, pinned once
    # (`toolchain`), so several targets' PTX compile at once (compile_fatbin).
    try:
        if config.lto:
            return PTXArtifact((), bytes(nvvm.compile_ir(list(llvm.modules), **options)),
                               llvm.entry_name, llvm.cooperative, llvm.links)
        if config.debug:
            # As numba-cuda: with -g each module is compiled on its own.
            outputs = [nvvm.compile_ir(m, **options) for m in llvm.modules]
        else:
            outputs = [nvvm.compile_ir(list(llvm.modules), **options)]
    except Exception as exc:
        raise compile_error(qualname, "ptx", exc) from exc
    ptx = tuple(out.decode().strip("\x00").strip() for out in outputs)
    return PTXArtifact(ptx, None, llvm.entry_name, llvm.cooperative, llvm.links)
