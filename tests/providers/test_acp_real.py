"""The ``acp`` provider against a real ACP agent: claude-agent-acp 0.23.1 (it bundles its
own Claude Code), with its API traffic pointed at the fake Anthropic server on 127.0.0.1.

The agent is installed by ``bash scripts/system/45-acp-opencode.sh``; a test that does not
find it fails, naming that command.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from seamline.events import (
    Complete,
    Event,
    PermissionDecision,
    Session,
    TextDelta,
    ToolCall,
    ToolResult,
    Usage,
)
from seamline.providers.acp.agent_process import running_agents
from seamline.providers.acp.provider import AcpProvider
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.tools.approval import YesApproval
from seamline.transport.subprocess import group_members
from tests.fakes._http import RecordedRequest
from tests.fakes.anthropic_api import FakeAnthropic
from tests.providers.agent_cli_support import ROOT, CliWorld, make_world, run_async

pytestmark = pytest.mark.real
SETUP_COMMAND = "bash scripts/system/45-acp-opencode.sh"
AGENT_BIN = ROOT / ".tools" / "acp-opencode" / "node_modules" / ".bin" / "claude-agent-acp"


def agent_command() -> str:
    if not (AGENT_BIN.exists() and os.access(AGENT_BIN, os.X_OK)):
        pytest.fail(f"claude-agent-acp is not installed at {AGENT_BIN}; run: {SETUP_COMMAND}")
    return str(AGENT_BIN)


class AcpAnthropic(FakeAnthropic):
    """The fake Anthropic API; Claude Code's side requests (no tools: titles) get the fallback.

    The Claude Code bundled with claude-agent-acp sends ``output_config`` on its real
    turns too, so only the absence of tools marks a side request here.
    """

    def _take(self, request: RecordedRequest) -> dict[str, Any] | None:
        body = request.body if isinstance(request.body, dict) else {}
        if not body.get("tools"):
            return self.fallback or {"text": "side"}
        return super()._take(request)

    def turn_requests(self) -> list[RecordedRequest]:
        return [r for r in self.model_requests() if isinstance(r.body, dict) and r.body.get("tools")]


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliWorld:
    w = make_world(tmp_path, monkeypatch)
    # Claude Code refuses to run as root without this (CI runs as root).
    monkeypatch.setenv("IS_SANDBOX", "1")
    monkeypatch.setenv("CLAUDE_CODE_MAX_RETRIES", "0")
    return w


def processes_in(folder: Path) -> list[int]:
    """Live processes whose working directory is inside ``folder`` (the agent runs there)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = Path(os.readlink(entry / "cwd"))
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and (cwd == folder or folder in cwd.parents):
            found.append(int(entry.name))
    return found


def bash_script(command: str) -> list[dict[str, object]]:
    return [
        {"tool_calls": [{"name": "Bash", "arguments": {"command": command}}]},
        {"text": "Done.", "usage": {"input_tokens": 120, "output_tokens": 6}},
    ]


def run_cli(world: CliWorld, fake: FakeAnthropic, *extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, ANTHROPIC_BASE_URL=fake.root_url)
    argv = [
        sys.executable, "-m", "seamline", "run", "--provider", "acp", "--json",
        "--provider-option", f"command={agent_command()}",
        "--workspace", str(world.workspace), *extra, "Write hello to out.txt",
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT, env=env, check=False)


def test_seamline_run_completes_a_turn_with_a_tool_call_allowed_by_yes(world: CliWorld) -> None:
    with AcpAnthropic(bash_script("echo hello-acp > out.txt"), fallback={"text": "side"}) as fake:
        done = run_cli(world, fake, "--yes")
        seen = fake.turn_requests()
        answered = len(fake.model_requests())
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "session" and kinds[-1] == "complete" and kinds.count("complete") == 1
    assert events[0]["provider_session_id"]  # session/new minted it before the turn
    call = next(e for e in events if e["type"] == "tool_call")
    assert call["name"] == "Bash" and call["arguments"] == {"command": "echo hello-acp > out.txt"}
    decision = next(e for e in events if e["type"] == "permission_decision")
    assert decision["decision"] == "allow" and "--yes" in decision["reason"]
    result = next(e for e in events if e["type"] == "tool_result")
    assert result["call_id"] == call["call_id"] and result["is_error"] is False
    assert (world.workspace / "out.txt").read_text() == "hello-acp\n"
    usage = [e for e in events if e["type"] == "usage"]
    # One figure per model request, read from the wire by seamline's gateway.
    assert len(usage) == answered and all(u["priced"] is True and u["cost_usd"] > 0 for u in usage)
    assert usage[-1]["input_tokens"] == 120 and usage[-1]["output_tokens"] == 6
    assert events[-1]["outcome"] == "completed" and events[-1]["text"] == "Done."
    # The tool result went back to the model in the second request.
    assert len(seen) == 2 and "tool_result" in json.dumps(seen[1].body["messages"])
    assert processes_in(world.workspace) == []  # the agent's process group ended with the run


def test_permission_request_without_yes_is_refused_by_the_policy(world: CliWorld) -> None:
    with AcpAnthropic(bash_script("echo nope > out.txt"), fallback={"text": "side"}) as fake:
        done = run_cli(world, fake)
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    request = next(e for e in events if e["type"] == "permission_request")
    decision = next(e for e in events if e["type"] == "permission_decision")
    assert request["tool"] == "Bash" and decision["decision"] == "deny"
    result = next(e for e in events if e["type"] == "tool_result")
    assert result["is_error"] is True
    assert not (world.workspace / "out.txt").exists()
    assert events[-1]["type"] == "complete" and events[-1]["outcome"] == "completed"
    assert processes_in(world.workspace) == []


def test_a_stored_rule_of_the_permission_service_answers_the_agent(world: CliWorld) -> None:
    rule = [sys.executable, "-m", "seamline", "permissions", "add", "allow", "--tool", "Bash",
            "--pattern", "command=echo ruled*"]  # fmt: skip
    added = subprocess.run(rule, capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)
    assert added.returncode == 0, added.stderr
    with AcpAnthropic(bash_script("echo ruled > out.txt"), fallback={"text": "side"}) as fake:
        done = run_cli(world, fake)  # no --yes: only the rule can allow it
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    decisions = [e for e in events if e["type"] == "permission_decision"]
    assert len(decisions) == 1 and decisions[0]["decision"] == "allow" and "rule" in decisions[0]["reason"]
    result = next(e for e in events if e["type"] == "tool_result")
    assert result["is_error"] is False
    assert (world.workspace / "out.txt").read_text() == "ruled\n"


def test_ctrl_c_during_seamline_run_cancels_the_turn_as_aborted(world: CliWorld) -> None:
    slow = {"chunks": [f"word{i} " for i in range(300)], "chunk_delay": 0.1}
    with AcpAnthropic([slow], fallback={"text": "side"}) as fake:
        env = dict(os.environ, ANTHROPIC_BASE_URL=fake.root_url)
        argv = [
            sys.executable, "-m", "seamline", "run", "--provider", "acp", "--json",
            "--provider-option", f"command={agent_command()}", "--workspace", str(world.workspace), "Count",
        ]  # fmt: skip
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
        try:
            assert proc.stdout is not None
            lines = []
            for line in proc.stdout:
                lines.append(json.loads(line))
                if lines[-1]["type"] == "text_delta":
                    proc.send_signal(signal.SIGINT)
                    break
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    lines += [json.loads(line) for line in out.splitlines()]
    assert proc.returncode == 130, err
    assert lines[-1]["type"] == "complete" and lines[-1]["outcome"] == "aborted"
    assert [e["type"] for e in lines].count("complete") == 1
    assert processes_in(world.workspace) == []


@run_async
async def test_cancel_mid_turn_gives_aborted_and_one_process_serves_two_sessions(
    world: CliWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = {"chunks": [f"word{i} " for i in range(200)], "chunk_delay": 0.1}
    with AcpAnthropic([slow, {"text": "Second session answer."}], fallback={"text": "side"}) as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.root_url)
        # Shared without the gateway (through it, each session has its own agent and gateway).
        provider = AcpProvider(options={"command": agent_command(), "gateway": "off"})
        first = await provider.open(workspace=world.workspace, approval=YesApproval(yes=True))
        second = await provider.open(workspace=world.workspace, approval=YesApproval(yes=True))
        agent = first.state["acp_agent"]
        assert second.state["acp_agent"] is agent and agent.refs == 2  # one process, two sessions
        assert first.provider_session_id != second.provider_session_id
        pgid = agent.rpc.process.pgid
        events: list[Event] = []
        aborting: asyncio.Task[None] | None = None
        async for event in first.send("Count slowly"):
            events.append(event)
            if aborting is None and isinstance(event, TextDelta):
                aborting = asyncio.create_task(provider.abort(first))
        assert aborting is not None
        await aborting
        final = events[-1]
        assert isinstance(final, Complete) and final.outcome == "aborted" and final.stop_reason == "cancelled"
        assert sum(isinstance(e, Complete) for e in events) == 1
        # The other session still works on the same process after the cancel.
        later = [e async for e in second.send("Hello")]
        assert isinstance(later[-1], Complete) and later[-1].outcome == "completed"
        assert later[-1].text == "Second session answer."
        await provider.close(first)
        assert group_members(pgid)  # still serving the second session
        await provider.close(second)
    assert group_members(pgid) == []  # the last close ended the whole process group
    assert running_agents() == []


@run_async
async def test_resume_loads_the_session_in_a_new_agent_process(
    world: CliWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLiteStore(tmp_path / "store.db")
    with AcpAnthropic(
        [{"text": "The word is pelican."}, {"text": "You asked about the word."}], fallback={"text": "side"}
    ) as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.root_url)
        provider = AcpProvider(options={"command": agent_command()})
        session = await provider.open(workspace=world.workspace, store=store, approval=YesApproval())
        first = [e async for e in session.send("Remember pelican")]
        psid = session.provider_session_id
        await provider.close(session)
        assert isinstance(first[-1], Complete) and first[-1].outcome == "completed"
        resumed = await provider.resume(session.session_id, store=store, approval=YesApproval())
        assert resumed.state["acp_agent"].can_load  # claude-agent-acp offers session/load
        second = [e async for e in resumed.send("What did I ask?")]
        await provider.close(resumed)
        seen = fake.turn_requests()
    starts = [e for e in second if isinstance(e, Session)]
    assert starts[0].provider_session_id == psid  # the same agent session, natively
    assert isinstance(second[-1], Complete) and second[-1].text == "You asked about the word."
    # The loaded session carried the first turn's history to the model.
    assert "Remember pelican" in json.dumps(seen[-1].body["messages"])
    assert not any(isinstance(e, ToolCall | ToolResult | PermissionDecision) for e in second)
    assert any(isinstance(e, Usage) for e in second)
    store.close()
    assert running_agents() == []


@run_async
async def test_fork_through_the_store_is_emulated_with_the_history(
    world: CliWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLiteStore(tmp_path / "store.db")
    with AcpAnthropic([{"text": "The word is osprey."}, {"text": "Forked reply."}], fallback={"text": "side"}) as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.root_url)
        provider = AcpProvider(options={"command": agent_command()})
        session = await provider.open(workspace=world.workspace, store=store, approval=YesApproval())
        first = [e async for e in session.send("Remember osprey")]
        assert isinstance(first[-1], Complete) and first[-1].outcome == "completed"
        forked = await provider.fork(session.session_id, store=store, approval=YesApproval())
        later = [e async for e in forked.send("Which bird?")]
        await provider.close(forked)
        await provider.close(session)
        seen = fake.turn_requests()
    assert isinstance(later[-1], Complete) and later[-1].text == "Forked reply."
    record = store.get(forked.session_id)
    assert record is not None and record.parent_id == session.session_id and record.metadata["fork"] == "emulated"
    # A new agent session that was given the earlier conversation as context.
    assert forked.provider_session_id != session.provider_session_id
    sent = json.dumps(seen[-1].body["messages"])
    assert "Remember osprey" in sent and "The word is osprey." in sent and "Which bird?" in sent
    store.close()
    assert running_agents() == []


@run_async
async def test_model_is_chosen_with_set_model_and_an_unknown_one_is_refused(
    world: CliWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    from seamline.errors import InvalidRequest

    with AcpAnthropic([{"text": "From haiku."}], fallback={"text": "side"}) as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.root_url)
        with pytest.raises(InvalidRequest, match=r"offers no model 'no-such-model'.*haiku"):
            await AcpProvider(model="no-such-model", options={"command": agent_command()}).open(
                workspace=world.workspace
            )
        assert running_agents() == []  # the refused open released the agent
        provider = AcpProvider(model="haiku", options={"command": agent_command()})
        session = await provider.open(workspace=world.workspace, approval=YesApproval())
        events = [e async for e in session.send("Hi")]
        await provider.close(session)
        seen = fake.turn_requests()
    assert isinstance(events[-1], Complete) and events[-1].text == "From haiku."
    assert "haiku" in seen[-1].body["model"]
    assert processes_in(world.workspace) == []
