"""Claude Code's stream-json parser, on the lines the real program printed (golden
fixtures from tests/fixtures/claude-code, captured by tests/fixtures/capture.py)."""

from __future__ import annotations

import pytest

from seamline.events import (
    Complete,
    Error,
    FileChange,
    Raw,
    Session,
    Text,
    TextDelta,
    ToolCall,
    ToolResult,
    Usage,
)
from seamline.providers.cli_parsers.claude_code import ClaudeStreamJsonParser
from tests.providers import cli_parser_properties as props
from tests.providers.agent_cli_support import fixture_lines, fixture_meta, replay

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


def test_interrupt_is_an_abort_only_when_we_asked_for_it() -> None:
    parser = ClaudeStreamJsonParser()
    lines = fixture_lines(P, "abort")
    events = [e for line in lines[:-1] for e in parser.feed(line)]
    parser.aborting = True
    events += parser.feed(lines[-1])
    events += parser.finish(returncode=0, aborted=True)
    assert not [e for e in events if isinstance(e, Error)]
    assert isinstance(events[-1], Complete) and events[-1].outcome == "aborted"
    unasked = parse("abort")
    assert isinstance(unasked[-1], Complete) and unasked[-1].outcome == "failed"


def test_no_result_frame_is_a_classified_failure() -> None:
    events = replay(ClaudeStreamJsonParser(), fixture_lines(P, "plain")[:3], returncode=1)
    errors = [e for e in events if isinstance(e, Error)]
    assert len(errors) == 1 and "exit code 1" in errors[0].message
    assert isinstance(events[-1], Complete) and events[-1].outcome == "failed"


ALL = [line for s in ("tools", "error_429", "abort") for line in fixture_lines(P, s)]
test_damaged_lines = props.check_damage(ClaudeStreamJsonParser, fixture_lines(P, "tools"))
test_shuffled_lines = props.check_shuffled(ClaudeStreamJsonParser, ALL)
test_random_frames = props.check_random(ClaudeStreamJsonParser)
