"""The payloads of the controller's ``raw`` events: one msgspec Struct per payload.

A pipeline run streams the provider events of its turns and, from the controller, ``raw``
events (``docs/pipelines.md``): source ``run`` first (:class:`RunStartPayload`) and last
(:class:`RunEndPayload`), source ``controller`` for each transition
(:class:`TransitionPayload`) and convergence decision (:class:`DecisionPayload`). They
travel as ``raw`` because every face already passes ``raw`` through unchanged; these
Structs are their schema: the controller builds its payloads from them, and
:func:`decode_payload` reads one back (``tests/pipeline/test_payloads.py`` decodes every
payload a run emits).

>>> from seamline.events import Raw
>>> decode_payload(Raw(source="controller", payload={"run_id": "r1", "what": "transition", "source": "write", "target": "review"}))
TransitionPayload(run_id='r1', what='transition', source='write', target='review', reason=UNSET)
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import msgspec
from msgspec import UNSET, UnsetType

from seamline.events import Outcome, Raw
from seamline.pipeline.convergence import ConvergenceDecision
from seamline.trace.schema import RecordedUsage

__all__ = [
    "DecisionPayload",
    "RunEndPayload",
    "RunPayload",
    "RunStartPayload",
    "TransitionPayload",
    "decode_payload",
]


class _Payload(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    run_id: str


class RunStartPayload(_Payload, frozen=True, kw_only=True):
    """Source ``run``, the run's first event."""

    pipeline: str
    definition_hash: str


class RunEndPayload(_Payload, frozen=True, kw_only=True):
    """Source ``run``, just before the run's ``complete``; ``detail`` when it stopped."""

    outcome: Outcome
    stop_reason: str
    definition_hash: str
    head_hash: str
    fingerprint: str
    trace: str | None  # the trace file; None for a trace kept in memory
    usage: RecordedUsage
    detail: str | UnsetType = UNSET


class TransitionPayload(_Payload, frozen=True, kw_only=True):
    """Source ``controller``: the run moves ``source`` -> ``target``; ``reason`` when it stops."""

    what: Literal["transition"]
    source: str
    target: str
    reason: str | UnsetType = UNSET


class DecisionPayload(_Payload, frozen=True, kw_only=True):
    """Source ``controller``: a judge phase's convergence decision."""

    what: Literal["decision"]
    decision: ConvergenceDecision


RunPayload: TypeAlias = RunStartPayload | RunEndPayload | TransitionPayload | DecisionPayload


def decode_payload(event: Raw) -> RunPayload:
    """The typed payload of one of the controller's ``raw`` events; raises
    ``msgspec.ValidationError`` when it is not one (or does not match its schema)."""
    payload = event.payload
    if not isinstance(payload, dict):
        raise msgspec.ValidationError(f"a {event.source} payload is an object, not {type(payload).__name__}")
    kind: type[RunPayload]
    if event.source == "run":
        kind = RunEndPayload if "outcome" in payload else RunStartPayload
    elif event.source == "controller" and payload.get("what") == "decision":
        kind = DecisionPayload
    elif event.source == "controller":
        kind = TransitionPayload
    else:
        raise msgspec.ValidationError(f"source {event.source!r} is not the controller's")
    return msgspec.convert(payload, kind)
