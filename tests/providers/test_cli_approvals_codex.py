"""Codex's own tool calls go through seamline's permission service: a PreToolUse hook that
seamline declares and trusts (``-c`` overrides) asks over a unix socket before each call.
The real program against the fake OpenAI Responses API on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import pytest

from seamline.events import Error, Event, PermissionDecision, ToolCall, ToolResult
from seamline.providers.agent_clis import codex_hooks
from seamline.providers.agent_clis.codex import CodexProvider
from seamline.sessions.rules import PermissionRules
from seamline.tools.permissions import PermissionService
from tests.providers.agent_cli_support import (
    AgentOpenAI,
    CliWorld,
    cli_path,
    collect,
    make_world,
    one_complete,
    run_async,
)

pytestmark = pytest.mark.real
MODEL = "gpt-5.5"


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliWorld:
    return make_world(tmp_path, monkeypatch)


def shell(command: str) -> list[dict[str, object]]:
    return [{"tool_calls": [{"name": "exec_command", "arguments": {"cmd": command}}]}, {"text": "Done."}]


def patch_adding(name: str) -> list[dict[str, object]]:
    patch = f"*** Begin Patch\n*** Add File: {name}\n+new\n*** End Patch\n"
    return [{"custom_tool_calls": [{"name": "apply_patch", "input": patch}]}, {"text": "Done."}]


async def _turn(fake: AgentOpenAI, world: CliWorld, service: PermissionService) -> list[Event]:
    # Codex's own sandbox cannot work under the tests' /tmp home: its commands run unsandboxed,
    # so only seamline's decision stands between the call and the workspace.
    options = {"executable": cli_path("codex"), "base_url": fake.base_url, "sandbox": "danger-full-access"}
    codex = CodexProvider(model=MODEL, options=options)
    session = await codex.open(workspace=world.workspace, approval=service)
    try:
        return await collect(session, "do it")
    finally:
        await codex.close(session)


@run_async
async def test_a_stored_deny_rule_refuses_codexs_own_shell_call(world: CliWorld) -> None:
    marker = world.workspace / "marker"
    rules = PermissionRules(":memory:")
    rules.add("deny", tool="Bash", pattern="command=touch*")
    service = PermissionService(rules=rules, workspace=world.workspace, yes=True)  # only the rule can refuse
    with AgentOpenAI(shell(f"touch {marker}")) as fake:
        events = await _turn(fake, world, service)
    decisions = [e for e in events if isinstance(e, PermissionDecision)]
    assert [d.decision for d in decisions] == ["deny"] and "denied by rule" in decisions[0].reason, events
    # Codex prints nothing for a call its hook blocked: seamline reports the call and its refusal.
    calls = [e for e in events if isinstance(e, ToolCall)]
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [(c.name, c.arguments) for c in calls] == [("shell", {"command": f"touch {marker}"})]
    assert results[0].is_error and "denied by rule" in results[0].output
    assert one_complete(events).outcome == "completed"
    assert not marker.exists()


@run_async
async def test_the_hard_denial_refuses_rm_rf_outside_even_with_yes(world: CliWorld, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep\n")
    service = PermissionService(workspace=world.workspace, yes=True)
    with AgentOpenAI(shell(f"rm -rf {outside}")) as fake:
        events = await _turn(fake, world, service)
    decisions = [e for e in events if isinstance(e, PermissionDecision)]
    assert [d.decision for d in decisions] == ["deny"] and "hard denial" in decisions[0].reason
    assert (outside / "keep.txt").read_text() == "keep\n"


@run_async
async def test_a_path_rule_refuses_an_apply_patch_and_allows_another(world: CliWorld) -> None:
    rules = PermissionRules(":memory:")
    rules.add("deny", tool="apply_patch", pattern="path=secret*")
    service = PermissionService(rules=rules, workspace=world.workspace, yes=True)
    with AgentOpenAI(patch_adding("secret.txt")) as fake:
        refused = await _turn(fake, world, service)
    with AgentOpenAI(patch_adding("plain.txt")) as fake:
        allowed = await _turn(fake, world, service)
    assert [e.decision for e in refused if isinstance(e, PermissionDecision)] == ["deny"], refused
    assert not (world.workspace / "secret.txt").exists()
    assert [e.decision for e in allowed if isinstance(e, PermissionDecision)] == ["allow"], allowed
    assert (world.workspace / "plain.txt").read_text() == "new\n"


@run_async
async def test_without_yes_or_a_rule_a_shell_call_is_asked_then_denied(world: CliWorld) -> None:
    marker = world.workspace / "marker"
    service = PermissionService(workspace=world.workspace)  # headless: nobody to answer
    with AgentOpenAI(shell(f"touch {marker}")) as fake:
        events = await _turn(fake, world, service)
    kinds = [e.type for e in events if e.type in ("permission_request", "permission_decision")]
    assert kinds == ["permission_request", "permission_decision"], events
    assert not marker.exists()


@run_async
async def test_a_codex_that_would_not_trust_the_hook_is_not_started(
    world: CliWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if this Codex computed trust another way: the hook would be skipped and the call run.
    real = codex_hooks.trust_hash
    monkeypatch.setattr(codex_hooks, "trust_hash", lambda *a, **k: real(*a, **k)[:-4] + "0000")
    marker = world.workspace / "marker"
    service = PermissionService(workspace=world.workspace, yes=True)
    with AgentOpenAI(shell(f"touch {marker}")) as fake:
        events = await _turn(fake, world, service)
        assert fake.model_requests() == []
    errors = [e for e in events if isinstance(e, Error)]
    assert errors and "approval hook would not run" in errors[0].message and "'modified'" in errors[0].message
    assert one_complete(events).outcome == "failed"
    assert not marker.exists()


@run_async
async def test_warm_a_stored_deny_rule_refuses_a_shell_call_on_turn_two(world: CliWorld) -> None:
    # One codex app-server for both turns: the hook in its -c flags answers through one socket.
    marker = world.workspace / "marker"
    rules = PermissionRules(":memory:")
    rules.add("deny", tool="Bash", pattern="command=touch*")
    service = PermissionService(rules=rules, workspace=world.workspace, yes=True)
    with AgentOpenAI([*shell("echo allowed"), *shell(f"touch {marker}")]) as fake:
        options = {"executable": cli_path("codex"), "base_url": fake.base_url, "sandbox": "danger-full-access"}
        codex = CodexProvider(model=MODEL, options=options)
        session = await codex.open(workspace=world.workspace, approval=service)
        first = await collect(session, "echo something")
        socket = session.state["runtime_dir"] / "approve.sock"
        assert socket.exists()  # the hook's socket lives as long as the warm process
        pid = session.state["cli_process"].pid
        second = await collect(session, "make the marker")
        assert session.state["cli_process"].pid == pid and "app-server" in session.state["cli_process"].argv
        bridge = session.state["approval_bridge"]
        await codex.close(session)
        assert not bridge.running
    assert [d.decision for d in first if isinstance(d, PermissionDecision)] == ["allow"]
    decisions = [e for e in second if isinstance(e, PermissionDecision)]
    assert [d.decision for d in decisions] == ["deny"] and "denied by rule" in decisions[0].reason, second
    results = [e for e in second if isinstance(e, ToolResult)]
    assert results[0].is_error and one_complete(second).outcome == "completed"
    assert not marker.exists() and not socket.exists()
