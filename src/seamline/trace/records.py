"""Trace records: the line format, the hash chain and the record kinds.

A trace is a JSON Lines file. Each line is ``{"h":"<sha256 hex>","r":<body>}``: the body
is one record and ``h`` is ``sha256(previous h + body bytes)``, so the chain covers the
exact bytes written, and a verifier never has to re-encode anything. The first record
(``seq`` 0) is the header; the chain starts from :data:`GENESIS`.

A body is ``{"seq":N,"kind":K,"at":T,"d":{...},"o":{...}}``. ``d`` holds the
*deterministic* fields (definition, inputs, prompts, outputs, decisions, usage) and
``o`` the *observational* ones (run id, session ids, timestamps, durations). The
fingerprint hashes ``kind`` and ``d`` only, so two runs of a deterministic pipeline
share it. The kinds and their fields are typed in :mod:`seamline.trace.schema`; a body
decodes to one :data:`TraceRecord`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from seamline.trace.schema import LIFECYCLE_KINDS, RECORD_KINDS, PlainRecord, TraceRecord

__all__ = [
    "GENESIS",
    "LIFECYCLE_KINDS",
    "RECORD_KINDS",
    "SCHEMA_VERSION",
    "PlainRecord",
    "TraceLine",
    "TraceRecord",
    "canonical",
    "chain_hash",
    "decode_body",
    "decode_plain",
    "encode_body",
    "encode_line",
    "split_line",
]

SCHEMA_VERSION: Final = 1
GENESIS: Final = "0" * 64

_PREFIX: Final = b'{"h":"'
_MIDDLE: Final = b'","r":'
_HASH_END: Final = len(_PREFIX) + 64
_BODY_START: Final = _HASH_END + len(_MIDDLE)

# Sorted keys make the deterministic part canonical: decoding and re-encoding a ``d``
# gives the same bytes, so the fingerprint can be recomputed from a file.
# Sorted struct fields too: a typed part encodes like the same object as a dict would.
_canonical: Final = msgspec.json.Encoder(order="sorted")


@dataclass(frozen=True, slots=True)
class TraceLine:
    """A record as read from a file: its chained hash and the exact body bytes.

    ``record`` is a :class:`PlainRecord` when the body is not a well-formed record (an
    unknown kind, a missing or mistyped field); ``fault`` then says why."""

    number: int  # 1-based line number in the file
    hash: str
    body: bytes
    record: TraceRecord | PlainRecord
    fault: str | None = None


def chain_hash(previous: str, body: bytes) -> str:
    """The chained hash of ``body`` after a record whose hash is ``previous``."""
    digest = hashlib.sha256(previous.encode("ascii"))
    digest.update(body)
    return digest.hexdigest()


def encode_body(seq: int, kind: str, at: float, d_bytes: bytes, o_bytes: bytes) -> bytes:
    """A record body from its already-encoded parts (the writer's hot path)."""
    return b'{"seq":%d,"kind":"%s","at":%.6f,"d":%s,"o":%s}' % (seq, kind.encode("ascii"), at, d_bytes, o_bytes)


def canonical(value: Any) -> bytes:
    """Canonical JSON bytes (sorted keys, compact) of a plain value or a record part."""
    return _canonical.encode(value)


def encode_line(hash_hex: str, body: bytes) -> bytes:
    return _PREFIX + hash_hex.encode("ascii") + _MIDDLE + body + b"}\n"


def split_line(line: bytes) -> tuple[str, bytes] | None:
    """``(hash, body)`` of one line (without its newline), or ``None`` when malformed."""
    if len(line) < _BODY_START + 2 or not line.startswith(_PREFIX) or line[_HASH_END:_BODY_START] != _MIDDLE:
        return None
    if not line.endswith(b"}"):
        return None
    stated = line[len(_PREFIX) : _HASH_END]
    if stated.strip(b"0123456789abcdef"):
        return None
    return stated.decode("ascii"), line[_BODY_START:-1]


_record_decoder: Final = msgspec.json.Decoder(TraceRecord)
_plain_decoder: Final = msgspec.json.Decoder(PlainRecord)


def decode_body(body: bytes) -> TraceRecord:
    """Decode one body to its typed record; raises ``msgspec.DecodeError`` (not JSON, not
    UTF-8) or ``msgspec.ValidationError`` (an unknown kind, a missing or mistyped field)."""
    try:
        record: TraceRecord = _record_decoder.decode(body)
    except UnicodeDecodeError as exc:  # msgspec's error for such bytes inside a string
        raise msgspec.DecodeError(f"not UTF-8: {exc}") from None
    return record


def decode_plain(body: bytes) -> PlainRecord:
    """Decode one body to plain values, whatever its kind and fields; raises like :func:`decode_body`."""
    try:
        record: PlainRecord = _plain_decoder.decode(body)
    except UnicodeDecodeError as exc:
        raise msgspec.DecodeError(f"not UTF-8: {exc}") from None
    return record
