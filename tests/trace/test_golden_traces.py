"""Golden traces (tests/fixtures/traces, captured by its capture.py): every trace an earlier
seamline wrote still decodes to typed records, verifies, replays, keeps its fingerprint and
head hash, and is written again to the same bytes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from seamline.trace.records import canonical, decode_body, split_line
from seamline.trace.replay import replay
from seamline.trace.schema import RECORD_KINDS, RECORD_TYPES
from seamline.trace.verify import verify_trace
from seamline.trace.writer import TraceWriter

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


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.stem)
def test_a_golden_trace_decodes_typed_and_rewrites_to_the_same_bytes(trace: Path) -> None:
    """Every body decodes to its typed record; its d and o encode back to the bytes written;
    a writer given the decoded records (at their times) writes the file again, byte for byte."""
    data = trace.read_bytes()
    writer = TraceWriter(None)
    for line in data.splitlines():
        parts = split_line(line)
        assert parts is not None
        record = decode_body(parts[1])
        assert isinstance(record, RECORD_TYPES) and record.kind in RECORD_KINDS
        written = msgspec.json.decode(parts[1])
        assert canonical(record.d) == canonical(written["d"])
        assert canonical(record.o) == canonical(written["o"])
        writer.append(record.d, record.o, at=record.at)
    assert b"".join(writer.lines or []) == data
    assert writer.fingerprint.hex == meta_of(trace)["fingerprint"]
    verification = verify_trace(data)
    assert len(verification.typed_records) == len(verification.records) == meta_of(trace)["records"]


@pytest.mark.parametrize("trace", TRACES[:3], ids=lambda p: p.stem)
def test_the_plain_view_is_the_records_as_written(trace: Path) -> None:
    written = [msgspec.json.decode(split_line(ln)[1]) for ln in trace.read_bytes().splitlines()]
    plain = [msgspec.to_builtins(r) for r in verify_trace(trace).records]
    assert [list(r["d"]) for r in plain] == [list(r["d"]) for r in written]  # keys in the file's order
    assert plain == [{k: r[k] for k in ("seq", "kind", "at", "d", "o")} for r in written]
