"""The typed record kinds: one Struct per kind, parts that encode back to the bytes
written, and a verifier as strict on them as on the plain records before."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec import UNSET

from seamline.trace.fingerprint import OBSERVATIONAL_EVENT_FIELDS
from seamline.trace.records import GENESIS, canonical, chain_hash, decode_body, encode_line, split_line
from seamline.trace.schema import (
    RECORD_KINDS,
    RECORD_TYPES,
    DecisionData,
    EventData,
    EventObserved,
    GuardData,
    PlainRecord,
    RecordData,
    RecordedDecision,
    RecordedFailure,
    RecordedOutput,
    RecordedUsage,
    RoleEndData,
    RunEndData,
    RunObserved,
    RunUsage,
    TraceRecord,
    TransitionData,
)
from seamline.trace.verify import verify_trace
from seamline.trace.writer import TraceWriter

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "traces"


def test_every_kind_has_one_record_type_and_its_data_part() -> None:
    assert typing.get_args(TraceRecord) == RECORD_TYPES
    tags = [t.__struct_config__.tag for t in RECORD_TYPES]
    assert len(set(tags)) == len(tags) == 14 and set(tags) == RECORD_KINDS
    hints = {t: typing.get_type_hints(t) for t in RECORD_TYPES}
    assert [hints[t]["d"].kind for t in RECORD_TYPES] == tags
    assert list(typing.get_args(RecordData)) == [hints[t]["d"] for t in RECORD_TYPES]


def test_an_event_records_o_holds_exactly_the_observational_event_fields() -> None:
    assert {f.encode_name for f in msgspec.structs.fields(EventObserved)} == OBSERVATIONAL_EVENT_FIELDS


# -- the verifier on records that are not well formed ----------------------------------------


def edited(name: str, old: bytes, new: bytes) -> tuple[bytes, int]:
    """A golden trace with the first record holding ``old`` edited and every hash rechained
    (only the grammar can tell), and that record's seq."""
    out, previous, seq = [], GENESIS, -1
    for line in (GOLDEN / f"{name}.jsonl").read_bytes().splitlines():
        parts = split_line(line)
        assert parts is not None
        body = parts[1]
        if seq < 0 and old in body:
            body, seq = body.replace(old, new, 1), len(out)
        previous = chain_hash(previous, body)
        out.append(encode_line(previous, body))
    assert seq >= 0, old
    return b"".join(out), seq


@pytest.mark.parametrize(
    ("name", "old", "new", "problem"),
    [
        ("skipped", b'"kind":"skip"', b'"kind":"jump"', "grammar: unknown record kind 'jump'"),
        (
            "revised",
            b'"d":{"phase":"write","roles":["writer"],"round":1}',
            b'"d":{"phase":"write","roles":["writer"]}',
            "grammar: malformed record fields: Object missing required field `round` - at `$.d`",
        ),
        (
            "revised",
            b'"d":{"attempt":1,"phase":"write","role":"writer","round":1},"o":{}',
            b'"d":{"attempt":"1","phase":"write","role":"writer","round":1},"o":{}',
            "grammar: malformed record fields: Expected `int`, got `str` - at `$.d.attempt`",
        ),
        (
            "vetoed",
            b'"reason":"next","to":"review"',
            b'"reason":"next","to":"review","via":"x"',
            "grammar: malformed record fields: Object contains unknown field `via` - at `$.d`",
        ),
        (
            "revised",
            b'"status":"ok","usage"',
            b'"status":"fine","usage"',
            "grammar: malformed record fields: Invalid enum value 'fine' - at `$.d.status`",
        ),
        ("crashed", b',"task":"q"', b"", "completeness: header lacks task"),
        ("crashed", b'"schema_version":1,', b'"schema_version":"1",', "completeness: trace schema 1 is not 1"),
    ],
)
def test_an_unknown_kind_a_missing_or_mistyped_field_is_a_problem(
    name: str, old: bytes, new: bytes, problem: str
) -> None:
    data, seq = edited(name, old, new)
    verification = verify_trace(data)
    assert not verification.ok and not verification.replayable
    assert f"record {seq} (line {seq + 1}): {problem}" in [str(p) for p in verification.problems]
    assert not any(p.check == "chain" for p in verification.problems)  # the chain holds; the record is read plain
    assert [r.seq for r in verification.records] == list(range(len(verification.records)))
    assert isinstance(verification.all_records[seq], PlainRecord)
    assert len(verification.typed_records) == len(verification.records) - 1


def test_a_well_formed_header_of_another_schema_is_refused() -> None:
    data, _ = edited("crashed", b'"schema_version":1,', b'"schema_version":2,')
    problems = [str(p) for p in verify_trace(data).problems]
    assert problems == ["record 0 (line 1): completeness: trace schema 2 is not 1"]


def test_a_body_that_is_no_record_at_all_is_a_chain_problem() -> None:
    body = b'{"seq":0,"kind":"header","at":1.0,"d":5,"o":{}}'
    problems = verify_trace(encode_line(chain_hash(GENESIS, body), body)).problems
    assert str(problems[0]).startswith(
        "unreadable record (line 1): chain: record body does not decode: Expected `object`"
    )


# -- typed parts encode back to the bytes written (property) --------------------------------

numbers = st.integers(min_value=-(2**53), max_value=2**53) | st.floats(allow_nan=False, allow_infinity=False)
names = st.text(max_size=12)
json_values = st.recursive(
    st.none() | st.booleans() | numbers | names,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
    max_leaves=8,
)
usages = st.builds(
    RecordedUsage,
    input_tokens=st.integers(0, 10**9),
    output_tokens=st.integers(0, 10**9),
    cache_read_tokens=st.integers(0, 10**9),
    cache_write_tokens=st.integers(0, 10**9),
    cost_usd=numbers,
    priced=st.booleans(),
)
maybe_text = st.just(UNSET) | names
where: dict[str, Any] = {
    "phase": st.just("write"),
    "role": names,
    "round": st.integers(1, 9),
    "attempt": st.integers(1, 9),
}
outputs = st.builds(
    RecordedOutput,
    text=names,
    verdict=st.none() | names,
    confidence=st.none() | numbers,
    feedback=st.none() | names,
    skip=st.none() | names,
    data=st.dictionaries(names, json_values, max_size=3),
)
failures = st.builds(
    RecordedFailure,
    kind=st.sampled_from(["timeout", "transport", "provider", "budget"]),
    message=names,
    retryable=st.booleans(),
)
parts = st.one_of(
    st.builds(
        RunEndData,
        outcome=st.sampled_from(["completed", "aborted", "failed", "budget"]),
        stop_reason=names,
        text=names,
        usage=st.builds(
            RunUsage, by_role=st.dictionaries(names, usages, max_size=2), by_phase=st.just({}), total=usages
        ),
        detail=maybe_text,
    ),
    st.builds(TransitionData, from_=names, to=names, reason=names, detail=maybe_text),
    st.builds(GuardData, **where, limit=names, spent=numbers, cap=numbers, at_seq=st.integers(0, 10**6)),
    st.builds(RoleEndData, **where, status=st.just("ok"), usage=usages, output=outputs),
    st.builds(RoleEndData, **where, status=st.just("failed"), usage=usages, failure=failures),
    st.builds(EventData, **where, event=st.dictionaries(names, json_values, max_size=4)),
    st.builds(
        DecisionData,
        phase=names,
        round=st.integers(1, 9),
        decision=st.builds(
            RecordedDecision,
            confidences=st.lists(st.none() | numbers, max_size=3),
            iteration=st.integers(0, 9),
            reason=names,
            status=st.sampled_from(["continue", "converged", "vetoed"]),
            strategy=names,
            verdicts=st.lists(names, max_size=3),
            window_hash=names,
        ),
    ),
)


@settings(max_examples=150, deadline=None)
@given(part=parts, run_id=maybe_text)
def test_a_written_part_decodes_to_itself_and_encodes_to_the_same_bytes(part: RecordData, run_id: Any) -> None:
    writer = TraceWriter(None)
    observed = EventObserved(session_id=run_id) if isinstance(part, EventData) else RunObserved(run_id=run_id)
    writer.append(part, observed, at=1.5)  # type: ignore[arg-type]
    line = (writer.lines or [])[0].rstrip(b"\n")
    split = split_line(line)
    assert split is not None
    record = decode_body(split[1])
    assert record.kind == part.kind and record.d == part and record.o == observed
    written = msgspec.json.decode(split[1])
    assert canonical(record.d) == canonical(written["d"]) == canonical(part)  # 1 stays 1, 1.0 stays 1.0
    assert PlainRecord.of(record).d == written["d"]
