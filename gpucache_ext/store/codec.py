"""Entries as bytes, for the disk and shared tiers: no pickle, nothing executable.

    b"GPUCACHE" | SHA-256 of the rest (32 bytes) | header length (4 bytes) | header (JSON) | payload

The header holds the format version, the stage, the token and every token
component (so the key can be checked on load, and misses explained in another
process), the kernel, signature and config summary, the stage's toolchain,
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

from .. import artifacts, targets
from ..toolchain import linking
from .signing import PREVIOUS, Keyring, Rejected
from .tiers import Entry
from ..tokens import component_from_json, component_json, make_token
from ..toolchain import stage_toolchain

MAGIC = b"GPUCACHE"
FORMAT_VERSION = 1
PERSISTENT_STAGES = ("llvm", "ptx", "cubin", "fatbin")  # typed IR is not portable
_HEADER_LIMIT = 16 << 20


class BadEntry(ValueError):
    """Stored bytes that are not a valid entry for the requested key."""


def _reads_from_json(value) -> targets.TargetReads:
    return frozenset((op, tuple(operand), bool(answer)) for op, operand, answer in value)


def entry_parts(stage: str, artifact) -> Tuple[Dict, List[bytes]]:
    """(metadata, payload parts) of an artifact; linked inputs come last."""
    if stage == "llvm":
        return ({"entry_name": artifact.entry_name, "cooperative": artifact.cooperative,
                 "target_reads": targets.reads_key(artifact.target_reads),
                 "links": [link.describe() for link in artifact.links]},
                [m.encode() for m in artifact.modules] + [link.data for link in artifact.links])
    if stage == "ptx":
        parts = [p.encode() for p in artifact.ptx]
        if artifact.ltoir is not None:
            parts.append(artifact.ltoir)
        return {"entry_name": artifact.entry_name, "ptx_count": len(artifact.ptx),
                "ltoir": artifact.ltoir is not None, "cooperative": artifact.cooperative,
                "links": [link.describe() for link in artifact.links]}, \
            parts + [link.data for link in artifact.links]
    if stage == "cubin":
        parts = [artifact.cubin, artifact.info_log.encode()]
        if artifact.linked_ptx is not None:
            parts.append(artifact.linked_ptx.encode())
        return {"entry_name": artifact.entry_name, "linked_ptx": artifact.linked_ptx is not None,
                "links": [link.describe() for link in artifact.links]}, \
            parts + [link.data for link in artifact.links]
    if stage == "fatbin":
        return {"entry_name": artifact.entry_name,
                "members": [[m.kind, m.arch, m.token, m.digest, m.nbytes] for m in artifact.members]}, \
            [artifact.fatbin]
    raise ValueError(f"stage {stage!r} is not stored outside memory")


def _artifact(stage: str, meta: Dict, parts: List[bytes]):
    if stage in ("llvm", "ptx", "cubin"):
        described = meta.get("links", [])
        parts, data = (parts[:len(parts) - len(described)], parts[len(parts) - len(described):]) \
            if described else (parts, [])
        links = tuple(_link(d, blob) for d, blob in zip(described, data))
    if stage == "llvm":
        return artifacts.LLVMArtifact(tuple(p.decode() for p in parts), meta["entry_name"],
                                      _reads_from_json(meta["target_reads"]),
                                      cooperative=bool(meta.get("cooperative", False)), links=links)
    if stage == "ptx":
        count = meta["ptx_count"]
        ltoir = parts[count] if meta["ltoir"] else None
        return artifacts.PTXArtifact(tuple(p.decode() for p in parts[:count]), ltoir, meta["entry_name"],
                                     bool(meta.get("cooperative", False)), links)
    if stage == "cubin":
        linked = parts[2].decode() if meta["linked_ptx"] else None
        return artifacts.CubinArtifact(parts[0], parts[1].decode(), linked, meta["entry_name"], links)
    if stage == "fatbin":
        members = tuple(artifacts.FatbinMember(str(kind), int(arch), str(token), str(digest), int(size))
                        for kind, arch, token, digest, size in meta["members"])
        return artifacts.FatbinArtifact(parts[0], members, meta["entry_name"])
    raise BadEntry(f"unknown stage {stage!r}")


def _link(described: Dict, data: bytes):
    return linking.LinkInput(str(described["name"]), str(described["kind"]), data, str(described["digest"]))


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
    header = {
        "format": FORMAT_VERSION,
        "stage": stage,
        "token": entry.token,
        "components": {name: component_json(c) for name, c in entry.components.items()},
        "kernel": entry.kernel,
        "signature": entry.signature,
        "config": entry.config,
        "config_fields": entry.config_fields,
        "reasons": list(entry.reasons),
        "toolchain": stage_toolchain(stage),
        "created": entry.created,
        "seconds": entry.seconds,
        "marker": entry.is_marker,
        "digest": entry.digest,
        "upstream": entry.upstream,
        "place": entry.place,
        "meta": meta,
        "parts": [len(p) for p in parts],
        "size": len(payload),
    }
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
        if check_toolchain and header["toolchain"] != stage_toolchain(stage):
            raise BadEntry("built by another toolchain")
        payload = data[start:]
        if len(payload) != header["size"] or sum(header["parts"]) != header["size"]:
            raise BadEntry("truncated payload")
        parts, offset = [], 0
        for length in header["parts"]:
            parts.append(payload[offset:offset + length])
            offset += length
        meta = header["meta"]
        if header["marker"]:
            variants = [_reads_from_json(v) for v in meta["variants"]]
            return Entry(token, header["kernel"], None, components, 0, 0.0, header["created"],
                         variants=variants, upstream=str(header.get("upstream") or ""), place=_place(header))
        artifact = _artifact(stage, meta, parts)
        digest = header.get("digest")
        if not isinstance(digest, str) or len(digest) != 64:
            raise BadEntry("no content digest")  # (what the next stage's token needs)
        return Entry(token, header["kernel"], artifact, components, artifact.nbytes,
                     float(header["seconds"]), float(header["created"]), header["signature"],
                     header["config"], tuple(header["reasons"]), header.get("config_fields"),
                     digest=digest, upstream=str(header.get("upstream") or ""), place=_place(header))
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
    if check_toolchain and read_header(body)[0]["toolchain"] != stage_toolchain(stage):
        return OTHER_TOOLCHAIN, body, "built by another toolchain"
    return (PREVIOUS_SECRET if signed == PREVIOUS else OK), body, None


def header_entry(data: bytes) -> Entry:
    """An entry with its metadata only (no artifact), for listings."""
    header, _ = read_header(data)
    try:
        components = {name: component_from_json(c) for name, c in header["components"].items()}
        variants = ([_reads_from_json(v) for v in header["meta"]["variants"]]
                    if header["marker"] else None)
        return Entry(header["token"], header["kernel"], None, components, int(header["size"]),
                     float(header["seconds"]), float(header["created"]), header["signature"],
                     header["config"], tuple(header["reasons"]), header.get("config_fields"),
                     variants=variants, digest=header.get("digest"), upstream=str(header.get("upstream") or ""),
                     place=_place(header))
    except (KeyError, TypeError, ValueError) as exc:
        raise BadEntry(f"malformed header: {exc}") from None


def _place(header) -> Optional[str]:
    """Where the entry's kernel was defined (None in entries written before it was recorded)."""
    place = header.get("place")
    return place if isinstance(place, str) and place else None
