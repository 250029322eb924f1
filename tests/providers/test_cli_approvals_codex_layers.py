"""One ``[hooks.state."<key>"] enabled = false`` in a Codex config layer used to switch
seamline's approval hook off, while the check that the hook would run asked Codex with a
temporary ``CODEX_HOME`` and passed. seamline's own state entry now says ``enabled = true``
in the session-flags layer (which outranks the user's), and the check asks Codex with the
run's own configuration: its ``CODEX_HOME``, its workspace, its flags. The real program
against the fake OpenAI Responses API on 127.0.0.1 (outside the envelope; inside, see
tests/sandbox/test_envelope_codex_hook_layers.py).

Also here: the second turn of a session opened without a store (no edit journal). The first
turn's clean-up used to run late, when its generator was collected, in the middle of the
next turn, and stop the socket that turn's hook asks (so its calls were refused unasked)."""

from __future__ import annotations

from pathlib import Path

import pytest

from seamline.events import Error, Event, PermissionDecision, ToolResult
from seamline.providers.agent_clis import codex_hooks
from seamline.providers.agent_clis.codex import CodexProvider
from seamline.tools.permissions import PermissionService
from tests.fakes._http import FakeAPI
from tests.providers.agent_cli_support import (
    AgentOpenAI,
    CliWorld,
    cli_path,
    collect,
    make_world,
    one_complete,
    run_async,
)
from tests.providers.hook_layer_support import assert_denied_by_rule, deny_touch

pytestmark = pytest.mark.real
MODEL = "gpt-5.5"
# The key of seamline's hook as Codex names it (the first hook of the session-flags layer).
KEY = "/<session-flags>/config.toml:pre_tool_use:0:0"
DISABLING = f'[hooks.state."{KEY}"]\nenabled = false\n'


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliWorld:
    return make_world(tmp_path, monkeypatch)


def shell(command: str) -> list[dict[str, object]]:
    return [{"tool_calls": [{"name": "exec_command", "arguments": {"cmd": command}}]}, {"text": "Done."}]


async def one_turn(fake: FakeAPI, world: CliWorld, service: PermissionService, *, warm: str) -> list[Event]:
    # Codex's own sandbox off (as in test_cli_approvals_codex.py): only seamline's decision
    # stands between the call and the workspace.
    options = {
        "executable": cli_path("codex"),
        "base_url": fake.base_url,
        "sandbox": "danger-full-access",
        "warm": warm,
    }
    codex = CodexProvider(model=MODEL, options=options)
    session = await codex.open(workspace=world.workspace, approval=service)
    try:
        return await collect(session, "do it")
    finally:
        await codex.close(session)


@pytest.mark.parametrize("warm", ["true", "false"])  # codex app-server, or codex exec
@run_async
async def test_the_users_config_disabling_the_hook_does_not_switch_it_off(world: CliWorld, warm: str) -> None:
    (world.home / ".codex" / "config.toml").write_text(DISABLING)  # the run's CODEX_HOME
    marker = world.workspace / "marker"
    with AgentOpenAI(shell(f"touch {marker}")) as fake:
        events = await one_turn(fake, world, deny_touch(world, "Bash"), warm=warm)
    assert_denied_by_rule(events, marker, said_in_result=True)


@run_async
async def test_a_trusted_projects_config_disabling_the_hook_does_not_switch_it_off(world: CliWorld) -> None:
    (world.workspace / ".codex").mkdir()
    (world.workspace / ".codex" / "config.toml").write_text(DISABLING)
    trusted = f'[projects."{world.workspace}"]\ntrust_level = "trusted"\n'
    (world.home / ".codex" / "config.toml").write_text(trusted)
    marker = world.workspace / "marker"
    with AgentOpenAI(shell(f"touch {marker}")) as fake:
        events = await one_turn(fake, world, deny_touch(world, "Bash"), warm="false")
    assert_denied_by_rule(events, marker, said_in_result=True)


@run_async
async def test_the_check_reads_the_runs_own_config_and_refuses_when_the_hook_would_not_run(
    world: CliWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if this Codex let a user's state entry outrank seamline's: the check, asked with the
    # run's own CODEX_HOME, must see the hook disabled, and nothing is started.
    monkeypatch.setattr(codex_hooks, "FORCE_ENABLED", False)
    (world.home / ".codex" / "config.toml").write_text(DISABLING)
    marker = world.workspace / "marker"
    with AgentOpenAI(shell(f"touch {marker}")) as fake:
        events = await one_turn(fake, world, deny_touch(world, "Bash"), warm="false")
        assert fake.model_requests() == []
    errors = [e for e in events if isinstance(e, Error)]
    assert errors and "approval hook would not run" in errors[0].message, events
    assert "lists the hook as disabled" in errors[0].message
    assert one_complete(events).outcome == "failed"
    assert not marker.exists()


@run_async
async def test_turn_two_of_a_session_without_a_store_keeps_its_hook(world: CliWorld) -> None:
    marker = world.workspace / "marker"
    with AgentOpenAI([*shell("echo hello"), *shell(f"touch {marker}")]) as fake:
        options = {
            "executable": cli_path("codex"),
            "base_url": fake.base_url,
            "sandbox": "danger-full-access",
            "warm": "false",  # a process per turn: each turn serves its own socket
        }
        codex = CodexProvider(model=MODEL, options=options)
        session = await codex.open(workspace=world.workspace, approval=deny_touch(world, "Bash"))  # no store
        try:
            first = await collect(session, "one")
            second = await collect(session, "two")
        finally:
            await codex.close(session)
    assert [d.decision for d in first if isinstance(d, PermissionDecision)] == ["allow"], first
    assert "hello" in " ".join(e.output for e in first if isinstance(e, ToolResult))
    assert_denied_by_rule(second, marker, said_in_result=True)
