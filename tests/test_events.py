"""The event vocabulary is a public contract: names, core fields, round trip, schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from seamline.events import (
    EVENT_TYPES,
    Complete,
    Error,
    Event,
    FileChange,
    Mode,
    PermissionDecision,
    PermissionRequest,
    Raw,
    Reasoning,
    ReasoningDelta,
    Session,
    Text,
    TextDelta,
    ToolCall,
    ToolProgress,
    ToolResult,
    Usage,
    decode_event,
    encode_event,
    event_schema,
)

SCHEMA_FILE = Path(__file__).resolve().parents[1] / "docs" / "events.schema.json"

DESIGN_NAMES = (
    "session text_delta text reasoning_delta reasoning tool_call tool_result tool_progress permission_request "
    "permission_decision file_change usage mode raw error complete"
).split()

CORE_FIELDS = {
    "session": {"session_id", "provider", "model", "provider_session_id"},
    "tool_call": {"call_id", "name", "arguments"},
    "tool_result": {"call_id", "output", "is_error"},
    "usage": {"input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "cost_usd", "priced"},
    "error": {"kind", "message", "retryable"},
    "complete": {"outcome", "stop_reason", "text"},
}

SAMPLES: list[Event] = [
    Session(session_id="s", provider="offline", model="m", provider_session_id=None),
    TextDelta(text="he"),
    Text(text="hello"),
    ReasoningDelta(text="hm"),
    Reasoning(text="hmm"),
    ToolCall(call_id="c1", name="read_file", arguments={"path": "a", "n": [1, 2.5, None, True]}),
    ToolResult(call_id="c1", output="1\tx", is_error=False),
    ToolProgress(call_id="c1", message="half"),
    PermissionRequest(request_id="r", call_id="c1", tool="shell", arguments={"command": "ls"}),
    PermissionDecision(request_id="r", decision="deny", scope="session", reason="no"),
    FileChange(path="a.txt", kind="edited", call_id="c1"),
    Usage(input_tokens=10, output_tokens=2, cache_read_tokens=3, cache_write_tokens=1, cost_usd=None, priced=False),
    Mode(mode="planning"),
    Raw(source="anthropic", payload={"type": "message_start", "deep": [{"x": 1}]}),
    Error(kind="quota", message="slow down", retryable=True, attempt=2),
    Complete(outcome="aborted", stop_reason="aborted", text="partial"),
]


def test_names_are_exactly_the_design_vocabulary() -> None:
    assert list(EVENT_TYPES) == DESIGN_NAMES
    assert sorted(e.type for e in SAMPLES) == sorted(DESIGN_NAMES)


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: e.type)
def test_round_trip_is_lossless_and_snake_case(event: Event) -> None:
    wire = encode_event(event)
    data = json.loads(wire)
    assert data["type"] == event.type
    assert all(key == key.lower() and " " not in key for key in data)
    assert CORE_FIELDS.get(event.type, set()) <= set(data)
    assert decode_event(wire) == event
    assert encode_event(decode_event(wire)) == wire


def test_unknown_type_and_bad_fields_are_rejected() -> None:
    with pytest.raises(msgspec.ValidationError):
        decode_event(b'{"type": "bogus"}')
    with pytest.raises(msgspec.ValidationError):
        decode_event(b'{"type": "error", "kind": "nonsense", "message": "x"}')
    with pytest.raises(msgspec.DecodeError):
        decode_event(b'{"type": "text", "text": ')


def test_schema_file_is_the_generated_schema() -> None:
    """docs/events.schema.json is generated; regenerate with `python -m seamline.events_schema`."""
    on_disk = json.loads(SCHEMA_FILE.read_text())
    assert on_disk == event_schema()


def test_schema_requires_the_core_fields() -> None:
    schema = event_schema()
    for name, fields in CORE_FIELDS.items():
        definition = next(d for d in schema["$defs"].values() if d["properties"]["type"].get("enum") == [name])
        assert {"type"} | fields <= set(definition["properties"])
        assert "type" in definition["required"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


@given(
    call_id=st.text(min_size=1, max_size=30),
    name=st.text(min_size=1, max_size=30),
    arguments=st.dictionaries(st.text(max_size=10), json_values, max_size=5),
    output=st.text(max_size=200),
    tokens=st.tuples(*(st.integers(0, 10**9) for _ in range(4))),
    cost=st.none() | st.floats(min_value=0, max_value=1e6, allow_nan=False),
)
def test_round_trip_property(
    call_id: str,
    name: str,
    arguments: dict[str, Any],
    output: str,
    tokens: tuple[int, int, int, int],
    cost: float | None,
) -> None:
    events: list[Event] = [
        ToolCall(call_id=call_id, name=name, arguments=arguments),
        ToolResult(call_id=call_id, output=output, is_error=True),
        Usage(
            input_tokens=tokens[0],
            output_tokens=tokens[1],
            cache_read_tokens=tokens[2],
            cache_write_tokens=tokens[3],
            cost_usd=cost,
            priced=cost is not None,
        ),
        Raw(source=name, payload=arguments),
    ]
    for event in events:
        assert decode_event(encode_event(event)) == event
