"""The AG-UI translation: every output validates with the ag-ui-protocol models, messages
and tool calls open and close in order, one terminal event, and the outcomes map as
documented. Property-tested over random event sequences."""

from __future__ import annotations

import pytest

pytest.importorskip("ag_ui")

from ag_ui.core import Event as AgUiEvent
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from seamline.events import (
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
)
from seamline.server.agui import AgUiTranslator

AGUI = TypeAdapter(AgUiEvent)
START = Session(session_id="s1", provider="scripted", model="m")
words = st.text(max_size=8)
middle = st.one_of(
    words.map(lambda t: TextDelta(text=t)),
    words.map(lambda t: Text(text=t)),
    words.map(lambda t: ReasoningDelta(text=t)),
    words.map(lambda t: Reasoning(text=t)),
    st.integers(0, 5).map(lambda i: ToolCall(call_id=f"c{i}", name="read_file", arguments={"path": str(i)})),
    st.integers(0, 5).map(lambda i: ToolResult(call_id=f"c{i}", output="ok", is_error=i % 2 == 0)),
    st.just(ToolProgress(call_id="c1", message="half")),
    st.integers(0, 3).map(
        lambda i: PermissionRequest(request_id=f"p{i}", call_id=f"c{i}", tool="shell", arguments={"command": "ls"})
    ),
    st.just(PermissionDecision(request_id="p1", decision="allow")),
    st.just(FileChange(path="a.txt", kind="created", call_id="c1")),
    st.sampled_from([None, 0.001]).map(
        lambda c: Usage(input_tokens=3, output_tokens=2, cost_usd=c, priced=c is not None)
    ),
    st.just(Mode(mode="planning")),
    st.just(Raw(source="x", payload={"k": [1, None]})),
    st.just(Error(kind="transport", message="flaky", retryable=True)),
)
ending = st.sampled_from(
    [
        Complete(outcome="completed", stop_reason="end_turn", text="done"),
        Complete(outcome="aborted", stop_reason="aborted"),
        Complete(outcome="budget", stop_reason="budget"),
        Complete(outcome="failed", stop_reason="provider"),
    ]
)


def translate(events: list[Event], *, interrupts: bool = False, pipeline: str | None = None) -> list[dict[str, object]]:
    translator = AgUiTranslator("run1", interrupts=interrupts, pipeline=pipeline, first_phase="write")
    out = []
    for event in events:
        for agui in translator.feed(event):
            wire = agui.model_dump_json(by_alias=True)
            AGUI.validate_json(wire)  # every event valid on the wire
            out.append(agui.model_dump(by_alias=True))
    return out


turns = st.lists(st.tuples(st.integers(0, 3), st.lists(middle, max_size=6), ending), max_size=4)


@settings(max_examples=200, deadline=None)
@given(st.lists(middle, max_size=25), ending, st.booleans(), turns)
def test_any_run_translates_to_a_valid_agui_stream(
    body: list[Event], end: Complete, interrupts: bool, roles: list[tuple[int, list[Event], Complete]]
) -> None:
    if roles:  # a pipeline run: role turns (session .. complete) inside, the run's complete last
        events: list[Event] = [Raw(source="run", payload={"run_id": "run1"})]
        for i, (n, inner, done) in enumerate(roles):
            session = Session(session_id=f"role{i}", provider="scripted", model=None)
            events += [Raw(source="controller", payload={"what": "transition", "target": f"p{n}"}), session]
            events += [*inner, done]
        out = translate([*events, end], interrupts=interrupts, pipeline="answer-review")
        opened = [e["subagentRunId"] for e in out if e["type"] == "SUBAGENT_STARTED"]
        closed = [e["subagentRunId"] for e in out if e["type"] in ("SUBAGENT_FINISHED", "SUBAGENT_ERROR")]
        assert opened == closed == [f"role{i}" for i in range(len(roles))]
    else:
        out = translate([START, *body, end], interrupts=interrupts)
    kinds = [e["type"] for e in out]
    assert kinds[0] == "RUN_STARTED"
    assert kinds[-1] in ("RUN_FINISHED", "RUN_ERROR")
    running = False
    text_open: str | None = None
    reasoning_open: str | None = None
    owner: dict[object, object] = {}  # message id -> the subagent that wrote it
    calls_of: dict[object, set[object]] = {}  # subagent -> its tool call ids
    for event in out:
        kind = event["type"]
        if kind == "TEXT_MESSAGE_START":
            owner[event["messageId"]] = event.get("subagentRunId")
        if kind == "TOOL_CALL_START":
            # A call belongs to its own agent's message (text, or one that said nothing).
            assert owner.setdefault(event["parentMessageId"], event.get("subagentRunId")) == event.get("subagentRunId")
            calls_of.setdefault(event.get("subagentRunId"), set()).add(event["toolCallId"])
        if kind == "RUN_STARTED":
            assert not running
            running = True
            continue
        assert running, f"{kind} outside a run"
        if kind in ("RUN_FINISHED", "RUN_ERROR"):
            assert text_open is None and reasoning_open is None
            running = False
        elif kind == "TEXT_MESSAGE_START":
            assert text_open is None and reasoning_open is None
            text_open = str(event["messageId"])
        elif kind == "TEXT_MESSAGE_CONTENT":
            assert event["messageId"] == text_open and event["delta"]
        elif kind == "TEXT_MESSAGE_END":
            assert event["messageId"] == text_open
            text_open = None
        elif kind == "REASONING_START":
            assert reasoning_open is None and text_open is None
            reasoning_open = str(event["messageId"])
        elif kind == "REASONING_END":
            assert event["messageId"] == reasoning_open
            reasoning_open = None
        elif kind.startswith("TOOL_CALL_") and kind != "TOOL_CALL_RESULT":
            assert text_open is None and reasoning_open is None
    assert not running
    for a, ids in calls_of.items():  # no two subagents share a tool call id
        assert all(not ids & other for b, other in calls_of.items() if a != b)
    if not interrupts:
        assert kinds.count("RUN_STARTED") == 1


def test_text_streamed_then_closed_after_a_tool_call_is_one_message() -> None:
    out = translate(
        [
            START,
            TextDelta(text="Let "),
            TextDelta(text="me."),
            ToolCall(call_id="c1", name="ls", arguments={}),
            Text(text="Let me."),
            ToolResult(call_id="c1", output="a"),
            Text(text="Done."),
            Complete(outcome="completed", stop_reason="end_turn", text="Done."),
        ]
    )
    texts = [e["delta"] for e in out if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert texts == ["Let ", "me.", "Done."]
    call = next(e for e in out if e["type"] == "TOOL_CALL_START")
    first_message = next(e for e in out if e["type"] == "TEXT_MESSAGE_START")
    assert call["parentMessageId"] == first_message["messageId"]


def test_outcomes_usage_and_cost() -> None:
    priced = Usage(input_tokens=10, output_tokens=2, cache_read_tokens=4, cost_usd=0.5, priced=True, model="m")
    done = translate([START, priced, Complete(outcome="completed", stop_reason="end_turn", text="hi")])[-1]
    assert done["outcome"] == {"type": "success"} and done["result"] == "hi"
    assert done["usage"] == [
        {
            "provider": "scripted",
            "model": "m",
            "inputTokens": 10,
            "outputTokens": 2,
            "totalTokens": 12,
            "cachedInputTokens": 4,
            "cacheWriteInputTokens": 0,
        }
    ]
    assert done["metadata"]["seamline.cost_usd"] == 0.5
    unpriced = Usage(input_tokens=1, output_tokens=1)
    unknown = translate([START, priced, unpriced, Complete(outcome="completed", stop_reason="end_turn")])[-1]
    assert "seamline.cost_usd" not in unknown["metadata"]  # unknown cost is absent, never 0
    budget = translate([START, Complete(outcome="budget", stop_reason="budget")])[-1]
    assert budget["type"] == "RUN_FINISHED" and budget["outcome"] == {"type": "cancelled"}
    assert budget["metadata"]["seamline.outcome"] == "budget"
    aborted = translate([START, Complete(outcome="aborted", stop_reason="cancelled")])[-1]
    assert aborted["outcome"] == {"type": "cancelled"}
    failed = translate([START, Error(kind="auth", message="bad key"), Complete(outcome="failed", stop_reason="auth")])[
        -1
    ]
    assert failed["type"] == "RUN_ERROR" and failed["message"] == "bad key" and failed["code"] == "auth"


def test_permission_request_is_an_interrupt_when_asked() -> None:
    asked = PermissionRequest(request_id="p1", call_id="c1", tool="shell", arguments={"command": "ls"}, reason="r")
    live = translate([START, asked])
    assert live[-1]["type"] == "CUSTOM" and live[-1]["name"] == "seamline.permission_request"
    assert live[-1]["value"]["respond"] == "/v1/runs/run1/permissions/p1"
    out = translate(
        [START, asked, ToolResult(call_id="c1", output="x"), Complete(outcome="completed", stop_reason="end_turn")],
        interrupts=True,
    )
    interrupt = out[1]
    assert interrupt["type"] == "RUN_FINISHED" and interrupt["outcome"]["type"] == "interrupt"
    (item,) = interrupt["outcome"]["interrupts"]
    assert item["id"] == "p1" and item["toolCallId"] == "c1"
    assert item["responseSchema"]["properties"]["decision"]["enum"] == ["allow", "deny"]
    assert out[2]["type"] == "RUN_STARTED" and out[2]["parentRunId"] == "run1" and out[2]["runId"] == "run1.1"
    assert out[-1]["type"] == "RUN_FINISHED" and out[-1]["runId"] == "run1.1"


def test_a_later_steps_tool_call_is_not_filed_under_the_first_steps_message() -> None:
    out = translate(
        [
            START,
            Text(text="Let me look."),
            ToolCall(call_id="c1", name="ls", arguments={}),
            ToolResult(call_id="c1", output="a"),
            ToolCall(call_id="c2", name="read_file", arguments={"path": "a"}),  # step 2, no text
            ToolResult(call_id="c2", output="x"),
            Text(text="Done."),
            Complete(outcome="completed", stop_reason="end_turn", text="Done."),
        ]
    )
    parents = {e["toolCallId"]: e.get("parentMessageId") for e in out if e["type"] == "TOOL_CALL_START"}
    first_message = next(e for e in out if e["type"] == "TEXT_MESSAGE_START")["messageId"]
    assert parents["c1"] == first_message
    assert parents["c2"] is not None and parents["c2"] != first_message  # step 2's own message


def test_the_tool_calls_of_one_step_share_its_message_even_without_text() -> None:
    out = translate(
        [
            START,
            ToolCall(call_id="c1", name="ls", arguments={}),  # step 1: two calls, no text
            ToolCall(call_id="c2", name="read_file", arguments={"path": "a"}),
            ToolResult(call_id="c1", output="a"),
            ToolResult(call_id="c2", output="x"),
            ToolCall(call_id="c3", name="read_file", arguments={"path": "b"}),  # step 2
            ToolResult(call_id="c3", output="y"),
            Text(text="Done."),
            Complete(outcome="completed", stop_reason="end_turn", text="Done."),
        ]
    )
    parents = {e["toolCallId"]: e.get("parentMessageId") for e in out if e["type"] == "TOOL_CALL_START"}
    assert parents["c1"] is not None and parents["c1"] == parents["c2"]
    assert parents["c3"] is not None and parents["c3"] != parents["c1"]
    texts = [e["messageId"] for e in out if e["type"] == "TEXT_MESSAGE_START"]
    assert len(set(texts) | set(parents.values())) == 3  # no id names two messages


def test_pipeline_subagents_own_their_tool_calls() -> None:
    def role(i: int, *, text: bool) -> list[Event]:
        said: list[Event] = [Text(text=f"role {i} reads")] if text else []
        return [
            Raw(source="controller", payload={"what": "transition", "target": f"p{i}"}),
            Session(session_id=f"role{i}", provider="scripted", model=None),
            *said,
            ToolCall(call_id="c1", name="ls", arguments={}),  # every role numbers its calls from 1
            ToolResult(call_id="c1", output="a"),
            *([Text(text=f"role {i} done")] if text else []),
            Complete(outcome="completed", stop_reason="end_turn", text=f"r{i}"),
        ]

    events = [*role(0, text=True), *role(1, text=False), *role(2, text=True)]
    out = translate([*events, Complete(outcome="completed", stop_reason="end_turn")], pipeline="answer-review")
    starts = [e for e in out if e["type"] == "TOOL_CALL_START"]
    assert [e["toolCallId"] for e in starts] == ["role0.c1", "role1.c1", "role2.c1"]
    assert [e["metadata"]["seamline.call_id"] for e in starts] == ["c1"] * 3
    owner = {e["messageId"]: e["subagentRunId"] for e in out if e["type"] == "TEXT_MESSAGE_START"}
    assert starts[1]["parentMessageId"] not in owner  # not role 0's text: role 1's own message
    assert owner[starts[2]["parentMessageId"]] == starts[2]["subagentRunId"] == "role2"
    results = [(e["toolCallId"], e["subagentRunId"]) for e in out if e["type"] == "TOOL_CALL_RESULT"]
    assert results == [("role0.c1", "role0"), ("role1.c1", "role1"), ("role2.c1", "role2")]
