"""Reading the disk tier's entries for the commands: their headers as rows,
an entry found by its token's first digits, checked, its artifact's bytes;
and the toolchain their entries are checked against."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

from ..store.codec import BadEntry, decode, read_header
from ..keys.stagespec import PERSISTENT_STAGES
from ..store.disk import DiskTier, read_head
from ..store.signing import Rejected, strip
from ..keys.tokens import find_token, short_name, short_token
from ..toolchain import stage_toolchain
from .output import CommandError


def entry_rows(tier: DiskTier, stages, kernel=None, older=None, newer=None, progress=None):
    now = time.time()
    files = [item for item in tier.scan() if item[0] in stages]
    rows = []
    for done, (stage, path, st) in enumerate(files, 1):
        if progress:
            progress(done, len(files))
        try:
            header, _ = read_header(strip(read_head(path)))
        except (OSError, BadEntry):
            continue
        if header.get("marker"):
            continue
        short = short_name(header["kernel"])
        if kernel and kernel not in (header["kernel"], short):
            continue
        age = now - float(header["created"])
        if (older is not None and age < older) or (newer is not None and age > newer):
            continue
        rows.append({"stage": stage, "token": header["token"], "kernel": header["kernel"],
                     "signature": header["signature"], "config": header["config"],
                     # an entry's size is its artifact's, as in show and the inspector
                     "bytes": int(header["size"]), "file_bytes": st.st_size,
                     "created": header["created"], "age_seconds": round(age, 1),
                     "last_used": st.st_mtime, "place": header.get("place"),
                     # the number the place's cell ran as: ls names the definition by it (act@In[7])
                     "place_number": header.get("place_number")})
    return sorted(rows, key=lambda r: r["created"], reverse=True)


def find_entry(tier: DiskTier, token: str, stage: Optional[str]):
    try:
        return find_token(token, ((stage, path.name, path) for stage, path, _ in tier.scan(stage)),
                          f" in {tier.directory}")
    except ValueError as exc:
        raise CommandError(str(exc)) from None


def read_entry(tier, stage: str, path: Path):
    """The entry in `path`, its signature, key and checksum checked; CommandError if it is damaged."""
    try:
        return decode(tier.keyring.open(path.read_bytes())[0], stage, path.name[: -len(".entry")],
                      check_toolchain=False)
    except (Rejected, BadEntry) as exc:
        raise CommandError(f"the {stage} entry {short_token(path.name)} cannot be read: {exc}") from None


def toolchain_stages(args):
    """The stages whose entries' toolchain is compared: llvm's (package
    versions) always, ptx's and cubin's with --toolchain."""
    return PERSISTENT_STAGES if getattr(args, "toolchain", False) else ("llvm",)


def read_toolchain(directory: Optional[Path], stages) -> None:
    """Learn the toolchain that entries of `stages` are checked against (`codec.decode`)
    from the cache folder's memo, as a new process compiling there learns it.

    llvm entries need package versions only.  For ptx and cubin entries this
    asks numba-cuda's own search where libdevice and libcudadevrt are (which
    imports numba, but loads no CUDA library): the memo's values are keyed by
    the files found, so the check is the one a compile there would make.  A
    part the memo does not know is probed (loading the library), and
    remembered."""
    for stage in PERSISTENT_STAGES:
        if stage in stages:
            stage_toolchain(stage, directory)
