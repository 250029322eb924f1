"""The scripted provider: every bad script is one clear error before any call, and each
kind of response plays the same events (pinned here so a faster player cannot drift)."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import pytest

from seamline.errors import InvalidRequest
from seamline.events import Event, encode_event
from seamline.providers.local.scripted import validate_script
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.testing import scripted
from seamline.tools import Toolset, tool

BAD: list[tuple[object, str]] = [
    ("nope", "a script is a list of responses"),
    (["x"], "response 1 is not an object"),
    ({"txt": "a"}, "response 1 has unknown keys ['txt']; known: "),
    ({"text": ["a"]}, "response 1: text must be a string"),
    ({"reasoning": {"a": 1}}, "response 1: reasoning must be a string"),
    ({"deltas": "ab"}, "response 1: deltas must be a list of strings"),
    ({"deltas": ["a", None]}, "response 1: deltas must be a list of strings"),
    ({"stream": 1}, "response 1: stream must be true or false"),
    ({"stream": None}, "response 1: stream must be true or false"),
    ({"delay": True}, "response 1: delay must be a number of seconds, 0 or more"),
    ({"delay": "1"}, "response 1: delay must be a number of seconds, 0 or more"),
    ({"delay": -1}, "response 1: delay must be a number of seconds, 0 or more"),
    ({"delay": math.inf}, "response 1: delay must be a number of seconds, 0 or more"),
    ({"delay": math.nan}, "response 1: delay must be a number of seconds, 0 or more"),
    ({"tool_calls": {"name": "a"}}, "response 1: tool_calls must be a list of {name, arguments}"),
    ({"tool_calls": ["a"]}, "response 1: each tool call needs a name"),
    ({"tool_calls": [{"arguments": {}}]}, "response 1: each tool call needs a name"),
    ({"tool_calls": [{"name": 1}]}, "response 1: each tool call needs a name"),
    ({"tool_calls": [{"name": "a", "arguments": []}]}, "response 1: tool call arguments must be an object"),
    ({"tool_calls": [{"name": "a", "id": 1.5}]}, "response 1: a tool call id must be a string"),
    ({"usage": []}, "response 1: usage must be an object"),
    ({"usage": {"input_tokens": -1}}, "response 1: usage.input_tokens must be a whole number, 0 or more"),
    ({"usage": {"output_tokens": 1.0}}, "response 1: usage.output_tokens must be a whole number, 0 or more"),
    ({"usage": {"cache_read_tokens": True}}, "response 1: usage.cache_read_tokens must be a whole number, 0 or more"),
    ({"usage": {"cache_write_tokens": "1"}}, "response 1: usage.cache_write_tokens must be a whole number, 0 or more"),
    ({"usage": {"cost_usd": -0.5}}, "response 1: usage.cost_usd must be a number, 0 or more"),
    ({"usage": {"cost_usd": False}}, "response 1: usage.cost_usd must be a number, 0 or more"),
    ({"usage": {"cost_usd": math.inf}}, "response 1: usage.cost_usd must be a number, 0 or more"),
    ({"error": "boom"}, "response 1: error must be an object {kind, message}"),
    ({"error": {"kind": "nope"}}, "response 1: error.kind must be one of "),
    ({"error": {"kind": "auth", "retryable": 1}}, "response 1: error.retryable must be true or false"),
    # the first problem in the fixed order is the one reported
    ({"text": 1.5, "usage": {"input_tokens": -1}, "stream": 2}, "response 1: stream must be true or false"),
    ({"usage": {"input_tokens": -1}, "stream": 2}, "response 1: stream must be true or false"),
    ({"error": 1, "text": [], "delay": -1}, "response 1: text must be a string"),
    ({"error": 1, "tool_calls": [{"name": "a", "arguments": 1}], "delay": -1}, "response 1: delay must be"),
    ({"error": 1, "tool_calls": [{"name": "a", "arguments": 1}]}, "response 1: tool call arguments must be"),
    ({"error": 1, "usage": {"input_tokens": 1, "output_tokens": -1}}, "response 1: usage.output_tokens must be"),
]

GOOD: list[dict[str, Any]] = [
    {},
    {"text": None, "reasoning": None, "deltas": None, "delay": None, "tool_calls": None, "usage": None, "error": None},
    {"text": 3, "reasoning": 2.5, "deltas": [1, "a", 2.0], "stream": True, "delay": 0},
    {"tool_calls": [{"name": "a"}, {"name": "b", "arguments": None, "id": 7}, {"name": "c", "id": None}]},
    {"usage": {"input_tokens": 0, "cost_usd": None}, "error": False},
    {"usage": {}, "delay": 0.25, "error": {"kind": "auth", "retryable": None}},
]


@pytest.mark.parametrize(("response", "message"), BAD)
def test_a_bad_script_is_refused_with_its_first_problem(response: object, message: str) -> None:
    data = [{"text": "fine"}, response] if isinstance(response, dict) else response
    with pytest.raises(InvalidRequest) as caught:
        validate_script(data)
    expected = message.replace("response 1", "response 2") if isinstance(response, dict) else message
    assert str(caught.value.message).startswith(f"script: {expected}")
    if isinstance(data, list) and all(isinstance(r, dict) for r in data):
        with pytest.raises(InvalidRequest):
            scripted(data)


@pytest.mark.parametrize("response", GOOD)
def test_good_responses_pass_unchanged(response: dict[str, Any]) -> None:
    assert validate_script([response]) == [response]


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


SCRIPT: list[dict[str, Any]] = [
    {"reasoning": "think", "text": "Let me look.", "tool_calls": [{"name": "lookup", "arguments": {"key": "a"}}]},
    {
        "deltas": ["x", 1],
        "tool_calls": [{"name": "lookup", "arguments": {"key": "b"}, "id": "mine"}],
        "usage": {"input_tokens": 3},
    },
    {
        "text": "one two three",
        "stream": True,
        "usage": {"input_tokens": 1, "output_tokens": 2, "cost_usd": 0.5, "id": "u1"},
    },
]


def _events(script: list[dict[str, Any]]) -> list[str]:
    return [encode_event(e).decode() for e in asyncio.run(_played(script))]


async def _played(script: list[dict[str, Any]]) -> list[Event]:
    provider = scripted(script)
    session = await provider.open(store=None, tools=Toolset([lookup]), session_id="s1")
    try:
        return [event async for event in session.send("hi")]
    finally:
        await provider.close(session)


SESSION = '{"type":"session","session_id":"s1","provider":"scripted","model":"scripted","provider_session_id":null}'


def test_each_kind_of_response_plays_its_events() -> None:
    assert _events(SCRIPT) == [
        SESSION,
        '{"type":"reasoning","text":"think"}',
        '{"type":"text","text":"Let me look."}',
        '{"type":"tool_call","call_id":"call-1-1-0","name":"lookup","arguments":{"key":"a"},"source":"host"}',
        '{"type":"tool_result","call_id":"call-1-1-0","output":"value of a","is_error":false,"name":"lookup"}',
        '{"type":"text_delta","text":"x"}',
        '{"type":"text_delta","text":"1"}',
        '{"type":"tool_call","call_id":"mine","name":"lookup","arguments":{"key":"b"},"source":"host"}',
        '{"type":"usage","input_tokens":3,"output_tokens":0,"cache_read_tokens":0,"cache_write_tokens":0,'
        '"cost_usd":null,"priced":false,"model":"scripted","usage_id":"s1-1-2"}',
        '{"type":"text","text":"x1"}',
        '{"type":"tool_result","call_id":"mine","output":"value of b","is_error":false,"name":"lookup"}',
        '{"type":"text_delta","text":"one "}',
        '{"type":"text_delta","text":"two "}',
        '{"type":"text_delta","text":"three"}',
        '{"type":"usage","input_tokens":1,"output_tokens":2,"cache_read_tokens":0,"cache_write_tokens":0,'
        '"cost_usd":0.5,"priced":true,"model":"scripted","usage_id":"u1"}',
        '{"type":"text","text":"one two three"}',
        '{"type":"complete","outcome":"completed","stop_reason":"end_turn","text":"one two three"}',
    ]


def test_errors_and_raises_end_the_turn_classified() -> None:
    assert _events([{"error": {"kind": "auth", "message": "no key"}}]) == [
        SESSION,
        '{"type":"error","kind":"auth","message":"no key","retryable":false,"attempt":null}',
        '{"type":"complete","outcome":"failed","stop_reason":"auth","text":""}',
    ]
    assert _events([{"raise": "bug"}]) == [
        SESSION,
        '{"type":"error","kind":"provider","message":"provider scripted failed mid-stream: RuntimeError: bug",'
        '"retryable":false,"attempt":null}',
        '{"type":"complete","outcome":"failed","stop_reason":"provider_error","text":""}',
    ]
    assert _events([{"tool_calls": [{"name": "lookup"}]}]) == [
        SESSION,
        '{"type":"tool_call","call_id":"call-1-1-0","name":"lookup","arguments":{},"source":"host"}',
        '{"type":"tool_result","call_id":"call-1-1-0","output":"invalid_request error: invalid arguments for '
        'lookup: Object missing required field `key`","is_error":true,"name":"lookup"}',
        '{"type":"error","kind":"provider","message":"script exhausted after 1 responses","retryable":false,'
        '"attempt":null}',
        '{"type":"complete","outcome":"failed","stop_reason":"provider","text":""}',
    ]


def test_the_raw_log_of_a_scripted_turn(tmp_path: Path) -> None:
    async def run() -> list[tuple[int, str, str, str]]:
        store = SQLiteStore(tmp_path / "s.db")
        provider = scripted(SCRIPT)
        session = await provider.open(store=store, tools=Toolset([lookup]), session_id="s1")
        try:
            _ = [event async for event in session.send("hi")]
        finally:
            await provider.close(session)
        rows = [(r.turn, r.direction, r.source, r.payload) for r in store.raw_rows("s1")]
        store.close()
        return rows

    event = (1, "out", "event")
    assert asyncio.run(run()) == [
        (1, "in", "prompt", '"hi"'),
        (*event, SESSION),
        (*event, '{"type":"reasoning","text":"think"}'),
        (*event, '{"type":"text","text":"Let me look."}'),
        (*event, '{"type":"tool_call","call_id":"call-1-1-0","name":"lookup","arguments":{"key":"a"},"source":"host"}'),
        (
            *event,
            '{"type":"tool_result","call_id":"call-1-1-0","output":"value of a","is_error":false,"name":"lookup"}',
        ),
        (*event, '{"type":"text_delta","text":"x1"}'),
        (*event, '{"type":"tool_call","call_id":"mine","name":"lookup","arguments":{"key":"b"},"source":"host"}'),
        (
            *event,
            '{"type":"usage","input_tokens":3,"output_tokens":0,"cache_read_tokens":0,"cache_write_tokens":0,'
            '"cost_usd":null,"priced":false,"model":"scripted","usage_id":"s1-1-2"}',
        ),
        (*event, '{"type":"text","text":"x1"}'),
        (*event, '{"type":"tool_result","call_id":"mine","output":"value of b","is_error":false,"name":"lookup"}'),
        (*event, '{"type":"text_delta","text":"one two three"}'),
        (
            *event,
            '{"type":"usage","input_tokens":1,"output_tokens":2,"cache_read_tokens":0,"cache_write_tokens":0,'
            '"cost_usd":0.5,"priced":true,"model":"scripted","usage_id":"u1"}',
        ),
        (*event, '{"type":"text","text":"one two three"}'),
        (*event, '{"type":"complete","outcome":"completed","stop_reason":"end_turn","text":"one two three"}'),
    ]


def test_one_script_given_to_many_providers_is_checked_and_copied_once() -> None:
    script: list[dict[str, Any]] = [{"text": "one"}, {"text": "two", "usage": {"input_tokens": 1}}]
    first, second = scripted(script), scripted(script)
    assert first.script is second.script  # shared, read-only: a provider never changes it
    assert first.script is not script and first.script == script
    script.append({"text": "three"})  # the caller's own list is theirs to change
    assert len(first.script) == 2
    assert len(scripted(script).script) == 3  # changed since: checked and copied again


def test_a_script_changed_between_two_providers_is_checked_again() -> None:
    script: list[dict[str, Any]] = [{"text": "fine"}]
    first = scripted(script)
    script[0] = {"text": "fine", "usage": {"input_tokens": -1}}
    with pytest.raises(InvalidRequest, match=r"usage\.input_tokens must be a whole number"):
        scripted(script)
    assert first.script == [{"text": "fine"}]
