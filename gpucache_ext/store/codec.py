"""Entries as bytes, for the disk and shared tiers: no pickle, nothing executable.

    b"GPUCACHE" | SHA-256 of the rest (32 bytes) | header length (4 bytes) | header (JSON) | payload

The header holds the format version, the stage, the token and every token
component (so the key can be checked on load, and misses explained in another
process), the kernel, signature and config summary, why it was built (each
reason's words, which every version reads, and beside them in
"reasons_data" what each is about: `Reason.data`; an entry written before
that was kept reads its reasons from their words), the stage's toolchain,
when it was made, the payload's size, and how the payload splits into the
artifact's parts.  The checksum covers header and payload: any flipped bit
or missing byte is caught.  With a secret, the disk and shared tiers sign
these bytes (see `gpucache_ext.store.signing`).

`decode` refuses anything that does not check out (`BadEntry`); callers treat
that as a miss, never as an error for the user.
"""

from __future__ import annotations

import hashlib
import json
import struct
from typing import Dict, List, Optional, Tuple

from .. import memos
from ..importing import import_named
from ..keys import targets
from ..keys.stagespec import STAGE_SPEC
from .signing import PREVIOUS, Keyring, Rejected
from .tiers import HEADER_FIELDS, Entry
from ..keys.tokens import component_from_json, component_json, make_token
from ..keys.reasons import Reason
from ..toolchain import stage_toolchain, tool_versions

MAGIC = b"GPUCACHE"
FORMAT_VERSION = 1
_HEADER_LIMIT = 16 << 20


class BadEntry(ValueError):
    """Stored bytes that are not a valid entry for the requested key."""


@memos.cached("codec.artifact_class", maxsize=None)
def artifact_class(stage: str) -> Optional[type]:
    """The class of `stage`'s artifacts, as its spec names it (None: a stage
    kept in memory alone, or none declared)."""
    spec = STAGE_SPEC.get(stage)
    if spec is None or not spec.persisted:
        return None
    return import_named(spec.artifact, f"the artifact class of stage {stage!r},", "is not 'module:Class'")


def entry_parts(stage: str, artifact) -> Tuple[Dict, List[bytes]]:
    """(metadata, payload parts) of an artifact, as its class declares them
    (`state`, see `gpucache_ext.pipeline.artifacts`); linked inputs come last."""
    kind = artifact_class(stage)
    if kind is None:
        raise ValueError(f"stage {stage!r} is not stored outside memory")
    return kind.state(artifact)


def _artifact(stage: str, meta: Dict, parts: List[bytes]):
    kind = artifact_class(stage)
    if kind is None:
        raise BadEntry(f"unknown stage {stage!r}")
    return kind.rebuild(meta, parts)


def content_digest(stage: str, artifact) -> str:
    """The SHA-256 of an llvm, ptx or cubin artifact's canonical bytes:
    everything of it the next stage can read (code, entry name, flags, linked
    inputs), exactly as stored.  The next stage's token hashes it instead of
    the upstream token, so that a stage rebuilt to the same bytes stops the
    chain (see `KernelCache`)."""
    meta, parts = entry_parts(stage, artifact)
    hasher = hashlib.sha256(json.dumps(meta, sort_keys=True, separators=(",", ":")).encode())
    for part in parts:
        hasher.update(len(part).to_bytes(8, "big"))
        hasher.update(part)
    return hasher.hexdigest()


def encode(stage: str, entry: Entry) -> bytes:
    """The bytes of `entry` (an artifact or a marker) for `stage`."""
    if entry.is_marker:
        meta, parts = {"variants": [targets.reads_key(r) for r in entry.variants]}, []
    else:
        if entry.digest is None:  # (`decode` refuses such an entry: the next stage's token needs it)
            raise ValueError(f"a {stage} entry needs its content digest to be stored (codec.content_digest)")
        meta, parts = entry_parts(stage, entry.artifact)
    payload = b"".join(parts)
    header = {name: list(value) if name == "reasons" else value
              for name, value in ((name, getattr(entry, name)) for name, _ in HEADER_FIELDS)}
    header.update({
        "format": FORMAT_VERSION,
        "stage": stage,
        "components": {name: component_json(c) for name, c in entry.components.items()},
        "toolchain": tool_versions(entry.tools) if entry.tools else stage_toolchain(stage),
        "marker": entry.is_marker,
        "reasons_data": [Reason.of(reason).data() for reason in entry.reasons],
        "meta": meta,
        "parts": [len(p) for p in parts],
        "size": len(payload),
    })
    head = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    body = struct.pack(">I", len(head)) + head + payload
    return MAGIC + hashlib.sha256(body).digest() + body


_PREFIX = len(MAGIC) + 32 + 4  # magic, checksum, header length


def read_header(data: bytes) -> Tuple[Dict, int]:
    """The header of an entry (and where its payload starts), checked for shape only."""
    if data[:8] != MAGIC or len(data) < _PREFIX:
        raise BadEntry("not a gpucache entry")
    (length,) = struct.unpack(">I", data[40:44])
    if length > _HEADER_LIMIT or len(data) < _PREFIX + length:
        raise BadEntry("truncated header")
    try:
        header = json.loads(data[_PREFIX:_PREFIX + length])
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadEntry(f"unreadable header: {exc}") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT_VERSION:
        raise BadEntry("other format version")
    return header, _PREFIX + length


def check_sum(data: bytes) -> None:
    """Raise BadEntry unless the entry's checksum matches its contents."""
    if data[:8] != MAGIC or len(data) < _PREFIX:
        raise BadEntry("not a gpucache entry")
    if hashlib.sha256(data[40:]).digest() != data[8:40]:
        raise BadEntry("checksum mismatch")


def decode(data: bytes, stage: str, token: str, check_toolchain: bool = True) -> Entry:
    """The entry stored as `data`, checked against the key it was looked up by
    and (unless `check_toolchain` is False) against this process's toolchain."""
    check_sum(data)
    header, start = read_header(data)
    try:
        if header["stage"] != stage or header["token"] != token:
            raise BadEntry("stored under another key")
        components = {name: component_from_json(c) for name, c in header["components"].items()}
        # The token must be the hash of the components it was filed with.
        if make_token(stage, {k: v for k, v in components.items() if k != "stage"}).hex != token:
            raise BadEntry("components do not hash to the token")
        if check_toolchain and not _current_toolchain(header):
            raise BadEntry("built by another toolchain")
        payload = data[start:]
        if len(payload) != header["size"] or sum(header["parts"]) != header["size"]:
            raise BadEntry("truncated payload")
        parts, offset = [], 0
        for length in header["parts"]:
            parts.append(payload[offset:offset + length])
            offset += length
        if header["marker"]:
            return _entry(header, None, 0, components)
        artifact = _artifact(stage, header["meta"], parts)
        digest = header.get("digest")
        if not isinstance(digest, str) or len(digest) != 64:
            raise BadEntry("no content digest")  # (what the next stage's token needs)
        return _entry(header, artifact, artifact.nbytes, components)
    except BadEntry:
        raise
    except (KeyError, TypeError, ValueError, IndexError, UnicodeDecodeError) as exc:
        raise BadEntry(f"malformed entry: {type(exc).__name__}: {exc}") from None


# What `check_stored` finds in a stored entry, besides a refused signature's
# reason (`signing.REASONS`): all but the first two are bad.
OK, PREVIOUS_SECRET, CORRUPT, OTHER_TOOLCHAIN = "ok", "previous secret", "corrupt", "other toolchain"


def check_stored(keyring: Keyring, data: bytes, stage: str, token: str,
                 check_toolchain: bool) -> Tuple[str, Optional[bytes], Optional[str]]:
    """(outcome, the entry inside `data`, the problem) of the bytes a tier
    stores for `stage` under `token`: its signature as `keyring` reads it,
    then its key and checksum, then (with `check_toolchain`) the toolchain
    that built it.  What ``gpucache verify`` reports, for the disk and shared
    tiers alike."""
    try:
        body, signed = keyring.open(data)
    except Rejected as exc:
        return exc.reason, None, f"signature: {exc}"
    try:
        decode(body, stage, token, check_toolchain=False)
    except BadEntry as exc:
        return CORRUPT, body, str(exc)
    if check_toolchain and not _current_toolchain(read_header(body)[0]):
        return OTHER_TOOLCHAIN, body, "built by another toolchain"
    return (PREVIOUS_SECRET if signed == PREVIOUS else OK), body, None


def _current_toolchain(header: Dict) -> bool:
    """Whether every tool an entry names in its header is at the version it
    names (the tools are the stage's and its backend's: `Entry.tools`)."""
    built_by = header["toolchain"]
    return isinstance(built_by, dict) and built_by == tool_versions(tuple(built_by))


def header_entry(data: bytes) -> Entry:
    """An entry with its metadata only (no artifact), for listings."""
    header, _ = read_header(data)
    try:
        return _entry(header, None, int(header["size"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise BadEntry(f"malformed header: {exc}") from None


def _entry(header: Dict, artifact, nbytes: int, components: Optional[Dict] = None) -> Entry:
    """The `Entry` a header describes (`HEADER_FIELDS`), holding `artifact`
    (`components`: the header's, where they were read already)."""
    fields = {name: header.get(name, default) for name, default in HEADER_FIELDS}
    if fields["token"] is None or fields["kernel"] is None or fields["created"] is None:
        raise KeyError("token, kernel or created")
    fields.update(reasons=Reason.stored(fields["reasons"], header.get("reasons_data")),
                  created=float(fields["created"]), seconds=float(fields["seconds"]),
                  typing_seconds=float(fields["typing_seconds"] or 0.0),
                  upstream=str(fields["upstream"] or ""),
                  place=fields["place"] if isinstance(fields["place"], str) and fields["place"] else None)
    if components is None:
        components = {name: component_from_json(c) for name, c in header["components"].items()}
    variants = [targets.reads_from_key(v) for v in header["meta"]["variants"]] if header["marker"] else None
    return Entry(artifact=artifact, components=components, nbytes=nbytes, variants=variants,
                 tools=tuple(header["toolchain"]), **fields)
