"""Claude Code's stream-json parser, on the lines the real program printed (golden
fixtures from tests/fixtures/claude-code, captured by tests/fixtures/capture.py)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seamline.events import (
    Complete,
    Error,
    FileChange,
    PermissionDecision,
    Raw,
    Session,
    Text,
    TextDelta,
    ToolCall,
    ToolResult,
    Usage,
)
from seamline.providers.agent_clis.parsers.claude_code import ClaudeStreamJsonParser
from tests.providers import cli_parser_properties as props
from tests.providers.agent_cli_support import FIXTURES, fixture_lines, fixture_meta, replay

BOUND = 2  # the driver's default retry bound
P = "claude-code"


def parse(scenario: str, **kwargs: object) -> list[object]:
    return list(replay(ClaudeStreamJsonParser(model="claude-sonnet-4-5"), fixture_lines(P, scenario), **kwargs))  # type: ignore[arg-type]


def test_fixtures_say_how_they_were_made() -> None:
    meta = fixture_meta(P, "tools")
    assert meta["cli_version"].startswith("2.1.197")
    assert meta["command"][:2] == ["claude", "-p"] and "stream-json" in meta["command"]
    assert meta["environment"]["ANTHROPIC_API_KEY"] == "<set>"


def test_plain_answer() -> None:
    events = parse("plain")
    sessions = [e for e in events if isinstance(e, Session)]
    assert len(sessions) == 1 and sessions[0].provider_session_id
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Hello from the fake."
    assert [e.text for e in events if isinstance(e, Text)] == ["Hello from the fake."]
    usage = [e for e in events if isinstance(e, Usage)]
    assert len(usage) == 1 and usage[0].priced and usage[0].cost_usd is not None and usage[0].cost_usd > 0
    assert usage[0].input_tokens >= 30 and usage[0].output_tokens >= 5
    final = events[-1]
    assert isinstance(final, Complete) and final.outcome == "completed" and final.text == "Hello from the fake."


def test_tools_with_stable_ids_and_file_changes() -> None:
    events = parse("tools")
    calls = [e for e in events if isinstance(e, ToolCall)]
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [c.name for c in calls] == ["Bash", "Read", "Write"]
    assert [r.call_id for r in results] == [c.call_id for c in calls]
    assert results[0].output == "the secret word is pelican" and not results[0].is_error
    assert "pelican" in results[1].output
    changes = [(c.kind, c.call_id) for c in events if isinstance(c, FileChange)]
    assert changes == [("read", calls[1].call_id), ("created", calls[2].call_id)]
    assert all(c.source == "agent" for c in calls)
    usage = [e for e in events if isinstance(e, Usage)]
    assert len(usage) == 1 and usage[0].cache_read_tokens == 50
    assert isinstance(events[-1], Complete) and events[-1].text == "The word is pelican."


def test_resumed_turn_keeps_the_session_id() -> None:
    meta = fixture_meta(P, "resume")
    resumed = meta["command"][meta["command"].index("--resume") + 1]
    events = parse("resume")
    assert [e.provider_session_id for e in events if isinstance(e, Session)] == [resumed]
    assert isinstance(events[-1], Complete) and events[-1].text == "Second, resumed."


@pytest.mark.parametrize(
    ("scenario", "kind", "retryable"),
    [("error_401", "auth", False), ("error_429", "quota", True), ("error_500", "provider", True),
     ("overloaded", "provider", True)],
)  # fmt: skip
def test_api_errors_behind_a_success_subtype(scenario: str, kind: str, retryable: bool) -> None:
    events = parse(scenario, returncode=fixture_meta(P, scenario)["exit_code"])
    errors = [e for e in events if isinstance(e, Error)]
    assert [(e.kind, e.retryable) for e in errors] == [(kind, retryable)]
    assert not [e for e in events if isinstance(e, Text)]
    assert any(isinstance(e, Raw) and e.payload["message"]["model"] == "<synthetic>" for e in events)
    final = events[-1]
    assert isinstance(final, Complete) and final.outcome == "failed" and final.stop_reason == kind


def test_cut_stream_recovered_by_the_cli() -> None:
    events = parse("cut")
    assert isinstance(events[-1], Complete) and events[-1].outcome == "completed"
    assert events[-1].text == "a cut answer that never ends at all"


def test_interrupt_is_an_abort_whoever_sent_it() -> None:
    parser = ClaudeStreamJsonParser()
    lines = fixture_lines(P, "abort")
    events = [e for line in lines[:-1] for e in parser.feed(line)]
    parser.aborting = True
    events += parser.feed(lines[-1])
    events += parser.finish(returncode=0, aborted=True)
    assert not [e for e in events if isinstance(e, Error)]
    assert isinstance(events[-1], Complete) and events[-1].outcome == "aborted"
    # Issue 14, item 10: a SIGINT seamline did not send (terminal_reason "aborted_streaming").
    unasked = parse("abort")
    assert not [e for e in unasked if isinstance(e, Error)]
    assert isinstance(unasked[-1], Complete) and (unasked[-1].outcome, unasked[-1].stop_reason) == (
        "aborted",
        "aborted",
    )


def test_aborted_turn_keeps_what_streamed() -> None:
    # Issue 14, item 9: the partial answer is the closing text and the complete's text.
    events = parse("abort_streamed", aborted=True)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Partial "
    assert [e.text for e in events if isinstance(e, Text)] == ["Partial "]
    final = events[-1]
    assert isinstance(final, Complete) and (final.outcome, final.text) == ("aborted", "Partial ")


def test_permission_denials_become_decisions_by_the_agent() -> None:
    # Issue 14, item 11: Write has no allow rule; Claude Code lists it in permission_denials.
    events = parse("denied")
    calls = [e for e in events if isinstance(e, ToolCall)]
    decisions = [e for e in events if isinstance(e, PermissionDecision)]
    assert [c.name for c in calls] == ["Write"] and calls[0].arguments["content"] == "new\n"
    assert [(d.request_id, d.decision) for d in decisions] == [(f"perm-{calls[0].call_id}", "deny")]
    assert "Claude Code" in decisions[0].reason and "Write" in decisions[0].reason
    results = [e for e in events if isinstance(e, ToolResult)]
    assert results[0].is_error and not [e for e in events if isinstance(e, FileChange)]
    final = events[-1]
    assert isinstance(final, Complete) and (final.outcome, final.text) == ("completed", "I could not write it.")


def test_resume_of_an_unknown_session_is_invalid_request() -> None:
    events = parse("resume_unknown", returncode=fixture_meta(P, "resume_unknown")["exit_code"])
    errors = [e for e in events if isinstance(e, Error)]
    assert [(e.kind, e.retryable) for e in errors] == [("invalid_request", False)]
    assert "No conversation found with session ID: 0b5e5e5e-dead-4bad-8bad-00000000beef" in errors[0].message


def test_mcp_tools_are_labelled_mcp() -> None:
    events = parse("mcp")
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [(c.name, c.arguments, c.source) for c in calls] == [("mcp__everything__echo", {"message": "hi-mcp"}, "mcp")]
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [(r.output, r.is_error) for r in results] == [("Echo: hi-mcp", False)]


def test_529_is_provider_and_retryable() -> None:
    events = parse("overloaded_529", returncode=1)
    assert [(e.kind, e.retryable) for e in events if isinstance(e, Error)] == [("provider", True)]


def test_unreachable_endpoint_is_transport_also_when_our_bound_ends_it() -> None:
    # Issue 14, item 13: Claude Code's own give-up and the driver's retry bound agree.
    events = parse("unreachable", returncode=1)
    retries = [e for e in events if isinstance(e, Error) and e.attempt is not None]
    assert [(e.kind, e.attempt) for e in retries] == [("transport", 1), ("transport", 2)]
    final = events[-1]
    assert isinstance(final, Complete) and final.stop_reason == "transport"
    parser = ClaudeStreamJsonParser()
    cut: list[object] = []
    for line in fixture_lines(P, "unreachable"):
        cut += parser.feed(line)
        if parser.retries > 1:
            break
    cut += parser.finish(returncode=-2, gave_up="claude-code: the CLI retried 2 times (our bound is 1)")
    assert [(e.kind, e.retryable) for e in cut if isinstance(e, Error) and e.attempt is None] == [("transport", True)]
    assert isinstance(cut[-1], Complete) and cut[-1].stop_reason == "transport"


def test_no_result_frame_is_a_classified_failure() -> None:
    events = replay(ClaudeStreamJsonParser(), fixture_lines(P, "plain")[:3], returncode=1)
    errors = [e for e in events if isinstance(e, Error)]
    assert len(errors) == 1 and "exit code 1" in errors[0].message
    assert isinstance(events[-1], Complete) and events[-1].outcome == "failed"


# Every captured case, as the driver would end it: (outcome, stop reason). A new fixture
# must be added here (the next test says so).
EXPECTED: dict[str, tuple[str, str]] = {
    "plain": ("completed", "end_turn"),
    "tools": ("completed", "end_turn"),
    "resume": ("completed", "end_turn"),
    "mcp": ("completed", "end_turn"),
    "denied": ("completed", "end_turn"),
    "error_401": ("failed", "auth"),
    "error_429": ("failed", "quota"),
    "error_500": ("failed", "provider"),
    "overloaded": ("failed", "provider"),
    "overloaded_529": ("failed", "provider"),
    "cut": ("completed", "end_turn"),
    "cut_retried": ("completed", "end_turn"),
    "abort": ("aborted", "aborted"),
    "abort_streamed": ("aborted", "aborted"),
    "resume_unknown": ("failed", "invalid_request"),
    "unreachable": ("failed", "transport"),
}


def test_every_fixture_is_a_case_here() -> None:
    captured = sorted(path.stem for path in (FIXTURES / P).glob("*.jsonl"))
    assert captured == sorted(EXPECTED)


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_every_case_ends_right(scenario: str) -> None:
    meta = fixture_meta(P, scenario)
    stderr_file = FIXTURES / P / f"{scenario}.stderr"
    stderr = stderr_file.read_text() if stderr_file.is_file() else ""
    parser = ClaudeStreamJsonParser()
    events: list[object] = []
    gave_up = None
    for line in fixture_lines(P, scenario):
        events += parser.feed(line)
        if parser.retries > BOUND:
            gave_up = f"retried {parser.retries} times (our bound is {BOUND})"
            break
    events += parser.watch_stderr(stderr)
    aborted = meta.get("signal") is not None
    events += parser.finish(returncode=meta["exit_code"], stderr=stderr, aborted=aborted, gave_up=gave_up)
    final = events[-1]
    assert isinstance(final, Complete) and (final.outcome, final.stop_reason) == EXPECTED[scenario]
    assert sum(isinstance(e, Complete) for e in events) == 1


ALL = [line for s in ("tools", "error_429", "abort") for line in fixture_lines(P, s)]
test_damaged_lines = props.check_damage(ClaudeStreamJsonParser, fixture_lines(P, "tools"))
test_shuffled_lines = props.check_shuffled(ClaudeStreamJsonParser, ALL)
test_random_frames = props.check_random(ClaudeStreamJsonParser)


# -- a process that takes several turns (``--input-format stream-json``) -------------------


def _result(totals: dict[str, tuple[int, int, float]], n: int) -> bytes:
    """A result frame whose modelUsage and total_cost_usd are the process's running totals."""
    usage = {m: {"inputTokens": i, "outputTokens": o, "costUSD": c} for m, (i, o, c) in totals.items()}
    frame = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": f"turn {n}",
        "session_id": "s",
        "uuid": f"u{n}",
        "total_cost_usd": sum(c for _, _, c in totals.values()),
        "modelUsage": usage,
    }
    return json.dumps(frame).encode()


figures = st.tuples(st.integers(0, 10_000), st.integers(0, 1_000), st.integers(0, 10_000).map(lambda c: c / 1000))


@settings(max_examples=60, deadline=None)
@given(turns=st.lists(st.dictionaries(st.sampled_from(["opus", "haiku"]), figures, min_size=1), min_size=1, max_size=6))
def test_each_turn_reports_its_share_of_the_running_totals(turns: list[dict[str, tuple[int, int, float]]]) -> None:
    totals: dict[str, tuple[int, int, float]] = {}
    carried: dict[str, object] = {}
    reported: dict[str, list[float]] = {}
    for n, spent in enumerate(turns, 1):
        for model, (i, o, c) in spent.items():
            was = totals.get(model, (0, 0, 0.0))
            totals[model] = (was[0] + i, was[1] + o, was[2] + c)
        parser = ClaudeStreamJsonParser()
        parser.continue_from(dict(carried))
        events = parser.feed(_result(totals, n)) + parser.finish(returncode=None)
        carried = parser.carry_over()
        for usage in (e for e in events if isinstance(e, Usage)):
            assert usage.model is not None and usage.cost_usd is not None and usage.cost_usd >= 0
            assert usage.input_tokens >= 0 and usage.output_tokens >= 0
            mine = spent.get(usage.model, (0, 0, 0.0))
            assert (usage.input_tokens, usage.output_tokens) == mine[:2]
            reported.setdefault(usage.model, []).append(usage.cost_usd)
        assert isinstance(events[-1], Complete) and events[-1].text == f"turn {n}"
    for model, costs in reported.items():
        assert sum(costs) == pytest.approx(totals[model][2])  # the turns add up to the process's total


def test_a_turn_without_a_result_leaves_the_running_totals_as_they_were() -> None:
    first = ClaudeStreamJsonParser()
    first.feed(_result({"opus": (100, 5, 0.5)}, 1))
    interrupted = ClaudeStreamJsonParser()
    interrupted.continue_from(first.carry_over())
    interrupted.finish(returncode=None, aborted=True)  # no result frame at all
    third = ClaudeStreamJsonParser()
    third.continue_from(interrupted.carry_over())
    usage = [e for e in third.feed(_result({"opus": (130, 7, 0.75)}, 3)) if isinstance(e, Usage)]
    assert [(u.input_tokens, u.output_tokens, u.cost_usd) for u in usage] == [(30, 2, 0.25)]


def test_an_answer_to_a_control_request_reports_nothing() -> None:
    parser = ClaudeStreamJsonParser()
    assert parser.feed(b'{"type":"control_response","response":{"subtype":"success","request_id":"r1"}}') == []
