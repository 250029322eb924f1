"""The Gemini CLI's stream-json parser, on the lines the real program printed (golden
fixtures from tests/fixtures/gemini-cli, captured by tests/fixtures/capture.py)."""

from __future__ import annotations

import pytest

from seamline.events import Complete, Error, FileChange, Session, Text, TextDelta, ToolCall, ToolResult, Usage
from seamline.providers.agent_clis.parsers.gemini_cli import GeminiStreamJsonParser
from tests.providers import cli_parser_properties as props
from tests.providers.agent_cli_support import FIXTURES, fixture_lines, fixture_meta, replay

BOUND = 2  # the driver's default retry bound
P = "gemini-cli"


def parse(scenario: str, **kwargs: object) -> list[object]:
    return list(replay(GeminiStreamJsonParser(), fixture_lines(P, scenario), **kwargs))  # type: ignore[arg-type]


def test_fixtures_say_how_they_were_made() -> None:
    meta = fixture_meta(P, "tools")
    assert meta["cli_version"] == "0.61.0"
    assert meta["command"][:2] == ["gemini", "-p"] and "stream-json" in meta["command"]


def test_plain_answer_streams_then_completes() -> None:
    events = parse("plain")
    sessions = [e for e in events if isinstance(e, Session)]
    assert len(sessions) == 1 and sessions[0].model == "gemini-2.5-flash"
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Hello from the fake."
    assert [e.text for e in events if isinstance(e, Text)] == ["Hello from the fake."]
    usage = [e for e in events if isinstance(e, Usage)]
    assert len(usage) == 1 and usage[0].input_tokens == 30 and usage[0].model == "gemini-2.5-flash"
    assert isinstance(events[-1], Complete) and events[-1].outcome == "completed"


def test_tools_with_stable_ids_and_file_changes() -> None:
    events = parse("tools")
    calls = [e for e in events if isinstance(e, ToolCall)]
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [c.name for c in calls] == ["run_shell_command", "read_file", "write_file"]
    assert [r.call_id for r in results] == [c.call_id for c in calls]
    assert results[0].output == "the secret word is pelican"
    changes = [(c.kind, c.call_id) for c in events if isinstance(c, FileChange)]
    assert changes == [("read", calls[1].call_id), ("edited", calls[2].call_id)]
    usage = [e for e in events if isinstance(e, Usage)]
    assert usage[0].input_tokens == 230 and usage[0].cache_read_tokens == 50
    assert isinstance(events[-1], Complete) and events[-1].text == "The word is pelican."


def test_resumed_turn_keeps_the_session_id() -> None:
    meta = fixture_meta(P, "resume")
    resumed = meta["command"][meta["command"].index("--resume") + 1]
    events = parse("resume")
    assert [e.provider_session_id for e in events if isinstance(e, Session)] == [resumed]
    assert isinstance(events[-1], Complete) and events[-1].text == "Second, resumed."


@pytest.mark.parametrize(
    ("scenario", "kind", "exit_code"),
    [("error_401", "auth", 145), ("error_429", "quota", 173), ("error_500", "provider", 244),
     ("overloaded", "provider", 247), ("cut", "transport", 1)],
)  # fmt: skip
def test_failures_are_classified_whatever_the_exit_code(scenario: str, kind: str, exit_code: int) -> None:
    meta = fixture_meta(P, scenario)
    assert meta["exit_code"] == exit_code  # the HTTP status modulo 256, not a verdict
    events = parse(scenario, returncode=exit_code)
    errors = [e for e in events if isinstance(e, Error)]
    assert [e.kind for e in errors] == [kind]
    assert isinstance(events[-1], Complete) and events[-1].stop_reason == kind


def test_error_line_then_success_result_is_a_failure() -> None:
    parser = GeminiStreamJsonParser()
    lines = fixture_lines(P, "plain")
    events = [e for line in lines[:-1] for e in parser.feed(line)]
    events += parser.feed(b'{"type":"error","severity":"error","message":"stream ended unexpectedly"}')
    events += parser.feed(lines[-1])
    events += parser.finish(returncode=0)
    assert isinstance(events[-1], Complete) and events[-1].outcome == "failed"
    assert events[-1].stop_reason == "transport"


def stderr_of(scenario: str) -> str:
    return (FIXTURES / P / f"{scenario}.stderr").read_text()


def test_retries_on_stderr_are_counted_and_a_give_up_is_transport() -> None:
    # Issue 14, item 13: the CLI's retries show only on stderr ("Attempt N failed ...").
    parser = GeminiStreamJsonParser()
    lines = fixture_lines(P, "unreachable")
    events: list[object] = [e for line in lines[:2] for e in parser.feed(line)]
    events += parser.watch_stderr(stderr_of("unreachable"))
    events += parser.watch_stderr(stderr_of("unreachable"))  # the same tail again adds nothing
    retries = [e for e in events if isinstance(e, Error)]
    assert [(e.kind, e.retryable, e.attempt) for e in retries] == [("transport", True, 1), ("transport", True, 2)]
    assert parser.retries == 2
    events += parser.finish(returncode=-2, gave_up="gemini-cli: the CLI retried 2 times (our bound is 1)")
    final = events[-1]
    assert isinstance(final, Complete) and (final.outcome, final.stop_reason) == ("failed", "transport")
    # And when the CLI gives up first, its result says the same.
    whole = parse("unreachable", returncode=1)
    assert isinstance(whole[-1], Complete) and whole[-1].stop_reason == "transport"


def test_resume_of_an_unknown_session_is_invalid_request_with_the_error_line() -> None:
    # Issue 14, item 3: exit 42, nothing on stdout; the error line comes before a hint.
    meta = fixture_meta(P, "resume_unknown")
    assert meta["exit_code"] == 42 and fixture_lines(P, "resume_unknown") == []
    stderr = stderr_of("resume_unknown")
    events = GeminiStreamJsonParser().finish(returncode=42, stderr=stderr)
    errors = [e for e in events if isinstance(e, Error)]
    assert [(e.kind, e.retryable) for e in errors] == [("invalid_request", False)]
    cause = next(line for line in stderr.splitlines() if line.startswith("Error"))
    assert cause in errors[0].message
    assert isinstance(events[-1], Complete) and events[-1].stop_reason == "invalid_request"


def test_aborted_turn_keeps_what_streamed() -> None:
    # Issue 14, item 9: a closing text for the deltas, and the complete carries it.
    events = parse("abort_streamed", aborted=True)
    assert [e.text for e in events if isinstance(e, Text)] == ["Partial "]
    final = events[-1]
    assert isinstance(final, Complete) and (final.outcome, final.text) == ("aborted", "Partial ")


def test_cut_stream_error_line_then_bare_error_result_keeps_the_first_cause() -> None:
    # Issue 14, item 2: a retryable transport error line, then a result with status "error"
    # and no error object: no second, made-up provider error; the stop reason is transport.
    events = parse("cut_clean", returncode=fixture_meta(P, "cut_clean")["exit_code"])
    errors = [e for e in events if isinstance(e, Error)]
    assert [(e.kind, e.retryable) for e in errors] == [("transport", True)]
    assert "ended without a finish reason" in errors[0].message
    final = events[-1]
    assert isinstance(final, Complete) and (final.outcome, final.stop_reason) == ("failed", "transport")


def test_mcp_tools_are_labelled_mcp() -> None:
    # Issue 14, item 12: the CLI names an MCP tool mcp_<server>_<tool>; the source says mcp.
    events = parse("mcp")
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [(c.name, c.arguments, c.source) for c in calls] == [("mcp_everything_echo", {"message": "hi-mcp"}, "mcp")]
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [(r.call_id, r.output, r.is_error) for r in results] == [(calls[0].call_id, "Echo: hi-mcp", False)]


def test_529_is_provider_and_retryable() -> None:
    events = parse("overloaded_529", returncode=fixture_meta(P, "overloaded_529")["exit_code"])
    assert [(e.kind, e.retryable) for e in events if isinstance(e, Error)] == [("provider", True)]


# Every captured case, as the driver would end it: (outcome, stop reason). A new fixture
# must be added here (the next test says so).
EXPECTED: dict[str, tuple[str, str]] = {
    "plain": ("completed", "end_turn"),
    "tools": ("completed", "end_turn"),
    "resume": ("completed", "end_turn"),
    "mcp": ("completed", "end_turn"),
    "error_401": ("failed", "auth"),
    "error_429": ("failed", "quota"),
    "error_500": ("failed", "provider"),
    "overloaded": ("failed", "provider"),
    "overloaded_529": ("failed", "provider"),
    "cut": ("failed", "transport"),
    "cut_retried": ("failed", "transport"),
    "cut_clean": ("failed", "transport"),
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
    parser = GeminiStreamJsonParser()
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


ALL = [line for s in ("tools", "error_429", "cut") for line in fixture_lines(P, s)]
test_damaged_lines = props.check_damage(GeminiStreamJsonParser, fixture_lines(P, "tools"))
test_shuffled_lines = props.check_shuffled(GeminiStreamJsonParser, ALL)
test_random_frames = props.check_random(GeminiStreamJsonParser)
