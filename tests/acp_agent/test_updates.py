"""seamline events to ACP updates, and the turn's end to a prompt result (in process)."""

from __future__ import annotations

from pathlib import Path

import pytest

from seamline.acp_agent.agent import prompt_text
from seamline.acp_agent.permissions import answer_for
from seamline.acp_agent.updates import UpdateTranslator, history_updates, prompt_result
from seamline.events import (
    Complete,
    Error,
    FileChange,
    Reasoning,
    ReasoningDelta,
    Text,
    TextDelta,
    ToolCall,
    ToolResult,
    Usage,
)
from seamline.sessions.records import TranscriptEntry
from seamline.tools.permissions import PermissionAnswer
from seamline.tools.workspace import Workspace, workspace_tools
from seamline.transport.jsonrpc import JsonRpcError


def kinds(updates: list[dict[str, object]]) -> list[object]:
    return [u["sessionUpdate"] for u in updates]


def test_a_text_that_closes_deltas_is_not_sent_twice(tmp_path: Path) -> None:
    t = UpdateTranslator(workspace=tmp_path)
    out = [
        u
        for e in (TextDelta(text="Hel"), TextDelta(text="lo"), Text(text="Hello"), Text(text="Bye"))
        for u in t.updates(e)
    ]
    assert [u["content"]["text"] for u in out] == ["Hel", "lo", "Bye"]  # type: ignore[index]
    thoughts = [
        u for e in (ReasoningDelta(text="hm"), Reasoning(text="hm"), Reasoning(text="ok")) for u in t.updates(e)
    ]
    assert kinds(thoughts) == ["agent_thought_chunk"] * 2


def test_tool_calls_get_kinds_locations_and_results(tmp_path: Path) -> None:
    tools = workspace_tools(Workspace(tmp_path))
    t = UpdateTranslator(workspace=tmp_path, tools=tools)
    (start,) = t.updates(ToolCall(call_id="c", name="shell", arguments={"command": "ls"}))
    assert start["kind"] == "execute" and start["status"] == "pending" and start["rawInput"] == {"command": "ls"}
    assert t.updates(ToolCall(call_id="d", name="mystery", arguments={}))[0]["kind"] == "other"
    t.updates(FileChange(path="a.txt", kind="created", call_id="c"))
    (moved,) = t.updates(FileChange(path="/abs/b.txt", kind="edited", call_id="c"))
    assert moved["locations"] == [{"path": str(tmp_path / "a.txt")}, {"path": "/abs/b.txt"}]
    assert t.updates(FileChange(path="x", kind="read")) == []  # no call to attach it to
    (done,) = t.updates(ToolResult(call_id="c", output="boom", is_error=True))
    assert done["status"] == "failed" and done["rawOutput"] == "boom"


def test_usage_reports_the_session_cost_and_leaves_an_unknown_cost_out(tmp_path: Path) -> None:
    t = UpdateTranslator(workspace=tmp_path)
    (first,) = t.updates(Usage(input_tokens=10, output_tokens=2, cost_usd=0.5, priced=True))
    (second,) = t.updates(Usage(input_tokens=1, output_tokens=1, cost_usd=0.25, priced=True))
    assert first["cost"] == {"amount": 0.5, "currency": "USD"} and second["cost"]["amount"] == 0.75  # type: ignore[index]
    (unknown,) = t.updates(Usage(input_tokens=1, output_tokens=1))
    (later,) = t.updates(Usage(input_tokens=1, output_tokens=1, cost_usd=1.0, priced=True))
    assert "cost" not in unknown and "cost" not in later and unknown["used"] == 2


def test_stop_reasons_and_errors() -> None:
    usage = [Usage(input_tokens=100, output_tokens=5, cache_read_tokens=60, cache_write_tokens=10)]
    done = prompt_result(Complete(outcome="completed", stop_reason="end_turn"), usage, error=None)
    assert done["stopReason"] == "end_turn"
    assert done["usage"] == {
        "totalTokens": 105,
        "inputTokens": 30,
        "outputTokens": 5,
        "cachedReadTokens": 60,
        "cachedWriteTokens": 10,
    }
    budget = prompt_result(Complete(outcome="budget", stop_reason="budget"), [], error=None)
    assert budget["stopReason"] == "cancelled" and budget["_meta"]["seamline"]["outcome"] == "budget"
    assert (
        prompt_result(Complete(outcome="aborted", stop_reason="aborted"), [], error=None)["stopReason"] == "cancelled"
    )
    steps = prompt_result(Complete(outcome="failed", stop_reason="max_turns"), [], error=None)
    assert steps["stopReason"] == "max_turn_requests"
    for kind, code in [("auth", -32000), ("invalid_request", -32602), ("transport", -32603)]:
        with pytest.raises(JsonRpcError) as failed:
            prompt_result(Complete(outcome="failed", stop_reason=kind), [], error=Error(kind=kind, message="no"))  # type: ignore[arg-type]
        assert failed.value.code == code and failed.value.data["kind"] == kind


def test_history_replay(tmp_path: Path) -> None:
    def entry(i: int, kind: str, content: str = "", call_id: str | None = None, **data: object) -> TranscriptEntry:
        return TranscriptEntry(
            index=i,
            turn=1,
            kind=kind,
            role="x",
            content=content,
            call_id=call_id,
            data=dict(data),
            raw_seq=i,
            parser="events",
            parser_version=1,
        )

    updates = history_updates(
        [
            entry(0, "user", "hi"),
            entry(1, "reasoning", "plan"),
            entry(2, "assistant", "hello"),
            entry(3, "tool_call", call_id="c", name="write_file", arguments={"path": "a"}),
            entry(4, "file_change", call_id="c", path="a", change="created"),
            entry(5, "tool_result", "ok", call_id="c", is_error=False),
            entry(6, "tool_call", call_id="d", name="Edit", arguments={}),  # not a tool of ours
        ],
        workspace=tmp_path,
        tools=workspace_tools(Workspace(tmp_path)),
    )
    assert kinds(updates) == [
        "user_message_chunk",
        "agent_thought_chunk",
        "agent_message_chunk",
        "tool_call",
        "tool_call_update",
        "tool_call_update",
        "tool_call",
    ]
    assert updates[1]["content"] == {"type": "text", "text": "plan"}
    assert updates[3]["kind"] == "edit" and updates[6]["kind"] == "other"
    assert updates[4]["locations"] == [{"path": str(tmp_path / "a")}]
    assert updates[5]["status"] == "completed"


def test_permission_answers_and_prompt_blocks() -> None:
    def selected(option: str) -> dict[str, object]:
        return {"outcome": {"outcome": "selected", "optionId": option}}

    assert answer_for(selected("allow_always")) == PermissionAnswer("allow", "always")
    assert answer_for(selected("reject_once")) == PermissionAnswer("deny", "once")
    assert answer_for(selected("something-else")) == PermissionAnswer("deny", "once")
    assert answer_for({"outcome": {"outcome": "cancelled"}}) == PermissionAnswer("deny", "once")
    assert answer_for(None) == PermissionAnswer("deny", "once")
    text = prompt_text(
        [
            {"type": "text", "text": "look"},
            {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "A"}},
            {"type": "resource_link", "uri": "file:///b.txt", "name": "b.txt"},
        ]
    )
    assert text == "look\n\n<resource uri=file:///a.txt>\nA\n</resource>\n[b.txt](file:///b.txt)"
    with pytest.raises(JsonRpcError) as image:
        prompt_text([{"type": "image", "data": "", "mimeType": "image/png"}])
    assert image.value.code == -32602
