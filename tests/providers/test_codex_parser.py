"""Codex's ``exec --json`` parser, on the lines the real program printed (golden fixtures
from tests/fixtures/codex, captured by tests/fixtures/capture.py)."""

from __future__ import annotations

import pytest

from seamline.events import Complete, Error, FileChange, Session, Text, ToolCall, ToolResult, Usage
from seamline.providers.cli_parsers.codex import CodexJsonParser
from tests.providers import cli_parser_properties as props
from tests.providers.agent_cli_support import fixture_lines, fixture_meta, replay

P = "codex"


def parse(scenario: str, **kwargs: object) -> list[object]:
    return list(replay(CodexJsonParser(model="gpt-5.5"), fixture_lines(P, scenario), **kwargs))  # type: ignore[arg-type]


def test_fixtures_say_how_they_were_made() -> None:
    meta = fixture_meta(P, "tools")
    assert meta["cli_version"] == "codex-cli 0.171.0"
    assert meta["command"][:3] == ["codex", "exec", "--json"]


def test_plain_answer_arrives_whole() -> None:
    events = parse("plain")
    assert len([e for e in events if isinstance(e, Session)]) == 1
    assert [e.text for e in events if isinstance(e, Text)] == ["Hello from the fake."]
    usage = [e for e in events if isinstance(e, Usage)]
    # Codex reports tokens only: seamline prices them later (priced stays False here).
    assert len(usage) == 1 and usage[0].input_tokens == 30 and not usage[0].priced and usage[0].cost_usd is None
    assert isinstance(events[-1], Complete) and events[-1].text == "Hello from the fake."


def test_commands_as_tool_calls_with_stable_ids() -> None:
    events = parse("tools")
    calls = [e for e in events if isinstance(e, ToolCall)]
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [c.call_id for c in calls] == [r.call_id for r in results] == ["item_0", "item_1", "item_2"]
    assert [c.name for c in calls] == ["shell", "shell", "apply_patch"]
    changes = [e for e in events if isinstance(e, FileChange)]
    assert [(c.path.rsplit("/", 1)[-1], c.kind, c.call_id) for c in changes] == [("made.txt", "created", "item_2")]
    assert "cat notes.txt" in calls[0].arguments["command"]
    assert results[0].output == "the secret word is pelican\n" and not results[0].is_error
    assert results[1].is_error  # `false` exits 1
    usage = [e for e in events if isinstance(e, Usage)]
    assert usage[0].input_tokens == 230 and usage[0].cache_read_tokens == 50 and usage[0].output_tokens == 22


def test_resumed_turn_keeps_the_thread_and_reports_the_turn_share() -> None:
    meta = fixture_meta(P, "resume")
    resumed = meta["command"][-2]
    parser = CodexJsonParser()
    parser.baseline = {"input_tokens": 10, "output_tokens": 5}
    events = replay(parser, fixture_lines(P, "resume"))
    assert [e.provider_session_id for e in events if isinstance(e, Session)] == [resumed]
    usage = [e for e in events if isinstance(e, Usage)]
    assert (usage[0].input_tokens, usage[0].output_tokens) == (10, 5)  # 20/10 totals less the first turn


@pytest.mark.parametrize(
    ("scenario", "kind"),
    [("error_401", "auth"), ("error_429", "quota"), ("error_500", "provider"), ("overloaded", "provider"),
     ("cut", "transport")],
)  # fmt: skip
def test_failures_are_classified(scenario: str, kind: str) -> None:
    events = parse(scenario, returncode=fixture_meta(P, scenario)["exit_code"])
    errors = [e for e in events if isinstance(e, Error) and e.attempt is None]
    assert [e.kind for e in errors] == [kind]
    final = events[-1]
    assert isinstance(final, Complete) and final.outcome == "failed" and final.stop_reason == kind


def test_interrupted_turn_without_verdict() -> None:
    aborted = parse("abort", returncode=1, aborted=True)
    assert isinstance(aborted[-1], Complete) and aborted[-1].outcome == "aborted"
    unasked = parse("abort", returncode=1)
    assert isinstance(unasked[-1], Complete) and unasked[-1].outcome == "failed"
    assert [e.kind for e in unasked if isinstance(e, Error)] == ["provider"]


def test_reconnect_notices_count_as_retries() -> None:
    parser = CodexJsonParser()
    events = parser.feed(b'{"type":"error","message":"Reconnecting... 2/5 (stream disconnected before completion)"}')
    assert parser.retries == 1
    assert [(e.kind, e.retryable, e.attempt) for e in events if isinstance(e, Error)] == [("transport", True, 1)]


ALL = [line for s in ("tools", "error_401", "cut") for line in fixture_lines(P, s)]
test_damaged_lines = props.check_damage(CodexJsonParser, fixture_lines(P, "tools"))
test_shuffled_lines = props.check_shuffled(CodexJsonParser, ALL)
test_random_frames = props.check_random(CodexJsonParser)
