"""Claude Code, the real program, against the fake Anthropic API on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from seamline.events import (
    Complete,
    Error,
    FileChange,
    PermissionDecision,
    Reasoning,
    ReasoningDelta,
    Session,
    Text,
    ToolCall,
    ToolResult,
    Usage,
)
from seamline.providers.agent_clis.claude_code import ClaudeCodeProvider
from seamline.sessions.sqlite_store import SQLiteStore
from tests.providers.agent_cli_support import (
    ROOT,
    AgentAnthropic,
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
MODEL = "claude-sonnet-4-5"


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliWorld:
    return make_world(tmp_path, monkeypatch)


def provider(fake: AgentAnthropic, **options: str) -> ClaudeCodeProvider:
    merged = {"executable": cli_path("claude"), "base_url": fake.root_url, "max_retries": "0", **options}
    return ClaudeCodeProvider(model=MODEL, options=merged)


def tool_script(workspace: Path) -> list[dict[str, object]]:
    return [
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "echo hello-from-bash"}}]},
        {"tool_calls": [{"name": "Read", "arguments": {"file_path": str(workspace / "notes.txt")}}]},
        {"text": "The word is pelican.", "usage": {"input_tokens": 200, "output_tokens": 7, "cache_read_tokens": 50}},
    ]


def test_seamline_run_json_end_to_end_with_tools_usage_and_cost(world: CliWorld) -> None:
    with AgentAnthropic(tool_script(world.workspace), fallback={"text": "side"}) as fake:
        argv = [
            sys.executable, "-m", "seamline", "run", "--provider", "claude-code", "--model", MODEL, "--json", "--yes",
            "-o", f"executable={cli_path('claude')}", "-o", f"base_url={fake.root_url}", "-o", "max_retries=0",
            "--workspace", str(world.workspace), "What is the secret word?",
        ]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
        seen = fake.turn_requests()
        answered = len(fake.model_requests())
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "session" and kinds[-1] == "complete" and kinds.count("complete") == 1
    calls = {e["call_id"]: e for e in events if e["type"] == "tool_call"}
    results = {e["call_id"]: e for e in events if e["type"] == "tool_result"}
    assert [c["name"] for c in calls.values()] == ["Bash", "Read"]
    assert [c["arguments"] for c in calls.values()] == [
        {"command": "echo hello-from-bash"},
        {"file_path": str(world.workspace / "notes.txt")},
    ]
    assert set(calls) == set(results)
    bash = next(r for r in results.values() if r["name"] == "Bash")
    assert bash["output"] == "hello-from-bash" and not bash["is_error"]
    read = next(r for r in results.values() if r["name"] == "Read")
    assert "pelican" in read["output"]
    assert any(e["type"] == "file_change" and e["kind"] == "read" for e in events)
    # Through seamline's gateway: one figure per model request, from the API's own answer.
    usage = [e for e in events if e["type"] == "usage"]
    assert len(usage) == answered and all(u["priced"] is True and u["cost_usd"] > 0 for u in usage)
    assert sum(u["cache_read_tokens"] for u in usage) == 50
    assert events[-1]["outcome"] == "completed" and events[-1]["text"] == "The word is pelican."
    psid = next(e["provider_session_id"] for e in events if e["type"] == "session" and e["provider_session_id"])
    assert len(seen) == 3 and psid


@run_async
async def test_resume_continues_the_conversation(world: CliWorld, tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "store.db")
    with AgentAnthropic([{"text": "First answer."}, {"text": "Second answer."}], fallback={"text": "side"}) as fake:
        claude = provider(fake)
        session = await claude.open(workspace=world.workspace, store=store)
        first = await collect(session, "Remember the word zeppelin.")
        assert one_complete(first).outcome == "completed"
        psid = session.provider_session_id
        assert psid is not None
        # A new seamline session (another process, say) resumes the CLI's own session.
        again = await claude.open_resumed(psid, workspace=world.workspace, store=store)
        second = await collect(again, "What word did I ask you to remember?")
        requests = fake.turn_requests()
    assert one_complete(second).text == "Second answer."
    assert again.provider_session_id == psid
    usage = [e for e in second if isinstance(e, Usage)]
    assert len(usage) == 1 and usage[0].input_tokens == 10  # the turn's own figures, not the session's
    last = json.dumps(requests[-1].body["messages"])
    assert "zeppelin" in last and "First answer." in last
    assert store.get(again.session_id) is not None
    assert claude.transcript_location(session) == claude.transcript_location(again)
    transcript = claude.transcript_location(session)
    assert transcript is not None and transcript.is_file() and "zeppelin" in transcript.read_text()
    store.close()


@run_async
async def test_same_session_second_turn_resumes(world: CliWorld) -> None:
    with AgentAnthropic([{"text": "One."}, {"text": "Two."}], fallback={"text": "side"}) as fake:
        claude = provider(fake)
        session = await claude.open(workspace=world.workspace)
        await collect(session, "alpha-marker")
        second = await collect(session, "beta-marker")
        requests = fake.turn_requests()
    assert one_complete(second).outcome == "completed"
    sessions = [e for e in second if isinstance(e, Session)]
    assert all(s.provider_session_id == session.provider_session_id for s in sessions)
    assert "alpha-marker" in json.dumps(requests[-1].body["messages"])


@run_async
async def test_native_fork_copies_history_under_a_new_id(world: CliWorld) -> None:
    with AgentAnthropic([{"text": "Parent."}, {"text": "Child."}], fallback={"text": "side"}) as fake:
        claude = provider(fake)
        parent = await claude.open(workspace=world.workspace)
        await collect(parent, "parent-marker")
        child = await claude.open_forked(parent, workspace=world.workspace)
        events = await collect(child, "child-marker")
        requests = fake.turn_requests()
    assert one_complete(events).text == "Child."
    assert child.provider_session_id and child.provider_session_id != parent.provider_session_id
    assert child.parent_id == parent.session_id
    history = json.dumps(requests[-1].body["messages"])
    assert "parent-marker" in history and "child-marker" in history


@pytest.mark.parametrize(
    ("status", "kind", "retryable"),
    [(401, "auth", False), (429, "quota", True), (500, "provider", True), (529, "provider", True)],
)
@run_async
async def test_api_errors_are_classified(world: CliWorld, status: int, kind: str, retryable: bool) -> None:
    with AgentAnthropic([{"status": status, "times": -1}], fallback={"text": "side"}) as fake:
        claude = provider(fake)
        session = await claude.open(workspace=world.workspace)
        events = await collect(session, "hi")
    final = one_complete(events)
    errors = [e for e in events if isinstance(e, Error)]
    assert final.outcome == "failed" and final.stop_reason == kind
    assert errors and errors[-1].kind == kind and errors[-1].retryable is retryable
    assert str(status) in errors[-1].message
    assert not [e for e in events if isinstance(e, Text)]  # the synthetic "API Error" text is no answer
    await claude.close(session)  # a warm process outlives its turn
    assert_group_gone(session)


@run_async
async def test_resume_of_an_unknown_session_is_invalid_request(world: CliWorld) -> None:
    with AgentAnthropic([{"text": "never asked", "times": -1}], fallback={"text": "side"}) as fake:
        claude = provider(fake)
        session = await claude.open_resumed("0b5e5e5e-dead-4bad-8bad-00000000beef", workspace=world.workspace)
        events = await collect(session, "hi")
        asked = len(fake.turn_requests())
    final = one_complete(events)
    errors = [e for e in events if isinstance(e, Error)]
    assert final.outcome == "failed" and [(e.kind, e.retryable) for e in errors] == [("invalid_request", False)]
    assert "No conversation found" in errors[0].message and asked == 0
    assert_group_gone(session)


@run_async
async def test_a_failed_resume_ends_the_warm_process_even_while_it_is_still_exiting(world: CliWorld) -> None:
    # The real Claude Code behind a wrapper that lingers after it exited: the error result is
    # printed, the process is not gone yet. A process that holds no conversation is no warm
    # process to keep (kept, it is left running after the failed turn).
    wrapper = world.home / "slow-exit-claude"
    wrapper.write_text(f'#!/bin/sh\n"{cli_path("claude")}" "$@"\ncode=$?\nsleep 5\nexit $code\n')
    wrapper.chmod(0o755)
    with AgentAnthropic([{"text": "never asked", "times": -1}], fallback={"text": "side"}) as fake:
        claude = provider(fake, executable=str(wrapper), grace="1")
        session = await claude.open_resumed("0b5e5e5e-dead-4bad-8bad-00000000beef", workspace=world.workspace)
        events = await collect(session, "hi")
    final = one_complete(events)
    assert final.outcome == "failed" and final.stop_reason == "invalid_request"
    assert_group_gone(session)


@run_async
async def test_denied_tool_is_a_permission_decision_by_the_agent(world: CliWorld) -> None:
    # Issue 14, item 11: Write has no allow rule here; Claude Code refuses it itself.
    target = world.workspace / "made.txt"
    script = [
        {"tool_calls": [{"name": "Write", "arguments": {"file_path": str(target), "content": "new\n"}}]},
        {"text": "I could not write it."},
    ]
    with AgentAnthropic(script, fallback={"text": "side"}) as fake:
        claude = provider(fake, allowed_tools="Bash")
        session = await claude.open(workspace=world.workspace)
        events = await collect(session, "write it")
    calls = [e for e in events if isinstance(e, ToolCall)]
    decisions = [e for e in events if isinstance(e, PermissionDecision)]
    assert [(c.name, c.arguments["file_path"]) for c in calls] == [("Write", str(target))]
    assert [(d.request_id, d.decision) for d in decisions] == [(f"perm-{calls[0].call_id}", "deny")]
    assert one_complete(events).outcome == "completed" and not target.exists()
    await claude.close(session)  # a warm process outlives its turn
    assert_group_gone(session)


@run_async
async def test_unreachable_endpoint_is_transport(world: CliWorld) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    claude = ClaudeCodeProvider(
        model=MODEL,
        options={"executable": cli_path("claude"), "base_url": f"http://127.0.0.1:{port}", "max_retries": "1"},
    )
    session = await claude.open(workspace=world.workspace)
    events = await collect(session, "hi")
    final = one_complete(events)
    assert final.outcome == "failed" and final.stop_reason == "transport"
    errors = [e for e in events if isinstance(e, Error)]
    assert all(e.kind == "transport" and e.retryable for e in errors)
    await claude.close(session)  # a warm process outlives its turn
    assert_group_gone(session)


@run_async
async def test_max_retries_bounds_the_cli_own_retries(world: CliWorld) -> None:
    with AgentAnthropic([{"status": 529, "times": -1}], fallback={"text": "side"}) as fake:
        claude = provider(fake, max_retries="1")
        session = await claude.open(workspace=world.workspace)
        events = await collect(session, "hi")
        asked = len(fake.turn_requests())
    final = one_complete(events)
    assert final.outcome == "failed" and final.stop_reason == "provider"
    retries = [e for e in events if isinstance(e, Error) and e.attempt is not None]
    assert [e.attempt for e in retries] == [1] and retries[0].retryable
    assert asked == 2  # the first call and one retry, as bounded
    await claude.close(session)  # a warm process outlives its turn
    assert_group_gone(session)


@run_async
async def test_stream_cut_midway_is_retried_without_streaming(world: CliWorld) -> None:
    # Claude Code answers a cut stream by asking again without ``stream``; the fake answers whole.
    script = [{"text": "cut answer that never ends", "cut_after": 3, "times": -1}]
    with AgentAnthropic(script, fallback={"text": "side"}) as fake:
        claude = provider(fake)
        session = await claude.open(workspace=world.workspace)
        events = await collect(session, "hi")
        streamed = [bool(r.body.get("stream")) for r in fake.turn_requests()]
    final = one_complete(events)
    assert streamed == [True, False]
    assert final.outcome == "completed" and final.text == "cut answer that never ends"
    await claude.close(session)  # a warm process outlives its turn
    assert_group_gone(session)


@run_async
async def test_stream_cut_then_failing_retry_is_classified(world: CliWorld) -> None:
    script = [
        {"text": "cut answer", "cut_after": 3, "match": {"stream": True}, "times": -1},
        {"status": 500, "match": {"stream": False}, "times": -1},
    ]
    with AgentAnthropic(script, fallback={"text": "side"}) as fake:
        claude = provider(fake)
        session = await claude.open(workspace=world.workspace)
        events = await collect(session, "hi")
    final = one_complete(events)
    errors = [e for e in events if isinstance(e, Error) and e.attempt is None]
    assert final.outcome == "failed"
    assert errors and errors[-1].kind in ("transport", "provider") and errors[-1].retryable
    await claude.close(session)  # a warm process outlives its turn
    assert_group_gone(session)


@run_async
async def test_abort_mid_turn_ends_the_process_group(world: CliWorld) -> None:
    # The server holds its answer back; the turn is aborted while the CLI waits for it. A
    # process per turn is ended (a warm one is only interrupted: test_claude_code_warm.py).
    script = [{"text": "a slow answer that will not finish", "delay": 30}]
    with AgentAnthropic(script, fallback={"text": "side"}) as fake:
        claude = provider(fake, grace="2", warm="false")
        session = await claude.open(workspace=world.workspace)
        events = await abort_when(
            claude, session, "hi", lambda e: isinstance(e, Session) and bool(e.provider_session_id)
        )
        asked = len(fake.turn_requests())
    final = one_complete(events)
    assert final.outcome == "aborted" and asked <= 1
    assert not [e for e in events if isinstance(e, Error)]
    assert_group_gone(session)


@run_async
async def test_turn_timeout_is_classified_and_ends_the_group(world: CliWorld) -> None:
    with AgentAnthropic([{"text": "late", "delay": 30}], fallback={"text": "side"}) as fake:
        claude = provider(fake, turn_timeout="3", grace="1")
        session = await claude.open(workspace=world.workspace)
        events = await collect(session, "hi")
    final = one_complete(events)
    assert final.outcome == "failed" and final.stop_reason == "timeout"
    assert [e.kind for e in events if isinstance(e, Error)] == ["timeout"]
    assert_group_gone(session)


@run_async
async def test_write_tool_reports_a_created_file(world: CliWorld) -> None:
    target = world.workspace / "made.txt"
    script = [
        {"tool_calls": [{"name": "Write", "arguments": {"file_path": str(target), "content": "new\n"}}]},
        {"text": "Written."},
    ]
    with AgentAnthropic(script, fallback={"text": "side"}) as fake:
        claude = provider(fake, allowed_tools="Write")
        session = await claude.open(workspace=world.workspace)
        events = await collect(session, "write a file")
    assert one_complete(events).outcome == "completed"
    assert target.read_text() == "new\n"
    calls = [e for e in events if isinstance(e, ToolCall)]
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [c.call_id for c in calls] == [r.call_id for r in results]
    changes = [e for e in events if isinstance(e, FileChange)]
    assert [(c.path, c.kind, c.call_id) for c in changes] == [(str(target), "created", calls[0].call_id)]
    assert [e for e in events if isinstance(e, Usage)]


@run_async
async def test_store_resume_and_fork_verbs_are_native(world: CliWorld, tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "verbs.db")
    script = [{"text": "Parent."}, {"text": "Resumed."}, {"text": "Forked."}]
    with AgentAnthropic(script, fallback={"text": "side"}) as fake:
        claude = provider(fake)
        parent = await claude.open(workspace=world.workspace, store=store)
        await collect(parent, "parent-marker")
        resumed = await claude.resume(parent.session_id, store=store)
        assert one_complete(await collect(resumed, "resume-marker")).text == "Resumed."
        forked = await claude.fork(parent.session_id, store=store)
        assert one_complete(await collect(forked, "fork-marker")).text == "Forked."
        requests = fake.turn_requests()
    assert resumed.resumed == "native" and resumed.provider_session_id == parent.provider_session_id
    assert "parent-marker" in json.dumps(requests[1].body["messages"])
    fork_history = json.dumps(requests[2].body["messages"])
    assert "parent-marker" in fork_history and "resume-marker" in fork_history and "fork-marker" in fork_history
    record = store.get(forked.session_id)
    assert record is not None and record.parent_id == parent.session_id
    assert forked.provider_session_id not in (None, parent.provider_session_id)
    store.close()


@run_async
async def test_cli_killed_from_outside_mid_turn_is_a_classified_failure(world: CliWorld) -> None:
    import os
    import signal

    events: list[object] = []
    with AgentAnthropic([{"text": "slow", "delay": 30}], fallback={"text": "side"}) as fake:
        claude = provider(fake)
        session = await claude.open(workspace=world.workspace)
        async for event in session.send("hi"):
            events.append(event)
            if isinstance(event, Session) and event.provider_session_id:
                os.killpg(session.state["cli_process"].pgid, signal.SIGKILL)
    final = events[-1]
    errors = [e for e in events if isinstance(e, Error)]
    assert isinstance(final, Complete) and final.outcome == "failed" and final.stop_reason == "provider"
    assert len(errors) == 1 and "exit code -9" in errors[0].message
    assert_group_gone(session)


@run_async
async def test_thinking_becomes_reasoning(world: CliWorld) -> None:
    script = [{"reasoning": "The user greets me.", "text": "Hello."}]
    with AgentAnthropic(script, fallback={"text": "side"}) as fake:
        claude = provider(fake)
        session = await claude.open(workspace=world.workspace)
        events = await collect(session, "hi")
    assert one_complete(events).text == "Hello."
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "The user greets me."
    assert [e.text for e in events if isinstance(e, Reasoning)] == ["The user greets me."]


def test_ctrl_c_on_seamline_run_aborts_and_leaves_no_process(world: CliWorld) -> None:
    import os
    import signal
    import time

    with AgentAnthropic([{"text": "slow", "delay": 30}], fallback={"text": "side"}) as fake:
        argv = [
            sys.executable, "-m", "seamline", "run", "--provider", "claude-code", "--model", MODEL, "--json",
            "-o", f"executable={cli_path('claude')}", "-o", f"base_url={fake.root_url}", "-o", "grace=2",
            "--workspace", str(world.workspace), "hi",
        ]  # fmt: skip
        run = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert run.stdout is not None
            lines = []
            for line in run.stdout:
                lines.append(json.loads(line))
                if lines[-1]["type"] == "session" and lines[-1]["provider_session_id"]:
                    time.sleep(0.5)
                    run.send_signal(signal.SIGINT)  # what Ctrl-C does to seamline
            code = run.wait(timeout=30)
        finally:
            if run.poll() is None:
                run.kill()
    assert code == 130 and lines[-1]["type"] == "complete" and lines[-1]["outcome"] == "aborted"
    # Nothing that ran in the workspace is left.
    left = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "cwd") == str(world.workspace):
                    left.append(entry.name)
            except OSError:
                continue
    assert left == []


@run_async
async def test_native_budget_stop_is_outcome_budget_with_its_cost(world: CliWorld) -> None:
    script = [
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "echo hi"}}], "usage": {"input_tokens": 100000}},
        {"text": "never asked for"},
    ]
    with AgentAnthropic(script, fallback={"text": "side"}) as fake:
        claude = provider(fake, max_budget_usd="0.01")
        session = await claude.open(workspace=world.workspace)
        events = await collect(session, "spend")
        asked = len(fake.turn_requests())
    final = one_complete(events)
    assert final.outcome == "budget" and asked == 1
    usage = [e for e in events if isinstance(e, Usage)]
    # The result's summed usage reads zero here; the per-model figures carry the spend.
    assert len(usage) == 1 and usage[0].input_tokens == 100000 and usage[0].cost_usd is not None
    assert usage[0].cost_usd > 0.01 and [e.kind for e in events if isinstance(e, Error)] == ["budget"]
