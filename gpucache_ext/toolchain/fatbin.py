"""The fatbin stage: a multi-target kernel's cubins, and one PTX for forward
compatibility, assembled into one fatbinary with nvFatbin.

The fatbin stage runs after every target's cubin (and the PTX target's ptx)
is found or built.  Its token hashes its members' bytes (their SHA-256) by
architecture, the kernel, its options and nvFatbin's version (see `KernelCache.compile_fatbin`):
adding a target adds one member, and the order targets are listed in does
not matter.  Members are added in a fixed order (cubins by architecture,
then the PTX), so equal inputs give equal bytes.
"""

from __future__ import annotations

import hashlib
from typing import Optional, Sequence, Tuple

from ..pipeline.artifacts import FatbinArtifact, FatbinMember
from ..errors import CompileError
from ..keys.tokens import short_name

# nvFatbin's options (nvFatbinCreate): the defaults, named here because the
# stage's token hashes them.
OPTIONS: Tuple[str, ...] = ()


def member(kind: str, arch: int, token: str, image: bytes) -> FatbinMember:
    """A member for `image` (a cubin, or PTX as bytes) of the entry `token`:
    its digest is that of the bytes themselves, what the fatbin is made of."""
    return FatbinMember(kind, arch, token, hashlib.sha256(image).hexdigest(), len(image))


def image(kind: str, artifact) -> bytes:
    """What a fatbin takes of a cubin artifact (its cubin) or a PTX one (its one module's text)."""
    return artifact.cubin if kind == "cubin" else "\n".join(artifact.ptx).encode()


def ptx_problem(ptx_artifact, cubin_links=()) -> Optional[str]:
    """Why this PTX cannot go into a fatbin for the driver to compile alone
    (None where it can): the driver's JIT links nothing, so a kernel whose
    cubin links other code (numba's helpers, libcudadevrt for grid
    synchronisation, external functions) or is built from LTO-IR has no
    complete PTX of its own."""
    if ptx_artifact.ltoir is not None:
        return "it is built from LTO-IR (lto), which the driver cannot compile"
    if ptx_artifact.cooperative:
        return "it synchronises its grid, which links libcudadevrt"
    linked = [link.name for link in tuple(ptx_artifact.links) + tuple(cubin_links)]
    if linked or len(ptx_artifact.ptx) != 1:
        names = ", ".join(linked) or "several PTX modules"
        return f"its cubin links other code ({names}), which the driver's PTX compiler cannot link"
    return None


def assemble(cubins: Sequence[Tuple[FatbinMember, bytes]], ptx: Optional[Tuple[FatbinMember, str]],
             entry_name: str, kernel: str = "kernel") -> FatbinArtifact:
    """A fatbin of `cubins` (member, cubin bytes) and `ptx` (member, PTX text)."""
    from cuda.bindings import nvfatbin

    ordered = sorted(cubins, key=lambda item: item[0].arch)
    short = short_name(kernel)
    handle = None
    try:
        handle = nvfatbin.create(list(OPTIONS), len(OPTIONS))
        for member, code in ordered:
            nvfatbin.add_cubin(handle, code, len(code), str(member.arch), entry_name)
        if ptx is not None:
            code = ptx[1].encode()
            nvfatbin.add_ptx(handle, code, len(code), str(ptx[0].arch), short, "")
        buffer = bytearray(nvfatbin.size(handle))
        nvfatbin.get(handle, buffer)
    except Exception as exc:
        raise CompileError(kernel, "fatbin", f"nvFatbin: {exc}") from exc
    finally:
        if handle is not None:
            nvfatbin.destroy(handle)
    members = tuple(member for member, _ in ordered) + ((ptx[0],) if ptx is not None else ())
    return FatbinArtifact(bytes(buffer), members, entry_name)
