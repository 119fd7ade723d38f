"""Signed entries: who may put machine code into a cache that others read.

With a secret, every entry a tier writes is signed (HMAC-SHA256) and every
entry it reads must carry a valid signature made with a secret the reader
holds.  The signed form of an entry is::

    b"GPUCSIG2" | key id (8 bytes) | HMAC-SHA256(secret, key id | entry) (32 bytes) | entry

The key id, the first 8 bytes of ``HMAC(secret, "gpucache_ext key id")``,
names the secret that signed without revealing it, so a reader holding
several secrets knows which to check with, and a refusal can say why:

- ``unsigned``: the entry carries no signature, and this reader requires one;
- ``bad signature``: signed under one of the reader's secrets, but the bytes
  changed since (tampered with, or damaged);
- ``other secret``: signed with a secret this reader does not hold (a retired
  one, or another team's).

Key rotation: a `Keyring` holds several secrets; the first signs, all are
accepted for reading (``GPUCACHE_SECRET``, then ``GPUCACHE_SECRET_PREVIOUS``).
An entry signed with one of the later ones reads as ``previous``:
``gpucache verify --fix`` signs it again with the first.

Entries signed by earlier versions (``GPUCSIG1``: no key id) are still read:
each secret is tried.

Nothing here decides whether a tier may be used unsigned: see
`gpucache_ext.store.settings` and `KernelCache`.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Iterable, Tuple, Union

SIGNED_MAGIC = b"GPUCSIG2"
_OLD_SIGNED_MAGIC = b"GPUCSIG1"  # HMAC (32 bytes) | entry, without a key id
_KEY_ID_LABEL = b"gpucache_ext key id"
_SIGNED_PREFIX = len(SIGNED_MAGIC) + 8 + 32
_OLD_SIGNED_PREFIX = len(_OLD_SIGNED_MAGIC) + 32
HEAD_BYTES = _SIGNED_PREFIX  # enough of an entry to `classify` it

# why an entry is refused
UNSIGNED = "unsigned"
BAD_SIGNATURE = "bad signature"
OTHER_SECRET = "other secret"
REASONS = (BAD_SIGNATURE, UNSIGNED, OTHER_SECRET)
# how a readable entry is signed
CURRENT = "current"  # with the secret that signs
PREVIOUS = "previous"  # with a secret kept for reading only (rotation)
NOT_SIGNED = "not signed"  # accepted unsigned: this reader holds no secret

Secret = Union[str, bytes]


class Rejected(ValueError):
    """An entry whose signature does not let this reader use it; ``reason``
    is one of `REASONS`."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}{': ' + detail if detail else ''}")
        self.reason = reason


def key_id(secret: bytes) -> bytes:
    """The 8 bytes naming `secret` in the entries it signs (reveals nothing of it)."""
    return hmac.new(secret, _KEY_ID_LABEL, hashlib.sha256).digest()[:8]


def _as_bytes(secret: Secret) -> bytes:
    if isinstance(secret, str):
        return secret.encode()
    if isinstance(secret, (bytes, bytearray)):
        return bytes(secret)
    raise TypeError(f"a secret must be str or bytes, got {type(secret).__name__}")


class Keyring:
    """The secrets a tier signs and checks with: the first signs, all are
    accepted for reading.  Without any, entries are written unsigned and
    read without checking (signed or not) when `allow_unsigned`, and refused
    as ``unsigned`` otherwise."""

    def __init__(self, secrets: Iterable[Secret] = (), allow_unsigned: bool = False):
        keys = []
        for secret in secrets:
            key = _as_bytes(secret)
            if key and key not in keys:
                keys.append(key)
        self.secrets: Tuple[bytes, ...] = tuple(keys)
        self.allow_unsigned = bool(allow_unsigned)
        self._ids = {key_id(key): index for index, key in enumerate(self.secrets)}

    def __repr__(self):
        return (f"<Keyring {len(self.secrets)} secret(s)>" if self.secrets
                else f"<Keyring unsigned allowed={self.allow_unsigned}>")

    @property
    def signs(self) -> bool:
        """True when entries are signed and signatures required."""
        return bool(self.secrets)

    def sign(self, entry: bytes) -> bytes:
        """`entry` signed with the first secret (unchanged without one)."""
        if not self.secrets:
            return entry
        ident = key_id(self.secrets[0])
        return SIGNED_MAGIC + ident + hmac.new(self.secrets[0], ident + entry, hashlib.sha256).digest() + entry

    def open(self, data: bytes) -> Tuple[bytes, str]:
        """(the entry inside `data`, how it was signed: `CURRENT`, `PREVIOUS`
        or `NOT_SIGNED`); raises `Rejected` for an entry this reader must not use."""
        if data[:8] == SIGNED_MAGIC and len(data) >= _SIGNED_PREFIX:
            body = data[_SIGNED_PREFIX:]
            if not self.secrets:
                return self._unchecked(body)
            ident, mac = data[8:16], data[16:_SIGNED_PREFIX]
            index = self._ids.get(ident)
            if index is None:
                raise Rejected(OTHER_SECRET)
            if not hmac.compare_digest(mac, hmac.new(self.secrets[index], ident + body, hashlib.sha256).digest()):
                raise Rejected(BAD_SIGNATURE)
            return body, (CURRENT if index == 0 else PREVIOUS)
        if data[:8] == _OLD_SIGNED_MAGIC and len(data) >= _OLD_SIGNED_PREFIX:
            body = data[_OLD_SIGNED_PREFIX:]
            if not self.secrets:
                return self._unchecked(body)
            for secret in self.secrets:
                if hmac.compare_digest(data[8:40], hmac.new(secret, body, hashlib.sha256).digest()):
                    return body, PREVIOUS  # an old format: worth signing again
            raise Rejected(OTHER_SECRET, "or bad signature (an entry signed by an earlier version)")
        if self.secrets or not self.allow_unsigned:
            raise Rejected(UNSIGNED)
        return data, NOT_SIGNED

    def _unchecked(self, body: bytes) -> Tuple[bytes, str]:
        if not self.allow_unsigned:
            raise Rejected(UNSIGNED, "this reader holds no secret to check the signature with")
        return body, NOT_SIGNED

    def classify(self, head: bytes) -> str:
        """How an entry whose first `HEAD_BYTES` are `head` is signed, without
        checking the signature: `CURRENT`, `PREVIOUS`, `NOT_SIGNED`, or the
        reason it would be refused (`UNSIGNED`, `OTHER_SECRET`).  For listings;
        `open` checks."""
        if head[:8] == SIGNED_MAGIC and len(head) >= 16:
            if not self.secrets:
                return NOT_SIGNED if self.allow_unsigned else UNSIGNED
            index = self._ids.get(head[8:16])
            return OTHER_SECRET if index is None else (CURRENT if index == 0 else PREVIOUS)
        if head[:8] == _OLD_SIGNED_MAGIC:
            return PREVIOUS if self.secrets else (NOT_SIGNED if self.allow_unsigned else UNSIGNED)
        return UNSIGNED if self.secrets or not self.allow_unsigned else NOT_SIGNED


def strip(data: bytes) -> bytes:
    """The entry inside `data`, any signature cut off unchecked (to read a
    header for a listing; loading an entry goes through `Keyring.open`)."""
    if data[:8] == SIGNED_MAGIC:
        return data[_SIGNED_PREFIX:]
    if data[:8] == _OLD_SIGNED_MAGIC:
        return data[_OLD_SIGNED_PREFIX:]
    return data


def signature_length(head: bytes) -> int:
    """How many bytes of signature come before the entry in `head`."""
    if head[:8] == SIGNED_MAGIC:
        return _SIGNED_PREFIX
    if head[:8] == _OLD_SIGNED_MAGIC:
        return _OLD_SIGNED_PREFIX
    return 0


def accepted(status: str) -> bool:
    """Whether a `classify` answer is an entry `open` may accept."""
    return status in (CURRENT, PREVIOUS, NOT_SIGNED)

