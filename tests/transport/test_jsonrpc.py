"""JSON-RPC 2.0 over stdio: requests both ways, notifications, and each classified failure,
against a small scripted peer program. Every test checks that the process group is gone."""

from __future__ import annotations

import asyncio
import gc
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seamline.errors import InvalidRequest, ProviderFailure, TimeoutFailure, TransportFailure
from seamline.transport.jsonrpc import JsonRpcError, JsonRpcProcess, decode_message, encode_message
from seamline.transport.subprocess import group_members

PEER = r"""
import json, sys, time
def send(m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    m = json.loads(line)
    method = m.get("method")
    if method == "echo":
        send({"jsonrpc": "2.0", "method": "note", "params": {"saw": m["params"]}})
        send({"jsonrpc": "2.0", "id": m["id"], "result": m["params"]})
    elif method == "ask_back":
        send({"jsonrpc": "2.0", "id": "q1", "method": "client/question", "params": {"x": 2}})
        send({"jsonrpc": "2.0", "id": "q2", "method": "client/unknown", "params": {}})
        answers = [json.loads(sys.stdin.readline()), json.loads(sys.stdin.readline())]
        send({"jsonrpc": "2.0", "id": m["id"], "result": answers})
    elif method == "fail":
        send({"jsonrpc": "2.0", "id": m["id"], "error": {"code": -32001, "message": "no way", "data": {"why": 1}}})
    elif method == "garbage":
        sys.stdout.write("{not json\n"); sys.stdout.flush()
    elif method == "not_utf8":
        sys.stdout.buffer.write(b'{"jsonrpc": "2.0", "id": %d, "result": "\x80"}\n' % m["id"]); sys.stdout.flush()
    elif method == "not_rpc":
        send({"hello": "world"})
    elif method == "die":
        sys.stderr.write("peer dying\n"); sys.stderr.flush()
        sys.exit(4)
    elif method == "hang":
        pass
"""


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def start(tmp_path: Path, **handlers: Any) -> JsonRpcProcess:
    script = tmp_path / "peer.py"
    script.write_text(PEER)
    return await JsonRpcProcess.spawn([sys.executable, str(script)], **handlers)


def test_requests_notifications_and_requests_from_the_peer(tmp_path: Path) -> None:
    async def body() -> None:
        notes: list[tuple[str, Any]] = []
        seen: list[tuple[str, str]] = []

        async def on_request(method: str, params: Any) -> Any:
            if method == "client/question":
                return {"answer": params["x"] * 21}
            raise JsonRpcError(-32601, f"method not found: {method}")

        rpc = await start(
            tmp_path,
            on_request=on_request,
            on_notification=lambda m, p: notes.append((m, p)),
            observer=lambda d, m: seen.append((d, str(m.get("method") or m.get("id")))),
        )
        pgid = rpc.process.pgid
        assert await rpc.request("echo", {"k": "v"}, timeout=10) == {"k": "v"}
        assert notes == [("note", {"saw": {"k": "v"}})]
        answers = await rpc.request("ask_back", {}, timeout=10)
        assert answers[0] == {"jsonrpc": "2.0", "id": "q1", "result": {"answer": 42}}
        assert answers[1]["error"]["code"] == -32601
        with pytest.raises(JsonRpcError) as caught:
            await rpc.request("fail", {}, timeout=10)
        assert caught.value.code == -32001 and caught.value.data == {"why": 1} and caught.value.kind == "provider"
        assert ("out", "echo") in seen and ("in", "note") in seen
        await rpc.close(grace=0.5)
        assert group_members(pgid) == []

    run(body())


@pytest.mark.parametrize(
    ("method", "error", "text"),
    [
        ("garbage", ProviderFailure, "malformed JSON-RPC from the program: not JSON"),
        ("not_rpc", ProviderFailure, "not a JSON-RPC 2.0 message"),
        ("not_utf8", ProviderFailure, "malformed JSON-RPC from the program: not UTF-8"),
        ("die", TransportFailure, "exited with code 4"),
        ("hang", TimeoutFailure, "hang: no answer from python"),
    ],
)
def test_each_failure_is_classified(tmp_path: Path, method: str, error: type[Exception], text: str) -> None:
    async def body() -> None:
        rpc = await start(tmp_path)
        pgid = rpc.process.pgid
        with pytest.raises(error, match=text):
            await rpc.request(method, {}, timeout=0.5 if method == "hang" else 10)
        if method != "hang":
            assert not rpc.alive
            with pytest.raises(error):  # the connection stays failed, with the same reason
                await rpc.request("echo", {}, timeout=1)
        await rpc.close(grace=0.5)
        assert group_members(pgid) == []

    run(body())


def test_the_stderr_tail_names_why_the_peer_died(tmp_path: Path) -> None:
    async def body() -> None:
        rpc = await start(tmp_path)
        with pytest.raises(TransportFailure, match="peer dying"):
            await rpc.request("die", {}, timeout=10)
        await rpc.close(grace=0.5)

    run(body())


def test_an_agent_that_outlives_its_input_takes_sigint_even_when_this_process_ignores_it(sigint_ignored: None) -> None:
    # Ignored signals stay ignored across exec; closing must not wait out a grace period.
    async def body() -> str:
        rpc = await JsonRpcProcess.spawn([sys.executable, "-c", "import time; time.sleep(60)"])
        await rpc.close(grace=5)
        ended = rpc.process.ended_by
        assert ended is not None
        return ended.signal

    assert run(body()) == "SIGINT"


def test_a_missing_program_is_an_invalid_request() -> None:
    with pytest.raises(InvalidRequest, match="executable not found"):
        run(JsonRpcProcess.spawn(["/nonexistent/acp-agent"]))


def test_encode_then_decode_round_trips() -> None:
    message = {"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": {"text": "héllo\n"}}
    line = encode_message(message)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode_message(line.rstrip(b"\n")) == message


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode)))
def test_random_lines_decode_or_give_a_classified_failure(line: bytes) -> None:
    try:
        message = decode_message(line)
    except ProviderFailure as exc:
        assert "malformed JSON-RPC" in exc.message
    else:
        assert message["jsonrpc"] == "2.0"


def test_a_write_that_fails_after_the_output_was_malformed_reports_the_first_failure(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The program prints a line that is not JSON-RPC and exits; the request's write comes
    after (a loaded machine's order, made certain). The reason is the malformed line, not
    the broken pipe it left, and no failure is left unretrieved."""
    write = JsonRpcProcess._write

    async def late(rpc: JsonRpcProcess, message: Any) -> None:
        while rpc.failure is None or rpc.process.returncode is None:
            await asyncio.sleep(0.01)
        await write(rpc, message)

    monkeypatch.setattr(JsonRpcProcess, "_write", late)

    async def body() -> None:
        rpc = await JsonRpcProcess.spawn([sys.executable, "-c", "print(1)"])
        pgid = rpc.process.pgid
        with pytest.raises(ProviderFailure, match=r"malformed JSON-RPC from the program: not a JSON-RPC 2\.0 message"):
            await rpc.request("initialize", {}, timeout=30)
        await rpc.close(grace=0.5)
        assert group_members(pgid) == []

    with caplog.at_level("ERROR", logger="asyncio"):
        run(body())
        gc.collect()
    assert [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()] == []
