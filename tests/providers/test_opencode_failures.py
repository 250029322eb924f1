"""The ``opencode`` provider's classified failures, against scripted stand-ins for
``opencode serve``, and its event translator on payloads shaped as the real server sends
them (see ``test_opencode_real.py`` and the server's OpenAPI document at ``/doc``).

The stand-in takes the same command line (``serve --port N --hostname 127.0.0.1``) and
misbehaves as ``MODE`` says: never come up, exit at once, or break its event stream in
the middle of a turn.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from seamline.errors import TimeoutFailure, TransportFailure
from seamline.events import Complete, Error, Text, TextDelta, ToolCall, ToolResult, Usage
from seamline.providers.opencode.provider import OpenCodeProvider, OpenCodeTranslator, opencode_config
from seamline.providers.opencode.server import running_servers
from seamline.tools.approval import YesApproval
from seamline.transport.subprocess import group_members
from tests.providers.agent_cli_support import run_async

SERVER = r"""#!PYTHON
import json, os, sys, time, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
MODE = os.environ.get("MODE", "ok")
if MODE == "exit":
    sys.stderr.write("opencode: cannot open its database\n"); sys.exit(3)
if MODE == "exit_child_says":
    # As a launcher whose child prints the reason: the leader's exit is seen before the line.
    if os.fork() == 0:
        time.sleep(0.5); sys.stderr.write("opencode: port already bound by the child\n"); os._exit(0)
    os._exit(3)
port = int(sys.argv[sys.argv.index("--port") + 1])
if MODE == "never_up":
    time.sleep(120); sys.exit(0)
prompted = threading.Event()
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def reply(self, code, body):
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(code)
        self.send_header("content-type", "application/json"); self.send_header("content-length", str(len(data)))
        self.end_headers(); self.wfile.write(data)
    def do_GET(self):
        if self.path.startswith("/global/health"):
            return self.reply(200, {"healthy": True, "version": "0.0.0-standin"})
        if self.path.startswith("/event"):
            self.send_response(200); self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked"); self.end_headers()
            def chunk(text):
                data = text.encode(); self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data)); self.wfile.flush()
            chunk('data: {"type":"server.connected","properties":{}}\n\n')
            prompted.wait(30)
            if MODE == "stall":
                time.sleep(60); return
            chunk('data: {"type":"session.status","properties":{"sessionID":"ses_1","status":{"type":"busy"}}}\n\n')
            chunk('data: {"type":"message.part.delta","properties":{"sessionID":"ses_1","messageID":"msg_a",'
                  '"partID":"prt_1","field":"text","delta":"half"}}\n\n')
            chunk('data: {"type":"message.part.delta","prop')  # cut in the middle of an event
            self.wfile.flush()
            self.connection.shutdown(2)  # and the connection drops
            return
        self.reply(404, {"error": "no"})
    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        if self.path.startswith("/session?") or self.path == "/session":
            return self.reply(200, {"id": "ses_1"})
        if "/abort" in self.path:
            with open(os.environ["ABORT_LOG"], "a") as log:
                log.write(self.path + "\n")
        if "/prompt_async" in self.path:
            self.send_response(204); self.send_header("content-length", "0"); self.end_headers()
            prompted.set(); return
        self.reply(200, True)
ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
"""


@pytest.fixture
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    path = tmp_path / "opencode"
    path.write_text(SERVER.replace("PYTHON", sys.executable, 1))
    path.chmod(0o755)
    monkeypatch.delenv("SEAMLINE_BLOCK_REAL_PROVIDERS", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("ABORT_LOG", str(tmp_path / "abort.log"))
    (tmp_path / "ws").mkdir()
    return str(path)


def provider(exe: str, **options: str) -> OpenCodeProvider:
    return OpenCodeProvider(options={"executable": exe, "grace": "0.5", **options})


@run_async
async def test_a_server_that_never_comes_up_times_out_and_is_ended(
    standin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODE", "never_up")
    with pytest.raises(TimeoutFailure, match=r"did not come up .* within 1 s"):
        await provider(standin, startup_timeout="1").open(workspace=tmp_path / "ws")
    assert running_servers() == []
    assert not _standins_alive(standin)


@run_async
async def test_a_server_that_exits_at_start_is_a_transport_failure(
    standin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODE", "exit")
    with pytest.raises(TransportFailure, match=r"exited with code 3 before it came up.*cannot open its database"):
        await provider(standin, startup_timeout="10").open(workspace=tmp_path / "ws")
    assert running_servers() == []


@run_async
async def test_the_reason_is_kept_when_it_arrives_after_the_exit(
    standin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The exit code is known before the stderr line is read: the failure waits for stderr's end.
    monkeypatch.setenv("MODE", "exit_child_says")
    with pytest.raises(TransportFailure, match=r"exited with code 3 before it came up.*port already bound"):
        await provider(standin, startup_timeout="10").open(workspace=tmp_path / "ws")
    assert running_servers() == []
    assert not _standins_alive(standin)


@run_async
async def test_an_event_stream_that_breaks_mid_turn_is_a_transport_failure(
    standin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODE", "break")
    p = provider(standin, turn_timeout="20")
    session = await p.open(workspace=tmp_path / "ws", approval=YesApproval())
    pgid = session.state["opencode_server"].process.pgid
    events = [e async for e in session.send("hello")]
    await p.close(session)
    assert TextDelta(text="half") in events  # what came before the break is kept
    error = next(e for e in events if isinstance(e, Error))
    assert error.kind == "transport" and "event stream" in error.message
    assert isinstance(events[-1], Complete) and events[-1].outcome == "failed"
    assert group_members(pgid) == []
    assert running_servers() == []


@run_async
async def test_a_turn_that_never_settles_times_out_and_is_aborted_on_the_server(
    standin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODE", "stall")
    p = provider(standin, turn_timeout="1")
    session = await p.open(workspace=tmp_path / "ws", approval=YesApproval())
    events = [e async for e in session.send("hello")]
    await p.close(session)
    error = next(e for e in events if isinstance(e, Error))
    assert error.kind == "timeout" and "timeout of 1 s" in error.message
    assert isinstance(events[-1], Complete) and events[-1].outcome == "failed"
    assert (tmp_path / "abort.log").read_text().startswith("/session/ses_1/abort")
    assert running_servers() == []


def _standins_alive(exe: str) -> bool:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if exe.encode() in (entry / "cmdline").read_bytes():
                    return True
            except OSError:
                continue
    return False


def test_missing_executable_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr("seamline.providers.programs.lookup._places", list)  # not the project's .tools either
    checks = asyncio.run(OpenCodeProvider().preflight())
    assert not checks[0].ok and checks[0].fix is not None and "opencode-ai@1.18.33" in checks[0].fix


def test_config_points_an_openai_compatible_provider_at_the_base_url_without_the_key() -> None:
    config = opencode_config(base_url="http://127.0.0.1:9/v1", model="m1", api_key_env="MY_KEY")
    provider = config["provider"]["seamline"]
    assert provider["npm"] == "@ai-sdk/openai-compatible" and provider["options"]["baseURL"] == "http://127.0.0.1:9/v1"
    assert provider["options"]["apiKey"] == "{env:MY_KEY}" and config["model"] == "seamline/m1"


def test_capabilities_are_declared() -> None:
    caps = OpenCodeProvider.capabilities()
    assert (caps.forking, caps.session_ids, caps.resume, caps.cost_source, caps.cost_scope) == (
        "native",
        "provider",
        "native",
        "reported",
        "step",
    )


def ev(kind: str, **props: Any) -> dict[str, Any]:
    return {"type": kind, "properties": {"sessionID": "ses_1", **props}}


def test_translator_skips_the_users_part_and_settles_tools_and_usage() -> None:
    t = OpenCodeTranslator()
    out: list[Any] = []
    for event in [
        ev("message.updated", info={"id": "msg_u", "role": "user"}),
        ev("message.part.updated", part={"id": "p0", "messageID": "msg_u", "type": "text", "text": "my prompt"}),
        ev("session.status", status={"type": "busy"}),
        ev("message.part.updated", part={"id": "p1", "messageID": "msg_a", "type": "tool", "callID": "c1",
                                         "tool": "bash", "state": {"status": "pending", "input": {}}}),
        ev("message.part.updated", part={"id": "p1", "messageID": "msg_a", "type": "tool", "callID": "c1",
                                         "tool": "bash", "state": {"status": "running", "input": {"command": "ls"}}}),
        ev("message.part.updated", part={"id": "p1", "messageID": "msg_a", "type": "tool", "callID": "c1",
                                         "tool": "bash", "state": {"status": "error", "input": {"command": "ls"},
                                                                   "error": "denied"}}),
        ev("message.part.updated", part={"id": "p2", "messageID": "msg_a", "type": "text", "text": ""}),
        ev("message.part.delta", messageID="msg_a", partID="p2", field="text", delta="Hel"),
        ev("message.part.updated", part={"id": "p2", "messageID": "msg_a", "type": "text", "text": "Hello",
                                         "time": {"start": 1, "end": 2}}),
        ev("message.part.updated", part={"id": "p3", "messageID": "msg_a", "type": "step-finish", "reason": "stop",
                                         "tokens": {"input": 7, "output": 2, "reasoning": 1,
                                                    "cache": {"read": 3, "write": 0}}, "cost": 0}),
        ev("session.idle"),
    ]:  # fmt: skip
        out.extend(t.feed(event))
    assert t.done
    assert out == [
        ToolCall(call_id="c1", name="bash", arguments={"command": "ls"}, source="opencode"),
        ToolResult(call_id="c1", output="denied", is_error=True, name="bash"),
        TextDelta(text="Hel"),
        TextDelta(text="lo"),
        Text(text="Hello"),
        Usage(
            input_tokens=10, output_tokens=3, cache_read_tokens=3, cost_usd=None, priced=False, usage_id="opencode:p3"
        ),
    ]
    assert t.final_text() == "Hello" and t.stop_reason == "stop"


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        ({"name": "ProviderAuthError", "data": {"providerID": "x", "message": "bad key"}}, "auth"),
        ({"name": "APIError", "data": {"message": "slow down", "statusCode": 429, "isRetryable": True}}, "quota"),
        ({"name": "APIError", "data": {"message": "boom", "statusCode": 500, "isRetryable": False}}, "provider"),
        ({"name": "UnknownError", "data": {"message": "?"}}, "provider"),
    ],
)
def test_session_errors_are_classified(error: dict[str, Any], kind: str) -> None:
    t = OpenCodeTranslator()
    with pytest.raises(Exception) as caught:
        t.feed(ev("session.error", error=error))
    assert getattr(caught.value, "kind", None) == kind


def test_an_aborted_message_is_an_outcome_and_retries_are_bounded() -> None:
    t = OpenCodeTranslator(max_retries=1)
    assert t.feed(ev("session.error", error={"name": "MessageAbortedError", "data": {"message": "aborted"}})) == []
    assert t.aborted
    t.feed(ev("session.status", status={"type": "retry", "attempt": 1, "message": "500", "next": 1}))
    with pytest.raises(Exception, match="retried 2 times"):
        t.feed(ev("session.status", status={"type": "retry", "attempt": 2, "message": "500", "next": 1}))
    assert t.retries_exceeded
