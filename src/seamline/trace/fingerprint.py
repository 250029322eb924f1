"""The fingerprint: a hash over the deterministic part of a trace only.

Fields are either deterministic (definition, inputs, prompts, outputs, decisions, usage)
or observational (run id, session ids, timestamps, durations). Records keep them apart
(``d`` and ``o``); events from providers are split here, because their structs carry
both kinds (a ``session`` event's ids are observational, its provider and model are not).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any, Final

import msgspec

from seamline.events import Event
from seamline.trace.records import canonical
from seamline.trace.schema import EventObserved, PlainRecord, TraceRecord

__all__ = ["OBSERVATIONAL_EVENT_FIELDS", "Fingerprint", "fingerprint_of", "split_event"]

# Event fields whose values differ from run to run even when everything else is equal.
OBSERVATIONAL_EVENT_FIELDS: Final = frozenset({"session_id", "provider_session_id", "usage_id", "request_id"})

_to_builtins: Final = msgspec.to_builtins


def split_event(event: Event) -> tuple[dict[str, Any], EventObserved]:
    """``(deterministic, observational)`` fields of one event, ``type`` in the first."""
    data: dict[str, Any] = _to_builtins(event)
    data["type"] = event.type
    observed = {k: data.pop(k) for k in OBSERVATIONAL_EVENT_FIELDS if k in data}
    return data, EventObserved(**observed)


class Fingerprint:
    """Incremental fingerprint: feed ``(kind, d bytes)`` in order, read :attr:`hex`."""

    __slots__ = ("_hash",)

    def __init__(self) -> None:
        self._hash = hashlib.sha256(b"seamline-fingerprint-1\n")

    def add(self, kind: str, d_bytes: bytes) -> None:
        self._hash.update(b"%s\x00%s\n" % (kind.encode("ascii"), d_bytes))

    @property
    def hex(self) -> str:
        return self._hash.hexdigest()


def fingerprint_of(records: Iterable[TraceRecord | PlainRecord]) -> str:
    """The fingerprint of decoded records (equal to what the writer computed: a typed
    ``d`` encodes back to the bytes written, see :mod:`seamline.trace.schema`)."""
    fp = Fingerprint()
    for record in records:
        fp.add(record.kind, canonical(record.d))
    return fp.hex
