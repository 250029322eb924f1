"""Where each observer callback falls between the events the consumer receives: one log
of both, pinned for turns that take every path of the loop (so a faster loop keeps it)."""

from __future__ import annotations

import asyncio
from typing import Any

from seamline.events import Event, encode_event
from seamline.loop.messages import Message
from seamline.loop.observers import Intervention, LoopContext, Observer
from seamline.testing import scripted
from seamline.tools import Toolset, tool


@tool
def add(a: int, b: int = 2) -> str:
    """Add two integers."""
    return str(a + b)


@tool(tool_class="write")
def note(text: str) -> str:
    """Write a note."""
    return "noted"


class Recorder(Observer):
    """Logs every callback; intervenes where a test asks it to."""

    def __init__(self, log: list[str], plan: dict[str, list[Intervention | None]]) -> None:
        self.log = log
        self.plan = plan

    def _next(self, name: str) -> Intervention | None:
        queue = self.plan.get(name)
        return queue.pop(0) if queue else None

    async def on_loop_start(self, ctx: LoopContext) -> None:
        self.log.append("obs start")

    async def on_model_attempt(self, ctx: LoopContext, attempt: int, error: Exception | None) -> None:
        self.log.append(f"obs attempt {attempt} {type(error).__name__ if error else ''}".rstrip())

    async def on_delta(self, ctx: LoopContext, event: Event) -> None:
        self.log.append(f"obs delta {getattr(event, 'text', '')}")

    async def on_response(self, ctx: LoopContext, message: Message) -> Intervention | None:
        self.log.append(f"obs response {message.content!r} calls={len(message.tool_calls)}")
        return self._next("response")

    async def on_tool_call(self, ctx: LoopContext, call: Any) -> Intervention | None:
        self.log.append(f"obs tool_call {call.name}")
        return self._next("tool_call")

    async def on_tool_result(self, ctx: LoopContext, call: Any, result: Any) -> Intervention | None:
        self.log.append(f"obs tool_result {call.name} {result.output!r}")
        return self._next("tool_result")

    async def on_turn_end(self, ctx: LoopContext, message: Message) -> Intervention | None:
        self.log.append(f"obs turn_end {message.content!r}")
        return self._next("turn_end")

    async def on_loop_end(self, ctx: LoopContext, outcome: str) -> None:
        self.log.append(f"obs end {outcome}")


def interleaved(script: list[dict[str, Any]], plan: dict[str, list[Intervention | None]]) -> list[str]:
    log: list[str] = []

    async def go() -> None:
        provider = scripted(script)
        session = await provider.open(tools=Toolset([add, note]), observers=[Recorder(log, plan)], session_id="s")
        async for event in session.send("go", max_steps=5):
            log.append(encode_event(event).decode())

    asyncio.run(go())
    return log


def test_tools_replacements_and_a_free_continue_interleave_as_pinned() -> None:
    script: list[dict[str, Any]] = [
        {
            "text": "two calls",
            "stream": True,
            "tool_calls": [
                {"name": "add", "arguments": {"a": 1}, "id": "c1"},
                {"name": "note", "arguments": {"text": "x"}, "id": "c2"},
                {"name": "add", "arguments": {"a": 5}, "id": "c3"},
            ],
        },
        {"text": "first"},
        {"text": "second", "usage": {"input_tokens": 1}},
    ]
    plan: dict[str, list[Intervention | None]] = {
        "response": [Intervention.replace("[two calls]"), None, None],
        "tool_call": [None, None, Intervention.replace(arguments={"a": 40})],
        "tool_result": [None, None, Intervention.replace("forty-two")],
        "turn_end": [Intervention.continue_free("sure?"), None],
    }
    assert interleaved(script, plan) == LOG0


def test_a_retry_then_a_stop_by_on_response() -> None:
    plan: dict[str, list[Intervention | None]] = {
        "response": [Intervention.retry(), Intervention.stop("enough", outcome="failed")]
    }
    assert interleaved([{"text": "bad"}, {"text": "good"}, {"text": "unused"}], plan) == LOG1


def test_a_failed_model_call_after_a_tool_call() -> None:
    assert (
        interleaved([{"text": "a", "tool_calls": [{"name": "add", "arguments": {"a": 1}}]}, {"error": {}}], {}) == LOG2
    )


def test_out_of_steps() -> None:
    assert interleaved([{"tool_calls": [{"name": "add", "arguments": {"a": 1}}]}] * 5, {}) == LOG3


def test_a_stopped_tool_call_and_a_retried_turn_end() -> None:
    plan: dict[str, list[Intervention | None]] = {
        "tool_call": [Intervention.stop("no")],
        "turn_end": [Intervention.retry()],
        "response": [None, None],
    }
    script: list[dict[str, Any]] = [
        {"text": "x", "tool_calls": [{"name": "add", "arguments": {"a": 1}}]},
        {"text": "y"},
    ]
    assert interleaved(script, plan) == LOG4


LOG0: list[str] = [
    '{"type":"session","session_id":"s","provider":"scripted","model":"scripted","provider_session_id":null}',
    "obs start",
    "obs attempt 1",
    "obs delta two ",
    '{"type":"text_delta","text":"two "}',
    "obs delta calls",
    '{"type":"text_delta","text":"calls"}',
    '{"type":"tool_call","call_id":"c1","name":"add","arguments":{"a":1},"source":"host"}',
    '{"type":"tool_call","call_id":"c2","name":"note","arguments":{"text":"x"},"source":"host"}',
    '{"type":"tool_call","call_id":"c3","name":"add","arguments":{"a":5},"source":"host"}',
    '{"type":"text","text":"two calls"}',
    "obs response 'two calls' calls=3",
    '{"type":"text","text":"[two calls]"}',
    "obs tool_call add",
    "obs tool_call note",
    "obs tool_call add",
    "obs tool_result add '3'",
    '{"type":"tool_result","call_id":"c1","output":"3","is_error":false,"name":"add"}',
    "obs tool_result note 'permission denied: note is a write tool and needs approval: pass --yes, answer on a terminal, or add a rule (seamline permissions add allow --tool note)'",
    '{"type":"permission_request","request_id":"perm-c2","call_id":"c2","tool":"note","arguments":{"text":"x"},"reason":"note is a write tool"}',
    '{"type":"permission_decision","request_id":"perm-c2","decision":"deny","scope":"once","reason":"note is a write tool and needs approval: pass --yes, answer on a terminal, or add a rule (seamline permissions add allow --tool note)","by":"rule"}',
    '{"type":"error","kind":"permission","message":"note is a write tool and needs approval: pass --yes, answer on a terminal, or add a rule (seamline permissions add allow --tool note)","retryable":false,"attempt":null}',
    '{"type":"tool_result","call_id":"c2","output":"permission denied: note is a write tool and needs approval: pass --yes, answer on a terminal, or add a rule (seamline permissions add allow --tool note)","is_error":true,"name":"note"}',
    "obs tool_result add '42'",
    '{"type":"tool_result","call_id":"c3","output":"forty-two","is_error":false,"name":"add"}',
    "obs attempt 2",
    '{"type":"text","text":"first"}',
    "obs response 'first' calls=0",
    "obs turn_end 'first'",
    "obs attempt 2",
    '{"type":"text","text":"second"}',
    '{"type":"usage","input_tokens":1,"output_tokens":0,"cache_read_tokens":0,"cache_write_tokens":0,"cost_usd":null,"priced":false,"model":"scripted","usage_id":"s-1-2"}',
    "obs response 'second' calls=0",
    "obs turn_end 'second'",
    "obs end completed",
    '{"type":"complete","outcome":"completed","stop_reason":"end_turn","text":"second"}',
]

LOG1: list[str] = [
    '{"type":"session","session_id":"s","provider":"scripted","model":"scripted","provider_session_id":null}',
    "obs start",
    "obs attempt 1",
    '{"type":"text","text":"bad"}',
    "obs response 'bad' calls=0",
    "obs attempt 2",
    '{"type":"text","text":"good"}',
    "obs response 'good' calls=0",
    "obs end failed",
    '{"type":"complete","outcome":"failed","stop_reason":"enough","text":"good"}',
]

LOG2: list[str] = [
    '{"type":"session","session_id":"s","provider":"scripted","model":"scripted","provider_session_id":null}',
    "obs start",
    "obs attempt 1",
    '{"type":"text","text":"a"}',
    '{"type":"tool_call","call_id":"call-1-1-0","name":"add","arguments":{"a":1},"source":"host"}',
    "obs response 'a' calls=1",
    "obs tool_call add",
    "obs tool_result add '3'",
    '{"type":"tool_result","call_id":"call-1-1-0","output":"3","is_error":false,"name":"add"}',
    "obs attempt 2",
    "obs response '' calls=0",
    "obs turn_end ''",
    "obs end completed",
    '{"type":"complete","outcome":"completed","stop_reason":"end_turn","text":""}',
]

LOG3: list[str] = [
    '{"type":"session","session_id":"s","provider":"scripted","model":"scripted","provider_session_id":null}',
    "obs start",
    "obs attempt 1",
    '{"type":"tool_call","call_id":"call-1-1-0","name":"add","arguments":{"a":1},"source":"host"}',
    "obs response '' calls=1",
    "obs tool_call add",
    "obs tool_result add '3'",
    '{"type":"tool_result","call_id":"call-1-1-0","output":"3","is_error":false,"name":"add"}',
    "obs attempt 2",
    '{"type":"tool_call","call_id":"call-1-2-0","name":"add","arguments":{"a":1},"source":"host"}',
    "obs response '' calls=1",
    "obs tool_call add",
    "obs tool_result add '3'",
    '{"type":"tool_result","call_id":"call-1-2-0","output":"3","is_error":false,"name":"add"}',
    "obs attempt 3",
    '{"type":"tool_call","call_id":"call-1-3-0","name":"add","arguments":{"a":1},"source":"host"}',
    "obs response '' calls=1",
    "obs tool_call add",
    "obs tool_result add '3'",
    '{"type":"tool_result","call_id":"call-1-3-0","output":"3","is_error":false,"name":"add"}',
    "obs attempt 4",
    '{"type":"tool_call","call_id":"call-1-4-0","name":"add","arguments":{"a":1},"source":"host"}',
    "obs response '' calls=1",
    "obs tool_call add",
    "obs tool_result add '3'",
    '{"type":"tool_result","call_id":"call-1-4-0","output":"3","is_error":false,"name":"add"}',
    "obs attempt 5",
    '{"type":"tool_call","call_id":"call-1-5-0","name":"add","arguments":{"a":1},"source":"host"}',
    "obs response '' calls=1",
    "obs tool_call add",
    "obs tool_result add '3'",
    '{"type":"tool_result","call_id":"call-1-5-0","output":"3","is_error":false,"name":"add"}',
    "obs end failed",
    '{"type":"complete","outcome":"failed","stop_reason":"max_turns","text":""}',
]

LOG4: list[str] = [
    '{"type":"session","session_id":"s","provider":"scripted","model":"scripted","provider_session_id":null}',
    "obs start",
    "obs attempt 1",
    '{"type":"text","text":"x"}',
    '{"type":"tool_call","call_id":"call-1-1-0","name":"add","arguments":{"a":1},"source":"host"}',
    "obs response 'x' calls=1",
    "obs tool_call add",
    "obs tool_result add 'stopped: no'",
    '{"type":"tool_result","call_id":"call-1-1-0","output":"stopped: no","is_error":true,"name":"add"}',
    "obs attempt 2",
    '{"type":"text","text":"y"}',
    "obs response 'y' calls=0",
    "obs turn_end 'y'",
    "obs attempt 3",
    "obs attempt 3 ProviderFailure",
    '{"type":"error","kind":"provider","message":"script exhausted after 2 responses","retryable":false,"attempt":null}',
    "obs end failed",
    '{"type":"complete","outcome":"failed","stop_reason":"provider","text":"y"}',
]
