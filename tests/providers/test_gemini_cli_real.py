"""The Gemini CLI, the real program, against the fake Gemini API on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from seamline.errors import InvalidRequest
from seamline.events import Error, Session, Text, ToolCall, ToolResult, Usage
from seamline.providers.agent_clis.gemini_cli import GeminiCliProvider
from tests.fakes.gemini_api import FakeGemini
from tests.providers.agent_cli_support import (
    ROOT,
    CliWorld,
    abort_when,
    assert_group_gone,
    cli_path,
    collect,
    make_gemini_world,
    one_complete,
    run_async,
)

pytestmark = pytest.mark.real
MODEL = "gemini-2.5-flash"


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> CliWorld:
    return make_gemini_world(tmp_path, monkeypatch, request)


def provider(fake: FakeGemini, **options: str) -> GeminiCliProvider:
    merged = {"executable": cli_path("gemini"), "base_url": fake.root_url, "max_retries": "0", **options}
    return GeminiCliProvider(model=MODEL, options=merged)


def contents(fake: FakeGemini) -> list[str]:
    return [json.dumps(r.body.get("contents")) for r in fake.model_requests()]


def test_seamline_run_json_end_to_end_with_tools_usage_and_cost(world: CliWorld) -> None:
    script = [
        {"tool_calls": [{"name": "run_shell_command", "arguments": {"command": "cat notes.txt"}}]},
        {"tool_calls": [{"name": "read_file", "arguments": {"file_path": "notes.txt"}}]},
        {"text": "The word is pelican.", "usage": {"input_tokens": 200, "output_tokens": 7, "cache_read_tokens": 50}},
    ]
    with FakeGemini(script) as fake:
        argv = [
            sys.executable, "-m", "seamline", "run", "--provider", "gemini-cli", "--model", MODEL, "--json", "--yes",
            "-o", f"executable={cli_path('gemini')}", "-o", f"base_url={fake.root_url}", "-o", "max_retries=0",
            "--workspace", str(world.workspace), "What is the secret word?",
        ]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
        seen = contents(fake)
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "session" and kinds[-1] == "complete" and kinds.count("complete") == 1
    calls = [e for e in events if e["type"] == "tool_call"]
    results = [e for e in events if e["type"] == "tool_result"]
    assert [c["name"] for c in calls] == ["run_shell_command", "read_file"]
    assert [c["arguments"] for c in calls] == [{"command": "cat notes.txt"}, {"file_path": "notes.txt"}]
    assert [c["source"] for c in calls] == ["agent", "agent"]
    assert [r["call_id"] for r in results] == [c["call_id"] for c in calls]
    assert "pelican" in results[0]["output"] and not results[0]["is_error"]
    assert any(e["type"] == "file_change" and e["kind"] == "read" for e in events)
    usage = [e for e in events if e["type"] == "usage"]
    # The CLI sums the turn's three model calls (10 input tokens is the fake's default).
    # Through seamline's gateway: one figure per model call, from the API's own answer.
    assert sorted(u["input_tokens"] for u in usage) == [10, 10, 200]
    assert sum(u["cache_read_tokens"] for u in usage) == 50
    assert all(u["priced"] is True and u["cost_usd"] > 0 for u in usage)
    assert events[-1]["outcome"] == "completed" and events[-1]["text"] == "The word is pelican."
    assert len(seen) == 3 and "pelican" in seen[1]


@run_async
async def test_resume_continues_the_session(world: CliWorld) -> None:
    with FakeGemini([{"text": "First."}, {"text": "Second."}]) as fake:
        gemini = provider(fake)
        session = await gemini.open(workspace=world.workspace)
        first = await collect(session, "zeppelin-marker")
        assert one_complete(first).outcome == "completed"
        psid = session.provider_session_id
        assert psid is not None
        again = await gemini.open_resumed(psid, workspace=world.workspace)
        second = await collect(again, "what did I say?")
        seen = contents(fake)
    assert one_complete(second).text == "Second."
    assert again.provider_session_id == psid
    assert "zeppelin-marker" in seen[-1] and "First." in seen[-1]
    usage = [e for e in second if isinstance(e, Usage)]
    assert len(usage) == 1 and usage[0].input_tokens == 10  # this turn's figures
    transcript = gemini.transcript_location(session)
    assert transcript is not None and transcript.is_file() and "zeppelin-marker" in transcript.read_text()


@run_async
async def test_fork_is_refused_as_the_capability_says(world: CliWorld) -> None:
    assert GeminiCliProvider.capabilities().forking == "none"
    with FakeGemini([{"text": "Parent."}]) as fake:
        gemini = provider(fake)
        parent = await gemini.open(workspace=world.workspace)
        await collect(parent, "hi")
        with pytest.raises(InvalidRequest, match="cannot fork"):
            await gemini.open_forked(parent, workspace=world.workspace)


@pytest.mark.parametrize(
    ("status", "kind"),
    [(401, "auth"), (429, "quota"), (500, "provider"), (503, "provider"), (529, "provider")],
)
@run_async
async def test_api_errors_are_classified_despite_the_exit_code(world: CliWorld, status: int, kind: str) -> None:
    with FakeGemini([{"status": status, "times": -1}]) as fake:
        gemini = provider(fake)
        session = await gemini.open(workspace=world.workspace)
        events = await collect(session, "hi")
        asked = len(fake.model_requests())
    final = one_complete(events)
    errors = [e for e in events if isinstance(e, Error)]
    assert final.outcome == "failed" and final.stop_reason == kind
    assert errors and errors[-1].kind == kind and str(status) in errors[-1].message
    assert asked == 1  # max_retries=0 reached the CLI: no retry
    assert_group_gone(session)


@run_async
async def test_stream_cut_midway_is_an_error_though_the_exit_code_is_zero(world: CliWorld) -> None:
    with FakeGemini([{"text": "a cut answer that never ends", "cut_after": 2, "times": -1}]) as fake:
        gemini = provider(fake)
        session = await gemini.open(workspace=world.workspace)
        events = await collect(session, "hi")
    final = one_complete(events)
    errors = [e for e in events if isinstance(e, Error)]
    assert final.outcome == "failed", events
    assert errors and errors[-1].kind in ("transport", "provider")
    assert_group_gone(session)


@run_async
async def test_cut_stream_retried_then_given_up_is_transport(world: CliWorld) -> None:
    # Issue 14, item 2: an error line, then a result with status "error" and no error object.
    settings = {"security": {"auth": {"selectedType": "gemini-api-key"}}, "general": {"maxAttempts": 2}}
    (world.home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    script = [{"text": "a cut answer that never ends", "cut_after": 2, "cut": "clean", "times": -1}]
    with FakeGemini(script) as fake:
        gemini = provider(fake, max_retries="2")
        session = await gemini.open(workspace=world.workspace)
        events = await collect(session, "hi")
    final = one_complete(events)
    errors = [e for e in events if isinstance(e, Error) and e.attempt is None]
    assert (final.outcome, final.stop_reason) == ("failed", "transport"), events
    assert [(e.kind, e.retryable) for e in errors] == [("transport", True)]
    assert_group_gone(session)


@run_async
async def test_mcp_tool_call_is_labelled_mcp(world: CliWorld) -> None:
    # Issue 14, item 12: the reference MCP server's echo, as the CLI offers it to the model.
    server = ROOT / ".tools" / "mcp-servers" / "node_modules" / "@modelcontextprotocol" / "server-everything"
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {"maxAttempts": 1},
        "mcpServers": {"everything": {"command": "node", "args": [str(server / "dist" / "index.js"), "stdio"]}},
    }
    (world.home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    script = [
        {"tool_calls": [{"name": "mcp_everything_echo", "arguments": {"message": "hi-mcp"}}]},
        {"text": "Echoed."},
    ]
    with FakeGemini(script) as fake:
        gemini = provider(fake)
        session = await gemini.open(workspace=world.workspace)
        events = await collect(session, "echo it")
    calls = [e for e in events if isinstance(e, ToolCall)]
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [(c.name, c.arguments, c.source) for c in calls] == [("mcp_everything_echo", {"message": "hi-mcp"}, "mcp")]
    assert [(r.output, r.is_error) for r in results] == [("Echo: hi-mcp", False)]
    assert one_complete(events).text == "Echoed."
    assert_group_gone(session)


@run_async
async def test_resume_of_an_unknown_session_is_invalid_request(world: CliWorld) -> None:
    # Issue 14, item 3: exit 42 and an error line before a hint, on stderr only.
    with FakeGemini([{"text": "First."}, {"text": "never asked", "times": -1}]) as fake:
        gemini = provider(fake)
        first = await gemini.open(workspace=world.workspace)
        assert one_complete(await collect(first, "hi")).outcome == "completed"
        session = await gemini.open_resumed("0b5e5e5e-dead-4bad-8bad-00000000beef", workspace=world.workspace)
        events = await collect(session, "again")
        asked = len(fake.model_requests())
    final = one_complete(events)
    errors = [e for e in events if isinstance(e, Error)]
    assert final.outcome == "failed" and [(e.kind, e.retryable) for e in errors] == [("invalid_request", False)]
    assert "Invalid session identifier" in errors[0].message and asked == 1
    assert_group_gone(session)


@run_async
async def test_unreachable_endpoint_retries_seen_on_stderr_end_as_transport(world: CliWorld) -> None:
    # Issue 14, item 13: the CLI's retries show only on stderr; our bound ends the turn, not the timeout.
    settings = {"security": {"auth": {"selectedType": "gemini-api-key"}}, "general": {"maxAttempts": 10}}
    (world.home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    gemini = GeminiCliProvider(
        model=MODEL,
        options={
            "executable": cli_path("gemini"),
            "base_url": f"http://127.0.0.1:{port}",
            "max_retries": "1",
            "turn_timeout": "120",
            "grace": "1",
        },
    )
    session = await gemini.open(workspace=world.workspace)
    events = await collect(session, "hi")
    final = one_complete(events)
    errors = [e for e in events if isinstance(e, Error)]
    assert (final.outcome, final.stop_reason) == ("failed", "transport")
    assert [e.attempt for e in errors if e.attempt is not None][:2] == [1, 2]
    assert errors[-1].attempt is None and "retried" in errors[-1].message
    assert_group_gone(session)


@run_async
async def test_abort_mid_turn_ends_the_relaunched_process_group(world: CliWorld) -> None:
    # The CLI relaunches itself as a child and ignores signals to its own PID: the group must go.
    with FakeGemini([{"text": "slow", "delay": 30}]) as fake:
        gemini = provider(fake, grace="1")
        session = await gemini.open(workspace=world.workspace)
        events = await abort_when(
            gemini, session, "hi", lambda e: isinstance(e, Session) and bool(e.provider_session_id)
        )
    final = one_complete(events)
    assert final.outcome == "aborted"
    assert not [e for e in events if isinstance(e, Text)]
    assert_group_gone(session)


@run_async
async def test_turn_timeout_is_classified_and_ends_the_group(world: CliWorld) -> None:
    with FakeGemini([{"text": "late", "delay": 30}]) as fake:
        gemini = provider(fake, turn_timeout="6", grace="1")
        session = await gemini.open(workspace=world.workspace)
        events = await collect(session, "hi")
    final = one_complete(events)
    assert final.outcome == "failed" and final.stop_reason == "timeout"
    assert [e.kind for e in events if isinstance(e, Error)] == ["timeout"]
    assert_group_gone(session)
