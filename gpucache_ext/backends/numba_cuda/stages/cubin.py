"""The cubin stage: PTX or LTO-IR linked by nvJitLink, with numba's helpers
and the kernel's external code, for a config's sm -> cubin (`CubinArtifact`)."""

from __future__ import annotations

from ....pipeline.artifacts import CubinArtifact, PTXArtifact
from ....keys.config import CompileConfig
from ....errors import CompileError, UnsupportedKernelError, compile_error
from ....toolchain import linking


def _link(ptx: PTXArtifact, config: CompileConfig, output: str, external=()):
    from cuda.core import Linker, LinkerOptions, ObjectCode

    if ptx.ltoir is not None:
        objects = [ObjectCode.from_ltoir(ptx.ltoir, name="kernel.ltoir")]
    else:
        objects = [ObjectCode.from_ptx(p.encode(), name=f"kernel{i}.ptx") for i, p in enumerate(ptx.ptx)]
    options = LinkerOptions(
        arch=config.sm_name,
        max_register_count=config.max_registers,
        link_time_optimization=True if ptx.ltoir is not None else None,
        ptx=True if output == "ptx" else None,
        verbose=True,
    )
    objects.extend(linking.object_codes(_link_inputs(ptx) + list(external), config.cc, ptx.ltoir is not None))
    if ptx.cooperative:
        from ....toolchain import cudadevrt

        objects.append(ObjectCode.from_library(cudadevrt(), name="libcudadevrt.a"))
    linker = Linker(*objects, options=options)
    try:
        code = linker.link(output).code
        log = (linker.get_info_log() or "").replace("\x00", "").strip()
    finally:
        linker.close()
    return code, log


def _link_inputs(ptx: PTXArtifact):
    """The artifact's external code, and numba's reshape helper where the
    code calls it (numba-cuda links it on the same test)."""
    inputs = list(ptx.links)
    code = [p.encode() for p in ptx.ptx] + ([ptx.ltoir] if ptx.ltoir is not None else [])
    if any(name.encode() in part for name in linking.reshape_functions() for part in code):
        inputs.append(linking.reshape_helper())
    return inputs


def run_cubin(ptx: PTXArtifact, config: CompileConfig, qualname="kernel", external=()) -> CubinArtifact:
    """Link PTX (or LTO-IR), numba's helpers and the `external` code (the
    `LinkInput`s of the kernel's external functions) into a cubin for
    config.sm with nvJitLink."""
    external = tuple(external)
    try:
        cubin, log = _link(ptx, config, "cubin", external)
        linked_ptx = None
        if ptx.ltoir is not None:
            code, _ = _link(ptx, config, "ptx", external)
            linked_ptx = code.decode() if isinstance(code, bytes) else str(code)
    except (CompileError, UnsupportedKernelError):
        raise
    except Exception as exc:
        raise compile_error(qualname, "cubin", exc) from exc
    return CubinArtifact(bytes(cubin), log, linked_ptx, ptx.entry_name, external)
