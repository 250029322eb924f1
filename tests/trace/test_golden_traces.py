"""Golden traces (tests/fixtures/traces, captured by its capture.py): every trace an earlier
seamline wrote still verifies, replays and keeps its fingerprint and head hash."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from seamline.trace.replay import replay
from seamline.trace.verify import verify_trace

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
TRACES = sorted(GOLDEN.glob("*.jsonl"))


def meta_of(trace: Path) -> dict[str, Any]:
    meta: dict[str, Any] = json.loads(trace.with_suffix(".json").read_text())
    return meta


def test_the_golden_traces_hold_every_record_kind() -> None:
    assert len(TRACES) >= 12
    kinds = set().union(*(meta_of(t)["kinds"] for t in TRACES))
    assert kinds == {
        "header",
        "run_start",
        "phase_start",
        "phase_end",
        "role_start",
        "role_end",
        "prompt",
        "event",
        "retry",
        "guard",
        "decision",
        "skip",
        "transition",
        "run_end",
    }


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.stem)
def test_a_golden_trace_verifies_and_replays_as_captured(trace: Path) -> None:
    meta = meta_of(trace)
    verification = verify_trace(trace)
    assert verification.ok, [str(p) for p in verification.problems]
    assert len(verification.records) == meta["records"]
    assert sorted({r.kind for r in verification.records}) == meta["kinds"]
    assert verification.head_hash == meta["head_hash"]
    assert verification.fingerprint == meta["fingerprint"]
    assert verification.replayable is meta["replayable"]
    result = replay(verification)
    assert (result.outcome, result.stop_reason, result.text) == (meta["outcome"], meta["stop_reason"], meta["text"])
    assert result.mismatches == []
