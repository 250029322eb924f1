"""SpanBuilder on hand-made records: span kinds, failures and budgets, ids."""

from __future__ import annotations

from typing import Any

from seamline.telemetry.spans import SpanBuilder, SpanRecord, span_id_of, trace_id_of


def feed(builder: SpanBuilder, records: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> list[SpanRecord]:
    spans: list[SpanRecord] = []
    for seq, (kind, d, o) in enumerate(records):
        spans += builder.add(seq, kind, 100.0 + seq, d, o)
    return spans + builder.finish()


def ev(event: dict[str, Any], **o: Any) -> tuple[str, dict[str, Any], dict[str, Any]]:
    return ("event", {"event": event}, o)


def test_an_agent_cli_turn_is_a_client_span() -> None:
    spans = feed(
        SpanBuilder(),
        [
            ev({"type": "session", "provider": "claude-code", "model": "sonnet"}, session_id="s1"),
            ev({"type": "tool_call", "call_id": "t1", "name": "Bash", "arguments": {}}),
            ev({"type": "tool_result", "call_id": "t1", "output": "boom", "is_error": True}),
            ev({"type": "usage", "input_tokens": 10, "output_tokens": 2, "cost_usd": 0.5, "priced": True}),
            ev({"type": "complete", "outcome": "completed", "stop_reason": "end_turn"}),
        ],
    )
    names = {s.name: s for s in spans}
    assert set(names) == {"execute_tool Bash", "chat sonnet", "invoke_agent claude-code"}
    assert names["invoke_agent claude-code"].kind == "client" and names["chat sonnet"].kind == "client"
    tool = names["execute_tool Bash"]
    assert tool.error and tool.attributes["error.type"] == "tool_error"
    assert not names["invoke_agent claude-code"].error  # a failed tool call is the agent's business
    # A plain run: the session id names the run; ids are hashes of it and the opening seq.
    turn = names["invoke_agent claude-code"]
    assert turn.trace_id == trace_id_of("s1") and turn.span_id == span_id_of("s1", 0)
    assert tool.span_id == span_id_of("s1", 1) and tool.parent_id == turn.span_id
    assert (turn.start_ns, turn.end_ns) == (100_000_000_000, 104_000_000_000)


WHERE: dict[str, Any] = {"role": "writer", "phase": "write", "round": 1, "attempt": 1}


def test_a_role_failure_and_a_budget_stop_are_error_types() -> None:
    spans = feed(
        SpanBuilder(),
        [
            ("header", {}, {"run_id": "r9"}),
            ("run_start", {"pipeline": "p"}, {"run_id": "r9"}),
            ("role_start", dict(WHERE), {}),
            (
                "event",
                {**WHERE, "event": {"type": "session", "provider": "openai", "model": "gpt"}},
                {"session_id": "s2"},
            ),
            (
                "event",
                {**WHERE, "event": {"type": "error", "kind": "timeout", "message": "slow", "retryable": True}},
                {},
            ),
            ("role_end", {**WHERE, "status": "failed", "failure": {"kind": "timeout"}, "usage": {}}, {}),
            ("run_end", {"outcome": "budget", "stop_reason": "budget"}, {}),
        ],
    )
    names = {s.name: s for s in spans}
    turn, root = names["invoke_agent writer"], names["invoke_workflow p"]
    assert turn.error and turn.attributes["error.type"] == "timeout" and turn.kind == "internal"
    assert root.error and root.attributes["error.type"] == "budget"
    assert root.attributes["gen_ai.operation.name"] == "invoke_workflow" and root.parent_id is None
    assert turn.parent_id == root.span_id == span_id_of("r9", 1)
    assert turn.attributes["gen_ai.conversation.id"] == "s2"


def test_an_error_retried_past_does_not_mark_the_turn() -> None:
    spans = feed(
        SpanBuilder(),
        [
            ev({"type": "session", "provider": "anthropic", "model": "m"}, session_id="s3"),
            ev({"type": "error", "kind": "quota", "message": "529", "retryable": True, "attempt": 1}),
            ev({"type": "usage", "input_tokens": 1, "output_tokens": 1}),
            ev({"type": "complete", "outcome": "completed", "stop_reason": "end_turn"}),
        ],
    )
    turn = next(s for s in spans if s.name == "invoke_agent anthropic")
    assert not turn.error and "error.type" not in turn.attributes


def test_a_failed_model_call_keeps_its_chat_span_with_the_error_type() -> None:
    spans = feed(
        SpanBuilder(),
        [
            ev({"type": "session", "provider": "openai", "model": "gpt"}, session_id="s4"),
            ev({"type": "usage", "input_tokens": 3, "output_tokens": 1, "usage_id": "resp-1"}),
            ev({"type": "error", "kind": "rate_limit", "message": "429", "retryable": False}),
            ev({"type": "complete", "outcome": "failed", "stop_reason": "error"}),
        ],
    )
    chats = [s for s in spans if s.name == "chat gpt"]
    assert len(chats) == 2
    ok, failed = chats
    assert not ok.error and ok.attributes["gen_ai.response.id"] == "resp-1"  # a model API's response id
    assert failed.error and failed.attributes["error.type"] == "rate_limit"
    assert failed.attributes["gen_ai.provider.name"] == "openai"
    assert failed.attributes["gen_ai.response.finish_reasons"] == ("error",)
    turn = next(s for s in spans if s.name.startswith("invoke_agent"))
    assert failed.parent_id == turn.span_id and turn.attributes["gen_ai.response.finish_reasons"] == ("error",)


def test_a_role_turn_names_the_server_of_its_base_url() -> None:
    identity = {"provider": "openai", "model": "gpt", "options": {"base_url": "http://127.0.0.1:8123/v1"}}
    spans = feed(
        SpanBuilder(),
        [
            ("run_start", {"pipeline": "p"}, {"run_id": "r5"}),
            ("role_start", dict(WHERE), {}),
            ("prompt", {**WHERE, "prompt": "hi", "provider": identity}, {}),
            (
                "event",
                {**WHERE, "event": {"type": "session", "provider": "openai", "model": "gpt"}},
                {"session_id": "s"},
            ),
            ("event", {**WHERE, "event": {"type": "usage", "input_tokens": 1, "output_tokens": 1}}, {}),
            ("role_end", {**WHERE, "status": "ok", "usage": {}}, {}),
            ("run_end", {"outcome": "completed", "stop_reason": "completed"}, {}),
        ],
    )
    for name in ("invoke_agent writer", "chat gpt"):
        span = next(s for s in spans if s.name == name)
        assert (span.attributes["server.address"], span.attributes["server.port"]) == ("127.0.0.1", 8123)
