"""The parser of ``codex app-server`` turns, on the lines the real program printed (golden
fixtures from tests/fixtures/codex-app-server, captured by
tests/fixtures/codex_app_server_capture.py): the same events as the exec stream's parser
gives for the same turn (tests/providers/test_codex_parser.py), plus text deltas."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seamline.events import Complete, Error, FileChange, Session, Text, TextDelta, ToolCall, ToolResult, Usage
from seamline.providers.agent_clis.codex_warm import is_turn_end
from seamline.providers.agent_clis.parsers.codex_app_server import CodexAppServerParser
from tests.providers import cli_parser_properties as props
from tests.providers.agent_cli_support import FIXTURES, fixture_lines, fixture_meta, replay

P = "codex-app-server"


def parse(scenario: str, **kwargs: object) -> list[object]:
    return list(replay(CodexAppServerParser(model="gpt-5.5"), fixture_lines(P, scenario), **kwargs))  # type: ignore[arg-type]


def test_fixtures_say_how_they_were_made() -> None:
    meta = fixture_meta(P, "tools")
    assert meta["cli_version"] == "codex-cli 0.171.0"
    assert meta["command"][:2] == ["codex", "app-server"]
    assert [json.loads(m)["method"] for m in meta["stdin"]] == [
        "initialize",
        "initialized",
        "thread/start",
        "turn/start",
    ]


def test_plain_answer_streams_deltas_then_the_whole_text() -> None:
    events = parse("plain")
    sessions = [e for e in events if isinstance(e, Session)]
    assert len(sessions) == 1 and sessions[0].provider_session_id  # from the thread/start answer
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Hello from the fake."
    assert [e.text for e in events if isinstance(e, Text)] == ["Hello from the fake."]
    usage = [e for e in events if isinstance(e, Usage)]
    assert [(u.input_tokens, u.output_tokens, u.priced) for u in usage] == [(30, 5, False)]
    assert isinstance(events[-1], Complete) and events[-1].text == "Hello from the fake."


def test_tools_give_what_the_exec_stream_gives() -> None:
    events = parse("tools")
    calls = [e for e in events if isinstance(e, ToolCall)]
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [c.call_id for c in calls] == [r.call_id for r in results] and len(calls) == 3
    assert [c.name for c in calls] == ["shell", "shell", "apply_patch"]
    assert "cat notes.txt" in calls[0].arguments["command"]
    assert results[0].output == "the secret word is pelican\n" and not results[0].is_error
    assert results[1].is_error  # `false` exits 1
    changes = [e for e in events if isinstance(e, FileChange)]
    assert [(c.path.rsplit("/", 1)[-1], c.kind, c.call_id) for c in changes] == [
        ("made.txt", "created", calls[2].call_id)
    ]
    usage = [e for e in events if isinstance(e, Usage)]
    # The same figures codex exec reports for this script (test_codex_parser.py).
    assert [(u.input_tokens, u.cache_read_tokens, u.output_tokens) for u in usage] == [(230, 50, 22)]


def test_a_resumed_thread_reports_the_turn_share() -> None:
    meta = fixture_meta(P, "resume")
    resumed = json.loads(meta["stdin"][2])["params"]["threadId"]
    parser = CodexAppServerParser()
    parser.baseline = {"input_tokens": 10, "output_tokens": 5}  # the rollout's totals
    events = replay(parser, fixture_lines(P, "resume"))
    assert [e.provider_session_id for e in events if isinstance(e, Session)] == [resumed]
    usage = [e for e in events if isinstance(e, Usage)]
    assert [(u.input_tokens, u.output_tokens) for u in usage] == [(10, 5)]  # 20/10 totals less the first turn


def test_the_next_turn_on_the_process_carries_the_thread_and_its_totals() -> None:
    first = CodexAppServerParser()
    replay(first, fixture_lines(P, "plain"))
    carried = first.carry_over()
    assert carried["totals"]["input_tokens"] == 30 and carried["thread_id"] == first.provider_session_id
    second = CodexAppServerParser()
    second.continue_from(carried)
    # The same turn again, on totals that grew by 30/5: only this turn's share is reported.
    lines = [line for line in fixture_lines(P, "plain") if b"tokenUsage" in line or b"turn/completed" in line]
    grown = [line.replace(b'"inputTokens":30', b'"inputTokens":60').replace(b'"outputTokens":5', b'"outputTokens":10')
             for line in lines]  # fmt: skip
    events = replay(second, grown)
    assert [(u.input_tokens, u.output_tokens) for u in events if isinstance(u, Usage)] == [(30, 5)]
    assert not [e for e in events if isinstance(e, Session)]


@pytest.mark.parametrize(
    ("scenario", "kind"), [("error_401", "auth"), ("error_429", "quota"), ("error_500", "provider")]
)
def test_failures_are_classified(scenario: str, kind: str) -> None:
    events = parse(scenario)
    errors = [e for e in events if isinstance(e, Error)]
    assert [e.kind for e in errors] == [kind]
    final = events[-1]
    assert isinstance(final, Complete) and (final.outcome, final.stop_reason) == ("failed", kind)


def test_an_interrupted_turn_is_aborted() -> None:
    events = parse("abort", aborted=True)
    final = events[-1]
    assert isinstance(final, Complete) and final.outcome == "aborted"
    assert not [e for e in events if isinstance(e, Error)]


def test_a_refused_turn_start_ends_the_turn() -> None:
    refusal = b'{"id":"turn-0123","error":{"code":-32600,"message":"thread not found"}}'
    parser = CodexAppServerParser()
    events = parser.feed(refusal)
    assert parser.terminal_seen and is_turn_end(refusal)
    assert [e.kind for e in events if isinstance(e, Error)] == ["invalid_request"]
    assert not is_turn_end(b'{"id":"interrupt-1","error":{"code":-32600,"message":"no turn"}}')


EXPECTED = {"plain", "tools", "resume", "error_401", "error_429", "error_500", "abort"}


def test_every_fixture_is_a_case_here_and_ends_on_its_turns_end() -> None:
    assert {path.stem for path in (FIXTURES / P).glob("*.jsonl")} == EXPECTED
    for scenario in EXPECTED:
        lines = fixture_lines(P, scenario)
        assert [is_turn_end(line) for line in lines].count(True) == 1 and is_turn_end(lines[-1]), scenario


ALL = [line for s in ("tools", "error_401", "abort") for line in fixture_lines(P, s)]
test_damaged_lines = props.check_damage(CodexAppServerParser, fixture_lines(P, "tools"))
test_shuffled_lines = props.check_shuffled(CodexAppServerParser, ALL)
test_random_frames = props.check_random(CodexAppServerParser)


_METHODS = ["thread/started", "turn/started", "turn/completed", "item/started", "item/completed",
            "item/agentMessage/delta", "thread/tokenUsage/updated", "error", "warning", "x"]  # fmt: skip
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=16,
)
_KEYS = st.sampled_from(["item", "turn", "thread", "tokenUsage", "delta", "error", "willRetry", "id", "type", "status"])
_NOTIFICATIONS = st.builds(
    lambda m, p: {"method": m, "params": p}, st.sampled_from(_METHODS), st.dictionaries(_KEYS, _JSON)
)
_ANSWERS = st.builds(
    lambda i, k, v: {"id": i, k: v},
    st.sampled_from(["turn-1", "seamline-thread", 3]),
    st.sampled_from(["result", "error"]),
    _JSON,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_NOTIFICATIONS | _ANSWERS, max_size=12))
def test_random_notifications_never_raise_and_end_in_one_complete(frames: list[object]) -> None:
    parser = CodexAppServerParser()
    for frame in frames:
        for event in parser.feed(json.dumps(frame).encode()):
            assert not isinstance(event, Complete)
    ending = parser.finish(returncode=None)
    assert sum(isinstance(e, Complete) for e in ending) == 1 and isinstance(ending[-1], Complete)
