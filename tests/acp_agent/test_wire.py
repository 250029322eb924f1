"""The agent's JSON-RPC end: bad input answered and survived, long lines dropped whole,
and a client that never reads stops the writer instead of growing memory."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from seamline.acp_agent.connection import AgentConnection
from seamline.acp_agent.stdio import pipe_streams
from seamline.transport.jsonrpc import JsonRpcError
from tests.acp_agent.support import WRITE_NOTE, agent_argv, agent_env, write_script
from tests.providers.agent_cli_support import run_async


class Sink:
    """A writer that keeps what was written (for in-process connections)."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        self.data += data

    async def drain(self) -> None:
        return None

    def messages(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.data.splitlines()]


async def echo(method: str, params: Any) -> Any:
    if method == "fail":
        raise JsonRpcError(-32602, "bad params", {"why": "asked to"})
    if method == "crash":
        raise RuntimeError("a bug")
    return {"method": method, "params": params}


async def ignore(method: str, params: Any) -> None:
    return None


async def serve(lines: bytes, *, max_line: int = 1 << 20) -> list[dict[str, Any]]:
    reader = asyncio.StreamReader()
    reader.feed_data(lines)
    reader.feed_eof()
    sink = Sink()
    conn = AgentConnection(reader, sink, on_request=echo, on_notification=ignore, max_line=max_line)  # type: ignore[arg-type]
    await conn.serve()
    await conn.wait_handlers()
    return sink.messages()


@run_async
async def test_bad_lines_are_answered_and_the_connection_goes_on() -> None:
    lines = b"\n".join(
        [
            b"not json",
            b"[1, 2]",
            b'{"jsonrpc": "1.0", "id": 7, "method": "x"}',
            b'{"jsonrpc": "2.0", "id": 8, "method": 5}',
            b'{"jsonrpc": "2.0", "id": 9, "method": "fail"}',
            b'{"jsonrpc": "2.0", "id": 10, "method": "crash"}',
            b'{"jsonrpc": "2.0", "id": 11, "result": "an answer nobody asked for"}',
            b'{"jsonrpc": "2.0", "method": "a notification"}',
            b'{"jsonrpc": "2.0", "id": 12, "method": "ok", "params": {"a": 1}}',
        ]
    )
    out = await serve(lines)
    errors = {(m.get("id"), m["error"]["code"]) for m in out if "error" in m}
    assert errors == {(None, -32700), (None, -32600), (7, -32600), (8, -32600), (9, -32602), (10, -32603)}
    assert next(m for m in out if m.get("id") == 9)["error"]["data"] == {"why": "asked to"}
    assert next(m for m in out if m.get("id") == 10)["error"]["message"] == "crash failed: RuntimeError: a bug"
    assert [m["result"] for m in out if m.get("id") == 12] == [{"method": "ok", "params": {"a": 1}}]
    assert len(out) == 7


@run_async
async def test_a_line_over_the_limit_is_dropped_whole_with_one_error() -> None:
    ok = b'{"jsonrpc": "2.0", "id": 1, "method": "ok"}'
    huge = b'{"jsonrpc": "2.0", "id": 2, "method": "ok", "params": "' + b"x" * 300_000 + b'"}'
    out = await serve(ok + b"\n" + huge + b"\n" + ok.replace(b'"id": 1', b'"id": 3') + b"\n", max_line=1000)
    assert [m.get("id") for m in out if "result" in m] == [1, 3]
    (error,) = [m for m in out if "error" in m]
    assert error["error"]["code"] == -32600 and "longer than 1000 bytes" in error["error"]["message"]


@run_async
async def test_a_line_that_is_not_utf8_is_a_parse_error_and_the_connection_goes_on() -> None:
    # msgspec raises UnicodeDecodeError, not DecodeError, for such bytes inside a string.
    bad = [b'"\x80"', b'{"jsonrpc": "2.0", "id": 4, "method": "ok", "params": "\xff"}', b'{"\xc3": 1}']
    out = await serve(b"\n".join([*bad, b'{"jsonrpc": "2.0", "id": 5, "method": "ok"}']) + b"\n")
    errors = [m["error"] for m in out if "error" in m]
    assert [e["code"] for e in errors] == [-32700, -32700, -32700]
    assert all("not UTF-8" in e["message"] for e in errors)
    assert [m["id"] for m in out if "result" in m] == [5]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=80).filter(lambda b: b"\n" not in b), max_size=8))
@example([b'"\x80"'])
def test_random_input_never_breaks_the_connection(lines: list[bytes]) -> None:
    probe = b'{"jsonrpc": "2.0", "id": "probe", "method": "ok"}'
    out = asyncio.run(serve(b"\n".join([*lines, probe]) + b"\n", max_line=64))
    assert all(m.get("jsonrpc") == "2.0" and ("result" in m or "error" in m) for m in out)
    assert [m for m in out if m.get("id") == "probe" and "result" in m]  # still answering after the noise


@run_async
async def test_a_client_that_never_reads_blocks_the_writer_with_bounded_memory() -> None:
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    reader_file, writer_file = os.fdopen(in_r, "rb", buffering=0), os.fdopen(out_w, "wb", buffering=0)
    reader, writer = await pipe_streams(reader_file, writer_file, limit=1 << 16)
    conn = AgentConnection(reader, writer, on_request=echo, on_notification=ignore)
    message = {"text": "x" * 1000}
    sent = 0
    blocked: asyncio.Task[None] | None = None
    try:
        for _ in range(10_000):  # 10 MB if nothing pushed back
            task = asyncio.ensure_future(conn.notify("session/update", message))
            done, _ = await asyncio.wait({task}, timeout=2.0)
            if not done:
                blocked = task
                break
            sent += 1
        assert blocked is not None, "the writer never waited for the client"
        buffered = writer.transport.get_write_buffer_size()
        assert buffered < 256 * 1024 and sent < 1000
        # The client reads at last: the blocked write goes through.
        drained = 0
        while not blocked.done():
            drained += len(await asyncio.to_thread(os.read, out_r, 1 << 16))
        assert blocked.exception() is None and drained > sent * 1000
    finally:
        writer.close()
        os.close(in_w)
        os.close(out_r)
        reader_file.close()


def test_closing_the_writer_closes_the_read_pipe_too() -> None:
    # A read pipe left open is finalized by whichever later gc.collect() reaches it, and its
    # "unclosed transport" ResourceWarning then fails an unrelated test.
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    reader_file, writer_file = os.fdopen(in_r, "rb", buffering=0), os.fdopen(out_w, "wb", buffering=0)

    async def go() -> bool:
        reader, writer = await pipe_streams(reader_file, writer_file, limit=1 << 16)
        writer.close()
        await asyncio.sleep(0)
        return reader.at_eof()

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            at_eof = asyncio.run(go())
            gc.collect()
    finally:
        os.close(in_w)
        os.close(out_r)
        reader_file.close()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
    assert at_eof


def test_the_cli_answers_garbage_and_unknown_methods_and_keeps_serving(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    argv = agent_argv(write_script(tmp_path, "note", WRITE_NOTE), tmp_path / "s.db")
    proc = subprocess.Popen(
        argv,
        env=agent_env(tmp_path),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        requests = [
            b"{oops",
            b'{"jsonrpc": "2.0", "id": 1, "method": "session/nope"}',
            b'{"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": "missing", "prompt": []}}',
            b'{"jsonrpc": "2.0", "id": 3, "method": "session/new", "params": {"cwd": "relative"}}',
            b'{"jsonrpc": "2.0", "id": 4, "method": "initialize", "params": {"protocolVersion": 1}}',
        ]
        out, err = proc.communicate(b"\n".join(requests) + b"\n", timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, err
    answers = {m.get("id"): m for m in map(json.loads, out.splitlines())}
    assert answers[None]["error"]["code"] == -32700
    assert answers[1]["error"]["code"] == -32601
    assert answers[2]["error"]["code"] == -32002
    assert answers[3]["error"]["code"] == -32602 and "absolute" in answers[3]["error"]["message"]
    assert answers[4]["result"]["protocolVersion"] == 1


def test_usage_mistakes_are_one_line_and_exit_2(tmp_path: Path) -> None:
    env = agent_env(tmp_path)
    for args, message in [
        (["--provider", "nope"], "unknown provider 'nope'"),
        (["-o", "bogus=1"], "unknown option(s) for provider offline: bogus"),
        (["--max-steps", "0"], "--max-steps must be at least 1"),
        (["--sandbox-policy", "p.toml"], "--sandbox-policy needs --sandbox"),
    ]:
        done = subprocess.run(
            [sys.executable, "-m", "seamline", "acp", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and done.stdout == "", (args, done.stderr)
        assert len(lines) == 1 and message in lines[0], (args, done.stderr)
