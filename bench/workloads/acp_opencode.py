"""ACP and OpenCode wire decoding: microseconds per streamed update, in process.

1. ACP: a ``session/update`` line (an ``agent_message_chunk`` as claude-agent-acp sends
   it) decoded by ``seamline.transport.jsonrpc.decode_message`` and translated by
   ``AcpTranslator`` into a ``text_delta``; plus one tool call's four updates.
2. OpenCode: ``message.part.delta`` events as ``opencode serve`` streams them, fed as SSE
   bytes (in 4 KiB chunks) through ``SseParser``, JSON-decoded, and translated by
   ``OpenCodeTranslator``.

Each pass checks its result (the number of deltas and the joined text). The target, as
for every delta in seamline, is about a microsecond of our own work; these include the
JSON decoding a real stream needs.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import msgspec

from seamline.events import TextDelta, ToolCall, ToolResult
from seamline.providers.acp.provider import AcpTranslator
from seamline.providers.opencode.provider import OpenCodeTranslator
from seamline.transport.jsonrpc import decode_message
from seamline.transport.sse import SseParser

SID = "b41c052e-e24f-4f76-bd2d-0f8172dfd735"


def _acp_lines(n: int) -> list[bytes]:
    lines = []
    for i in range(n):
        update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": f"w{i} "}}
        lines.append(
            json.dumps(
                {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": SID, "update": update}}
            ).encode()
        )
    tool = [
        {"sessionUpdate": "tool_call", "toolCallId": "t1", "rawInput": {}, "status": "pending", "kind": "execute", "_meta": {"claudeCode": {"toolName": "Bash"}}},
        {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "rawInput": {"command": "ls"}, "kind": "execute"},
        {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "in_progress"},
        {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed", "rawOutput": "a.txt"},
    ]  # fmt: skip
    for update in tool:
        lines.append(
            json.dumps(
                {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": SID, "update": update}}
            ).encode()
        )
    return lines


def _acp_pass(lines: list[bytes], n: int) -> None:
    translator = AcpTranslator()
    deltas = calls = results = 0
    for line in lines:
        message = decode_message(line)
        for event in translator.feed(message["params"]["update"]):
            if isinstance(event, TextDelta):
                deltas += 1
            elif isinstance(event, ToolCall):
                calls += 1
            elif isinstance(event, ToolResult):
                results += 1
    assert (deltas, calls, results) == (n, 1, 1), (deltas, calls, results)
    assert translator.text().startswith("w0 w1 ")


def _opencode_stream(n: int) -> bytes:
    frames = [
        {"type": "session.status", "properties": {"sessionID": "ses_1", "status": {"type": "busy"}}},
        {"type": "message.part.updated", "properties": {"sessionID": "ses_1", "part": {"id": "prt_1", "messageID": "msg_a", "sessionID": "ses_1", "type": "text", "text": ""}}},
    ]  # fmt: skip
    for i in range(n):
        frames.append({"type": "message.part.delta", "properties": {"sessionID": "ses_1", "messageID": "msg_a", "partID": "prt_1", "field": "text", "delta": f"w{i} "}})  # fmt: skip
    frames.append({"type": "session.idle", "properties": {"sessionID": "ses_1"}})
    return b"".join(b"data: " + json.dumps(f).encode() + b"\n\n" for f in frames)


def _opencode_pass(stream: bytes, n: int) -> None:
    parser = SseParser()
    translator = OpenCodeTranslator()
    decode = msgspec.json.decode
    deltas = 0
    for start in range(0, len(stream), 4096):
        for sse in parser.feed(stream[start : start + 4096]):
            for event in translator.feed(decode(sse.data)):
                deltas += isinstance(event, TextDelta)
    assert deltas == n and translator.done, (deltas, translator.done)
    assert translator.final_text().startswith("w0 w1 ")


def run(*, quick: bool = False) -> dict[str, Any]:
    n = 2_000 if quick else 20_000
    passes = 3 if quick else 10
    lines = _acp_lines(n)
    started = time.perf_counter()
    for _ in range(passes):
        _acp_pass(lines, n)
    acp_us = (time.perf_counter() - started) / (passes * len(lines)) * 1e6
    stream = _opencode_stream(n)
    started = time.perf_counter()
    for _ in range(passes):
        _opencode_pass(stream, n)
    oc_us = (time.perf_counter() - started) / (passes * (n + 3)) * 1e6
    return {
        "acp_us_per_update": round(acp_us, 2),
        "opencode_us_per_sse_event": round(oc_us, 2),
        "updates_per_pass": n,
    }


if __name__ == "__main__":
    print(run(quick="--quick" in sys.argv))
