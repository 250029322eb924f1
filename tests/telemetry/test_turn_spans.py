"""Spans and metrics of a plain turn, through an in-memory exporter: every attribute."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from seamline.events import Event, Session
from seamline.runner import stream
from seamline.telemetry.live import tap_turn
from seamline.telemetry.spans import CAPTURE_CONTENT_ENV
from seamline.testing import scripted
from seamline.tools.workspace import Workspace, workspace_tools
from tests.telemetry.support import MemorySink, by_name

SCRIPT: list[dict[str, Any]] = [
    {
        "tool_calls": [{"name": "read_file", "arguments": {"path": "guide.md"}, "id": "call-1"}],
        "usage": {
            "input_tokens": 100,
            "output_tokens": 20,
            "cache_read_tokens": 30,
            "cache_write_tokens": 5,
            "cost_usd": 0.002,
        },
    },
    {"text": "A provider is a subclass.", "usage": {"input_tokens": 150, "output_tokens": 12, "cost_usd": 0.001}},
]


def run_turn(
    tmp_path: Path, script: list[dict[str, Any]], prompt: str = "How do I add a provider?"
) -> tuple[MemorySink, list[Event]]:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    (ws / "guide.md").write_text("A provider is one subclass of Provider.\n")
    sink = MemorySink()
    provider = scripted(script, model="script-model")

    async def drive() -> list[Event]:
        events = stream(prompt, provider=provider, workspace=ws, tools=workspace_tools(Workspace(ws)))
        return [e async for e in tap_turn(events, sink, prompt=prompt)]

    return sink, asyncio.run(drive())


def test_turn_chat_and_tool_spans_carry_every_attribute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CAPTURE_CONTENT_ENV, raising=False)
    sink, events = run_turn(tmp_path, SCRIPT)
    session_id = next(e.session_id for e in events if isinstance(e, Session))
    spans = sink.spans()
    assert [s.name for s in spans] == [
        "chat script-model",
        "execute_tool read_file",
        "chat script-model",
        "invoke_agent scripted",
    ]
    turn = by_name(spans, "invoke_agent")[0]
    chats = by_name(spans, "chat")
    tool = by_name(spans, "execute_tool")[0]
    assert turn.kind == SpanKind.INTERNAL and turn.parent is None  # seamline's own loop
    assert all(c.kind == SpanKind.INTERNAL for c in chats)  # the scripted model is embedded
    assert turn.context is not None
    assert {c.parent.span_id for c in chats if c.parent} == {turn.context.span_id}
    assert tool.parent is not None and tool.parent.span_id == turn.context.span_id
    assert len({s.context.trace_id for s in spans if s.context}) == 1
    assert dict(turn.attributes or {}) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "scripted",
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "script-model",
        "gen_ai.conversation.id": session_id,
        "gen_ai.usage.input_tokens": 250,
        "gen_ai.usage.output_tokens": 32,
        "gen_ai.usage.cache_read.input_tokens": 30,
        "gen_ai.usage.cache_creation.input_tokens": 5,
        "seamline.cost_usd": pytest.approx(0.003),
        "seamline.priced": True,
        "seamline.outcome": "completed",
        "seamline.stop_reason": "end_turn",
        "gen_ai.response.finish_reasons": ("stop",),
        "openinference.span.kind": "AGENT",
    }
    first = dict(chats[0].attributes or {})
    assert first["gen_ai.operation.name"] == "chat" and first["openinference.span.kind"] == "LLM"
    assert first["gen_ai.provider.name"] == "scripted" and first["gen_ai.request.model"] == "script-model"
    assert first["gen_ai.response.model"] == "script-model" and first["gen_ai.conversation.id"] == session_id
    assert first["gen_ai.usage.input_tokens"] == 100 and first["gen_ai.usage.output_tokens"] == 20
    assert first["gen_ai.usage.cache_read.input_tokens"] == 30
    assert first["gen_ai.usage.cache_creation.input_tokens"] == 5
    assert first["seamline.cost_usd"] == pytest.approx(0.002) and first["seamline.priced"] is True
    assert first["gen_ai.response.finish_reasons"] == ("tool_call",)  # the call asked for a tool
    assert dict(tool.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "script-model",
        "gen_ai.conversation.id": session_id,
        "gen_ai.tool.name": "read_file",
        "gen_ai.tool.call.id": "call-1",
        "gen_ai.tool.type": "function",
        "seamline.tool.source": "host",
        "openinference.span.kind": "TOOL",
    }
    assert all(s.status.status_code == StatusCode.UNSET for s in spans)
    # No message content unless asked for.
    assert not any(
        k.startswith(("gen_ai.input", "gen_ai.output", "gen_ai.tool.call.a", "gen_ai.tool.call.r"))
        for s in spans
        for k in (s.attributes or {})
    )


def test_message_content_only_when_the_env_asks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")
    sink, _ = run_turn(tmp_path, SCRIPT, prompt="Tell me")
    spans = sink.spans()
    turn = dict(by_name(spans, "invoke_agent")[0].attributes or {})
    assert json.loads(str(turn["gen_ai.input.messages"])) == [
        {"role": "user", "parts": [{"type": "text", "content": "Tell me"}]}
    ]
    output = json.loads(str(turn["gen_ai.output.messages"]))
    assert output[0]["parts"][0]["content"] == "A provider is a subclass."
    assert output[0]["finish_reason"] == "stop"
    tool = dict(by_name(spans, "execute_tool")[0].attributes or {})
    assert json.loads(str(tool["gen_ai.tool.call.arguments"])) == {"path": "guide.md"}
    assert "A provider is one subclass" in str(tool["gen_ai.tool.call.result"])


def test_an_unknown_cost_stays_absent(tmp_path: Path) -> None:
    sink, _ = run_turn(tmp_path, [{"text": "hi", "usage": {"input_tokens": 3, "output_tokens": 1}}])
    for span in sink.spans():
        attributes = dict(span.attributes or {})
        assert "seamline.cost_usd" not in attributes
        assert attributes["seamline.priced"] is False


def test_a_failed_turn_carries_the_error_kind(tmp_path: Path) -> None:
    sink, _ = run_turn(tmp_path, [{"error": {"kind": "quota", "message": "out of credit"}}])
    turn = by_name(sink.spans(), "invoke_agent")[0]
    assert dict(turn.attributes or {})["error.type"] == "quota"
    assert turn.status.status_code == StatusCode.ERROR


def test_metrics_token_usage_and_duration(tmp_path: Path) -> None:
    sink, _ = run_turn(tmp_path, SCRIPT)
    metrics = {m.name: m for rm in sink.metrics.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    tokens = metrics["gen_ai.client.token.usage"]
    assert tokens.unit == "{token}"
    sums = {dict(p.attributes)["gen_ai.token.type"]: p.sum for p in tokens.data.data_points}
    assert sums == {"input": 250, "output": 32}
    point = tokens.data.data_points[0]
    assert dict(point.attributes)["gen_ai.provider.name"] == "scripted"
    assert dict(point.attributes)["gen_ai.operation.name"] == "chat"
    duration = metrics["gen_ai.client.operation.duration"]
    assert duration.unit == "s"
    counts = {dict(p.attributes)["gen_ai.operation.name"]: p.count for p in duration.data.data_points}
    assert counts == {"chat": 2, "invoke_agent": 1}
