"""Claude Code's own tool calls go through seamline's permission service (a PreToolUse hook
over a unix socket), and a Claude Code turn is journaled so `seamline revert` undoes it.
The real program against the fake Anthropic API on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest

from seamline.events import Event, PermissionDecision, PermissionRequest, ToolCall, ToolResult
from seamline.providers.agent_clis.approvals import HOOK_SOURCE, ApprovalSocket
from seamline.providers.agent_clis.claude_code import ClaudeCodeProvider
from seamline.sessions.rules import PermissionRules
from seamline.tools.permissions import PermissionAnswer, PermissionService
from tests.providers.agent_cli_support import (
    AgentAnthropic,
    CliWorld,
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


def bash_script(command: str) -> list[dict[str, object]]:
    return [{"tool_calls": [{"name": "Bash", "arguments": {"command": command}}]}, {"text": "Done."}]


def _index(events: list[Event], kind: type, **fields: object) -> int:
    for i, event in enumerate(events):
        if isinstance(event, kind) and all(getattr(event, k) == v for k, v in fields.items()):
            return i
    raise AssertionError(f"no {kind.__name__} {fields} in {events}")


@run_async
async def test_stored_deny_rule_refuses_claude_codes_own_shell_call(world: CliWorld, tmp_path: Path) -> None:
    marker = world.workspace / "marker"
    rules = PermissionRules(":memory:")
    rules.add("deny", tool="Bash", pattern="command=touch*")
    # --yes, and Claude Code's own rules allow Bash: only seamline's stored rule can refuse it.
    service = PermissionService(rules=rules, workspace=world.workspace, yes=True)
    with AgentAnthropic(bash_script(f"touch {marker}"), fallback={"text": "side"}) as fake:
        claude = provider(fake, allowed_tools="Bash", permission_mode="bypassPermissions")
        session = await claude.open(workspace=world.workspace, approval=service)
        events = await collect(session, "make the marker")
        await claude.close(session)
        assert_group_gone(session)
    call = next(e for e in events if isinstance(e, ToolCall))
    decision = _index(events, PermissionDecision, request_id=f"perm-{call.call_id}", decision="deny")
    assert "denied by rule" in events[decision].reason  # type: ignore[attr-defined]
    assert [e for e in events if isinstance(e, PermissionDecision)] == [events[decision]]
    assert decision < _index(events, ToolResult, call_id=call.call_id)
    assert one_complete(events).outcome == "completed"
    assert not marker.exists()


@run_async
async def test_hard_denial_refuses_rm_rf_outside_even_with_yes(world: CliWorld, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep\n")
    service = PermissionService(workspace=world.workspace, yes=True)
    with AgentAnthropic(bash_script(f"rm -rf {outside}"), fallback={"text": "side"}) as fake:
        claude = provider(fake, allowed_tools="Bash", permission_mode="bypassPermissions")
        session = await claude.open(workspace=world.workspace, approval=service)
        events = await collect(session, "clean up")
        await claude.close(session)
    decisions = [e for e in events if isinstance(e, PermissionDecision)]
    assert [d.decision for d in decisions] == ["deny"] and "hard denial" in decisions[0].reason
    assert (outside / "keep.txt").read_text() == "keep\n"
    assert one_complete(events).outcome == "completed"


@run_async
async def test_ask_without_a_prompter_is_a_request_then_a_deny(world: CliWorld) -> None:
    marker = world.workspace / "marker"
    service = PermissionService(workspace=world.workspace)  # no --yes, no prompter, no rule
    with AgentAnthropic(bash_script(f"touch {marker}"), fallback={"text": "side"}) as fake:
        claude = provider(fake, allowed_tools="Bash")
        session = await claude.open(workspace=world.workspace, approval=service)
        events = await collect(session, "make the marker")
        await claude.close(session)
    call = next(e for e in events if isinstance(e, ToolCall))
    request = _index(events, PermissionRequest, call_id=call.call_id)
    assert events[request].tool == "Bash" and events[request].arguments["command"] == f"touch {marker}"  # type: ignore[attr-defined]
    assert request < _index(events, PermissionDecision, decision="deny")
    assert not marker.exists()


@pytest.mark.parametrize("warm", ["true", "false"])
@run_async
async def test_allowed_call_runs_and_the_hook_leaves_no_socket(world: CliWorld, warm: str) -> None:
    marker = world.workspace / "marker"
    service = PermissionService(workspace=world.workspace, yes=True)
    with AgentAnthropic(bash_script(f"touch {marker}"), fallback={"text": "side"}) as fake:
        claude = provider(fake, allowed_tools="Read", warm=warm)  # Claude Code alone would refuse Bash
        session = await claude.open(workspace=world.workspace, approval=service)
        events = await collect(session, "make the marker")
        folder = session.state["runtime_dir"]
        # The socket lives as long as the process that names it: the turn's, or the warm one.
        assert (folder / "approve.sock").exists() is (warm == "true")
        await claude.close(session)
        assert not (folder / "approve.sock").exists()
        assert_group_gone(session)
    assert marker.exists()
    assert [d.decision for d in events if isinstance(d, PermissionDecision)] == ["allow"]
    assert not folder.exists()


@run_async
async def test_hook_that_gets_no_answer_fails_closed(world: CliWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = world.workspace / "marker"

    async def silent(self: ApprovalSocket, reader: object, writer: asyncio.StreamWriter) -> None:
        writer.close()  # seamline hangs up without a decision

    monkeypatch.setattr(ApprovalSocket, "_serve", silent)
    service = PermissionService(workspace=world.workspace, yes=True)
    with AgentAnthropic(bash_script(f"touch {marker}"), fallback={"text": "side"}) as fake:
        claude = provider(fake, allowed_tools="Bash", permission_mode="bypassPermissions")
        session = await claude.open(workspace=world.workspace, approval=service)
        events = await collect(session, "make the marker")
        await claude.close(session)
    assert one_complete(events).outcome == "completed"
    result = next(e for e in events if isinstance(e, ToolResult))
    assert result.is_error and "seamline approval" in str(result.output)
    assert not marker.exists()


def test_hook_program_denies_when_seamline_is_unreachable(tmp_path: Path) -> None:
    hook = tmp_path / "hook.py"
    hook.write_text(HOOK_SOURCE)
    asked = json.dumps({"tool_name": "Bash", "tool_input": {"command": "true"}, "tool_use_id": "t1"})
    done = subprocess.run(
        ["/usr/bin/python3", str(hook), str(tmp_path / "nobody.sock"), "5"],
        input=asked,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert "cannot reach seamline" in done.stderr


@run_async
async def test_abort_while_a_prompt_waits_ends_the_turn_and_the_socket(world: CliWorld) -> None:
    marker, second_marker = world.workspace / "marker", world.workspace / "second"
    asked, never = asyncio.Event(), asyncio.Event()

    async def waits_for_ever_then_allows(request: PermissionRequest) -> PermissionAnswer:
        if not asked.is_set():
            asked.set()
            await never.wait()
            raise AssertionError("never answered")
        return PermissionAnswer("allow")

    async def abort_once_asked() -> None:
        await asked.wait()
        await claude.abort(session)

    service = PermissionService(workspace=world.workspace, prompter=waits_for_ever_then_allows)
    script = [*bash_script(f"touch {marker}")[:1], *bash_script(f"touch {second_marker}")]
    with AgentAnthropic(script, fallback={"text": "side"}) as fake:
        claude = provider(fake, allowed_tools="Bash")
        session = await claude.open(workspace=world.workspace, approval=service)
        aborting = asyncio.create_task(abort_once_asked())
        events = await asyncio.wait_for(collect(session, "make the marker"), timeout=60)
        assert aborting.done() and asked.is_set()
        # The CLI ended the turn on its interrupt; its warm process and socket stay until close,
        # and the decision left waiting is dropped: the next turn's call is decided at once.
        socket = session.state["runtime_dir"] / "approve.sock"
        assert socket.exists()
        again = await asyncio.wait_for(collect(session, "make the second marker"), timeout=60)
        await claude.close(session)
        assert_group_gone(session)
        assert not socket.exists()
    assert one_complete(events).outcome == "aborted"
    assert not marker.exists()
    assert one_complete(again).outcome == "completed" and second_marker.exists()
    assert [d.decision for d in again if isinstance(d, PermissionDecision)] == ["allow"]
