"""Codex, the real program, against the fake OpenAI Responses API on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from seamline.events import Error, FileChange, Raw, Reasoning, Session, ToolCall, ToolResult, Usage
from seamline.providers.agent_clis.codex import CodexProvider
from tests.fakes.openai_api import FakeOpenAI
from tests.providers.agent_cli_support import (
    ROOT,
    AgentOpenAI,
    CliWorld,
    abort_when,
    assert_group_gone,
    cli_path,
    collect,
    make_world,
    one_complete,
    run_async,
)

pytestmark = pytest.mark.real
MODEL = "gpt-5"


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliWorld:
    return make_world(tmp_path, monkeypatch)


def provider(base_url: str, **options: str) -> CodexProvider:
    # Codex's own sandbox needs helper links it refuses to create under /tmp (where the test
    # CODEX_HOME lives), so the tests run its commands unsandboxed.
    merged = {
        "executable": cli_path("codex"),
        "base_url": base_url,
        "max_retries": "0",
        "sandbox": "danger-full-access",
        **options,
    }
    return CodexProvider(model=MODEL, options=merged)


def inputs(fake: FakeOpenAI) -> list[str]:
    return [json.dumps(r.body.get("input")) for r in fake.model_requests()]


def test_seamline_run_json_end_to_end_with_tools_usage_and_cost(world: CliWorld) -> None:
    script = [
        {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "cat notes.txt"}}]},
        {"text": "The word is pelican.", "usage": {"input_tokens": 200, "output_tokens": 7, "cache_read_tokens": 50}},
    ]
    with FakeOpenAI(script) as fake:
        argv = [
            sys.executable, "-m", "seamline", "run", "--provider", "codex", "--model", MODEL, "--json",
            "-o", f"executable={cli_path('codex')}", "-o", f"base_url={fake.base_url}", "-o", "max_retries=0",
            "-o", "sandbox=danger-full-access", "--yes", "--workspace", str(world.workspace), "What is the secret word?",
        ]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
        seen = inputs(fake)
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "session" and kinds[-1] == "complete" and kinds.count("complete") == 1
    calls = [e for e in events if e["type"] == "tool_call"]
    results = [e for e in events if e["type"] == "tool_result"]
    assert [c["name"] for c in calls] == ["shell"] and "cat notes.txt" in calls[0]["arguments"]["command"]
    assert [r["call_id"] for r in results] == [calls[0]["call_id"]]
    assert "pelican" in results[0]["output"] and not results[0]["is_error"]
    usage = [e for e in events if e["type"] == "usage"]
    # Through seamline's gateway: one figure per model call, from the API's own answer.
    assert [(u["input_tokens"], u["cache_read_tokens"]) for u in usage] == [(10, 0), (200, 50)]
    assert all(u["priced"] is True and u["cost_usd"] > 0 for u in usage)
    assert events[-1]["outcome"] == "completed" and events[-1]["text"] == "The word is pelican."
    assert len(seen) == 2 and "pelican" in seen[1]


@run_async
async def test_resume_continues_the_thread(world: CliWorld) -> None:
    with FakeOpenAI([{"text": "First."}, {"text": "Second."}]) as fake:
        codex = provider(fake.base_url)
        session = await codex.open(workspace=world.workspace)
        first = await collect(session, "zeppelin-marker")
        assert one_complete(first).outcome == "completed"
        psid = session.provider_session_id
        assert psid is not None
        again = await codex.open_resumed(psid, workspace=world.workspace)
        second = await collect(again, "what did I say?")
        seen = inputs(fake)
    assert one_complete(second).text == "Second."
    assert again.provider_session_id == psid
    assert "zeppelin-marker" in seen[-1] and "First." in seen[-1]
    usage = [e for e in second if isinstance(e, Usage)]
    assert len(usage) == 1 and usage[0].input_tokens == 10  # this turn's figures, not the thread's
    transcript = codex.transcript_location(session)
    assert transcript is not None and transcript.is_file() and psid in transcript.name


@run_async
async def test_native_fork_gets_a_new_thread_with_the_history(world: CliWorld) -> None:
    with FakeOpenAI([{"text": "Parent."}, {"text": "Child."}]) as fake:
        codex = provider(fake.base_url)
        parent = await codex.open(workspace=world.workspace)
        await collect(parent, "parent-marker")
        child = await codex.open_forked(parent, workspace=world.workspace)
        events = await collect(child, "child-marker")
        seen = inputs(fake)
    assert one_complete(events).text == "Child."
    assert child.provider_session_id and child.provider_session_id != parent.provider_session_id
    assert "parent-marker" in seen[-1] and "child-marker" in seen[-1]
    usage = [e for e in events if isinstance(e, Usage)]
    assert len(usage) == 1 and usage[0].input_tokens == 10  # the fork's own turn only


@pytest.mark.parametrize(
    ("status", "kind"),
    [(401, "auth"), (429, "quota"), (500, "provider"), (529, "provider")],
)
@run_async
async def test_api_errors_are_classified(world: CliWorld, status: int, kind: str) -> None:
    with FakeOpenAI([{"status": status, "times": -1}]) as fake:
        codex = provider(fake.base_url)
        session = await codex.open(workspace=world.workspace)
        events = await collect(session, "hi")
    final = one_complete(events)
    errors = [e for e in events if isinstance(e, Error) and e.attempt is None]
    assert final.outcome == "failed" and final.stop_reason == kind
    assert errors and errors[-1].kind == kind
    await codex.close(session)  # a warm process lives as long as its session
    assert_group_gone(session)


@run_async
async def test_unreachable_endpoint_hits_our_retry_bound_as_transport(world: CliWorld) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # Calling its API itself, Codex reconnects for ever here, whatever its own retry
    # settings say (through the gateway it sees a reset instead: the test below).
    codex = provider(f"http://127.0.0.1:{port}/v1", max_retries="1", grace="1", gateway="off")
    session = await codex.open(workspace=world.workspace)
    events = await collect(session, "hi")
    final = one_complete(events)
    # Issue 14, item 13: the endpoint cannot be reached: transport, not timeout.
    assert final.outcome == "failed" and final.stop_reason == "transport"
    errors = [e for e in events if isinstance(e, Error)]
    assert errors[-1].kind == "transport" and errors[-1].retryable and "retried" in errors[-1].message
    assert [e.attempt for e in errors if e.attempt is not None][:2] == [1, 2]
    assert_group_gone(session)


@run_async
async def test_unreachable_endpoint_through_the_gateway_is_transport(world: CliWorld) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    codex = provider(f"http://127.0.0.1:{port}/v1", max_retries="1", grace="1")
    session = await codex.open(workspace=world.workspace)
    events = await collect(session, "hi")
    await codex.close(session)
    final = one_complete(events)
    assert final.outcome == "failed" and final.stop_reason == "transport"
    errors = [e for e in events if isinstance(e, Error)]
    assert errors[-1].kind == "transport" and errors[-1].retryable
    notes = [e.payload for e in events if isinstance(e, Raw) and "gateway_upstream_unreachable" in e.payload]
    assert notes and f"127.0.0.1:{port}" in str(notes[0])
    assert_group_gone(session)


@run_async
async def test_websocket_refused_falls_back_to_http_and_completes(world: CliWorld) -> None:
    # Issue 14, item 1: Codex's own numbered reconnects, then HTTP: the turn goes on.
    with FakeOpenAI([{"text": "Hello over HTTP.", "usage": {"input_tokens": 30, "output_tokens": 5}}]) as fake:
        fake.refuse_websocket = True
        codex = provider(fake.base_url, websockets="true", max_retries="3")
        session = await codex.open(workspace=world.workspace)
        events = await collect(session, "hi")
        upgrades = [r for r in fake.requests if r.headers.get("upgrade", "").lower() == "websocket"]
    final = one_complete(events)
    assert (final.outcome, final.text) == ("completed", "Hello over HTTP.")
    notices = [e for e in events if isinstance(e, Error)]
    assert notices and all(e.kind == "transport" and e.retryable and e.attempt for e in notices)
    assert [e.input_tokens for e in events if isinstance(e, Usage)] == [30]
    assert len(upgrades) >= 1
    await codex.close(session)  # a warm process lives as long as its session
    assert_group_gone(session)


@run_async
async def test_resume_of_an_unknown_thread_is_invalid_request(world: CliWorld) -> None:
    # Issue 14, item 3: Codex prints nothing on stdout and a stack backtrace after the cause.
    with FakeOpenAI([{"text": "never asked", "times": -1}]) as fake:
        codex = provider(fake.base_url)
        session = await codex.open_resumed("0b5e5e5e-dead-4bad-8bad-00000000beef", workspace=world.workspace)
        events = await collect(session, "hi")
        asked = len(fake.model_requests())
    final = one_complete(events)
    errors = [e for e in events if isinstance(e, Error)]
    assert final.outcome == "failed" and final.stop_reason == "invalid_request"
    assert len(errors) == 1 and "no rollout found" in errors[0].message and not errors[0].retryable
    assert asked == 0
    assert_group_gone(session)


@run_async
async def test_stream_cut_midway_is_classified(world: CliWorld) -> None:
    with FakeOpenAI([{"text": "cut answer that never ends", "cut_after": 3, "times": -1}]) as fake:
        codex = provider(fake.base_url)
        session = await codex.open(workspace=world.workspace)
        events = await collect(session, "hi")
    final = one_complete(events)
    errors = [e for e in events if isinstance(e, Error) and e.attempt is None]
    assert final.outcome == "failed"
    assert errors and errors[-1].kind in ("transport", "provider")
    await codex.close(session)  # a warm process lives as long as its session
    assert_group_gone(session)


@run_async
async def test_abort_mid_turn_ends_the_process_group(world: CliWorld) -> None:
    with FakeOpenAI([{"text": "slow", "delay": 30}]) as fake:
        # One process per turn (warm=false): abort ends it. Warm: tests/providers/test_codex_warm.py.
        codex = provider(fake.base_url, grace="1", warm="false")
        session = await codex.open(workspace=world.workspace)
        events = await abort_when(
            codex, session, "hi", lambda e: isinstance(e, Session) and bool(e.provider_session_id)
        )
    final = one_complete(events)
    assert final.outcome == "aborted"
    assert not [e for e in events if isinstance(e, Error)]
    assert_group_gone(session)


@run_async
async def test_apply_patch_reports_file_changes(world: CliWorld) -> None:
    patch = "*** Begin Patch\n*** Add File: made.txt\n+new\n*** End Patch\n"
    script = [{"custom_tool_calls": [{"name": "apply_patch", "input": patch}]}, {"text": "Patched."}]
    with AgentOpenAI(script) as fake:
        codex = CodexProvider(
            model="gpt-5.5",
            options={"executable": cli_path("codex"), "base_url": fake.base_url, "sandbox": "danger-full-access"},
        )
        session = await codex.open(workspace=world.workspace)
        events = await collect(session, "make a file")
    assert one_complete(events).outcome == "completed"
    assert (world.workspace / "made.txt").read_text() == "new\n"
    changes = [e for e in events if isinstance(e, FileChange)]
    calls = [e for e in events if isinstance(e, ToolCall)]
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [(Path(c.path).name, c.kind) for c in changes] == [("made.txt", "created")]
    assert changes[0].call_id == calls[0].call_id == results[0].call_id and not results[0].is_error


@run_async
async def test_reasoning_summary_becomes_reasoning(world: CliWorld) -> None:
    with FakeOpenAI([{"reasoning": "Think about greetings.", "text": "Hello."}]) as fake:
        codex = provider(fake.base_url)
        session = await codex.open(workspace=world.workspace)
        events = await collect(session, "hi")
    assert one_complete(events).text == "Hello."
    assert [e.text for e in events if isinstance(e, Reasoning)] == ["Think about greetings."]
