"""Codex's ``exec --json`` parser, on the lines the real program printed (golden fixtures
from tests/fixtures/codex, captured by tests/fixtures/capture.py)."""

from __future__ import annotations

import pytest

from seamline.events import Complete, Error, FileChange, Session, Text, ToolCall, ToolResult, Usage
from seamline.providers.agent_clis.parsers.codex import CodexJsonParser
from tests.providers import cli_parser_properties as props
from tests.providers.agent_cli_support import FIXTURES, fixture_lines, fixture_meta, replay

BOUND = 2  # the driver's default retry bound
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


def stderr_of(scenario: str) -> str:
    return (FIXTURES / P / f"{scenario}.stderr").read_text()


def test_websocket_fallback_notices_are_progress_and_the_turn_completes() -> None:
    # Issue 14, item 1: Codex's own bounded retries (n/5) then HTTP; the turn goes on.
    parser = CodexJsonParser(model="gpt-5.5")
    events = replay(parser, fixture_lines(P, "ws_fallback"))
    notices = [e for e in events if isinstance(e, Error)]
    assert [(e.kind, e.retryable, e.attempt) for e in notices] == [("transport", True, n) for n in (2, 3, 4, 5)]
    assert parser.retries == 0  # Codex bounds these itself; the driver's bound stays untouched
    assert [e.text for e in events if isinstance(e, Text)] == ["Hello over HTTP."]
    usage = [e for e in events if isinstance(e, Usage)]
    assert len(usage) == 1 and usage[0].input_tokens == 30
    final = events[-1]
    assert isinstance(final, Complete) and (final.outcome, final.text) == ("completed", "Hello over HTTP.")


def test_bounded_stream_retries_then_failure_is_transport() -> None:
    events = parse("cut_retried", returncode=fixture_meta(P, "cut_retried")["exit_code"])
    assert [e.attempt for e in events if isinstance(e, Error) and e.attempt is not None] == [1, 2]
    assert [e.kind for e in events if isinstance(e, Error) and e.attempt is None] == ["transport"]
    final = events[-1]
    assert isinstance(final, Complete) and (final.outcome, final.stop_reason) == ("failed", "transport")


def test_unreachable_endpoint_counts_retries_and_gives_up_as_transport() -> None:
    # Issue 14, item 13: "waiting for network" for ever; the driver's bound ends it: transport.
    parser = CodexJsonParser()
    events: list[object] = []
    for line in fixture_lines(P, "unreachable"):
        events += parser.feed(line)
        if parser.retries > 2:
            break
    assert parser.retries == 3 and parser.retry_kind == "transport"
    events += parser.finish(returncode=-9, gave_up="codex: the CLI retried 3 times (our bound is 2)")
    errors = [e for e in events if isinstance(e, Error) and e.attempt is None]
    assert [(e.kind, e.retryable) for e in errors] == [("transport", True)]
    final = events[-1]
    assert isinstance(final, Complete) and (final.outcome, final.stop_reason) == ("failed", "transport")


def test_resume_of_an_unknown_thread_is_invalid_request_with_the_real_cause() -> None:
    # Issue 14, item 3: stdout is empty; stderr ends in a stack backtrace after the cause.
    meta = fixture_meta(P, "resume_unknown")
    assert fixture_lines(P, "resume_unknown") == [] and meta["exit_code"] == 1
    parser = CodexJsonParser()
    events = parser.finish(returncode=1, stderr=stderr_of("resume_unknown"))
    errors = [e for e in events if isinstance(e, Error)]
    assert len(errors) == 1 and errors[0].kind == "invalid_request" and not errors[0].retryable
    assert "no rollout found for thread id 0b5e5e5e-dead-4bad-8bad-00000000beef" in errors[0].message
    final = events[-1]
    assert isinstance(final, Complete) and final.stop_reason == "invalid_request"


def test_aborted_turn_keeps_the_text_said_and_the_running_call() -> None:
    # Issue 14, item 9: an interrupted command; the message before it is the turn's text.
    events = parse("abort_streamed", returncode=1, aborted=True)
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [(c.name, c.arguments) for c in calls] == [("shell", {"command": "/bin/bash -lc 'sleep 30'"})]
    final = events[-1]
    assert isinstance(final, Complete) and (final.outcome, final.text) == ("aborted", "Let me look.")


def test_529_is_provider_and_retryable() -> None:
    events = parse("overloaded_529", returncode=1)
    errors = [e for e in events if isinstance(e, Error)]
    assert [(e.kind, e.retryable) for e in errors] == [("provider", True)]


# Every captured case, as the driver would end it: (outcome, stop reason). A new fixture
# must be added here (the next test says so).
EXPECTED: dict[str, tuple[str, str]] = {
    "plain": ("completed", "end_turn"),
    "tools": ("completed", "end_turn"),
    "resume": ("completed", "end_turn"),
    "error_401": ("failed", "auth"),
    "error_429": ("failed", "quota"),
    "error_500": ("failed", "provider"),
    "overloaded": ("failed", "provider"),
    "overloaded_529": ("failed", "provider"),
    "cut": ("failed", "transport"),
    "cut_retried": ("failed", "transport"),
    "abort": ("aborted", "aborted"),
    "abort_streamed": ("aborted", "aborted"),
    "resume_unknown": ("failed", "invalid_request"),
    "unreachable": ("failed", "transport"),
    "ws_fallback": ("completed", "end_turn"),
}


def test_every_fixture_is_a_case_here() -> None:
    captured = sorted(path.stem for path in (FIXTURES / P).glob("*.jsonl"))
    assert captured == sorted(EXPECTED)


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_every_case_ends_right(scenario: str) -> None:
    meta = fixture_meta(P, scenario)
    stderr_file = FIXTURES / P / f"{scenario}.stderr"
    stderr = stderr_file.read_text() if stderr_file.is_file() else ""
    parser = CodexJsonParser()
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


ALL = [line for s in ("tools", "error_401", "cut") for line in fixture_lines(P, s)]
test_damaged_lines = props.check_damage(CodexJsonParser, fixture_lines(P, "tools"))
test_shuffled_lines = props.check_shuffled(CodexJsonParser, ALL)
test_random_frames = props.check_random(CodexJsonParser)
