"""The controller's ``raw`` events have a schema (seamline.pipeline.payloads): every payload a
run emits decodes against it and encodes back to the same object, keys in the same order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from seamline.events import Raw
from seamline.pipeline import resolve_pipeline
from seamline.pipeline.payloads import (
    DecisionPayload,
    RunEndPayload,
    RunStartPayload,
    TransitionPayload,
    decode_payload,
)
from tests.pipeline.support import (
    FABRICATED,
    GOOD_ANSWER,
    NO_SOURCES,
    make_workspace,
    read_then_answer,
    run_pipeline,
    scripted_writer,
)

REVIEW = resolve_pipeline("answer-review")
FLAKY = {"error": {"kind": "transport", "message": "connection reset", "retryable": True}}
SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "revised": [{"text": NO_SOURCES}, *read_then_answer(GOOD_ANSWER, cost=0.002)],
    "vetoed": read_then_answer(FABRICATED),
    "failed": [FLAKY, FLAKY],
}


KEYS = {
    "start": ["run_id", "pipeline", "definition_hash"],
    "transition": ["run_id", "what", "source", "target"],
    "decision": ["run_id", "what", "decision"],
    "end": ["run_id", "outcome", "stop_reason", "definition_hash", "head_hash", "fingerprint", "trace", "usage"],
}
DECISION_KEYS = ["status", "reason", "strategy", "iteration", "verdicts", "confidences", "window_hash"]


def _which(payload: dict[str, Any]) -> str:
    if "what" in payload:
        return str(payload["what"])
    return "end" if "outcome" in payload else "start"


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_every_raw_payload_of_a_run_decodes_against_its_schema(tmp_path: Path, script: str) -> None:
    writer = scripted_writer(SCRIPTS[script])
    controller, events = run_pipeline(
        REVIEW, "q", workspace=make_workspace(tmp_path), providers={"writer": writer}, trace_file=tmp_path / "t.jsonl"
    )
    raws = [e for e in events if isinstance(e, Raw) and e.source in ("run", "controller")]
    for event in raws:  # the keys in the order docs/pipelines.md gives (and the controller always wrote)
        assert list(event.payload) == KEYS[_which(event.payload)] + [
            k for k in ("reason", "detail") if k in event.payload
        ]
        if "decision" in event.payload:
            assert list(event.payload["decision"]) == DECISION_KEYS
    decoded = [decode_payload(e) for e in raws]
    for event, payload in zip(raws, decoded, strict=True):
        plain = msgspec.to_builtins(payload)
        assert plain == event.payload and list(plain) == list(event.payload)  # nothing lost, nothing reordered
    assert isinstance(decoded[0], RunStartPayload) and isinstance(decoded[-1], RunEndPayload)
    assert all(isinstance(p, TransitionPayload | DecisionPayload) for p in decoded[1:-1])
    assert {p.run_id for p in decoded} == {controller.run_id}
    end = decoded[-1]
    assert isinstance(end, RunEndPayload)
    assert (end.outcome, end.fingerprint, end.trace) == (
        controller.report.outcome,
        controller.report.fingerprint,
        str(tmp_path / "t.jsonl"),
    )
    if script == "revised":
        assert [type(p).__name__ for p in decoded].count("DecisionPayload") == 2
    else:
        stop = next(p for p in decoded if isinstance(p, TransitionPayload) and p.target == "aborted")
        assert stop.reason == controller.report.stop_reason and end.detail == controller.report.detail


def test_a_payload_off_its_schema_is_refused() -> None:
    good = {"run_id": "r1", "what": "transition", "source": "write", "target": "review"}
    assert decode_payload(Raw(source="controller", payload=good)) == TransitionPayload(
        run_id="r1", what="transition", source="write", target="review"
    )
    for bad in ({**good, "via": "x"}, {k: v for k, v in good.items() if k != "target"}, {**good, "target": 3}):
        with pytest.raises(msgspec.ValidationError):
            decode_payload(Raw(source="controller", payload=bad))
    with pytest.raises(msgspec.ValidationError, match="not the controller's"):
        decode_payload(Raw(source="claude-code", payload=good))
    with pytest.raises(msgspec.ValidationError, match="object"):
        decode_payload(Raw(source="run", payload=[1]))
