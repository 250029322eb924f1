"""The Gemini CLI's own tool calls go through seamline's permission service: a BeforeTool
hook in a system settings file of seamline's (the layer above the user's) asks over a unix
socket before each call. The real program against the fake Gemini API on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import pytest

from seamline.events import Error, Event, PermissionDecision, ToolResult
from seamline.providers.gemini_cli import GeminiCliProvider
from seamline.sessions.rules import PermissionRules
from seamline.tools.permissions import PermissionService
from tests.fakes.gemini_api import FakeGemini
from tests.providers.agent_cli_support import (
    CliWorld,
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


def provider(fake: FakeGemini) -> GeminiCliProvider:
    options = {"executable": cli_path("gemini"), "base_url": fake.root_url, "max_retries": "0"}
    return GeminiCliProvider(model=MODEL, options=options)


def shell_script(command: str) -> list[dict[str, object]]:
    return [{"tool_calls": [{"name": "run_shell_command", "arguments": {"command": command}}]}, {"text": "Done."}]


async def _turn(fake: FakeGemini, world: CliWorld, service: PermissionService) -> list[Event]:
    gemini = provider(fake)
    session = await gemini.open(workspace=world.workspace, approval=service)
    try:
        return await collect(session, "do it")
    finally:
        await gemini.close(session)


@run_async
async def test_stored_deny_rule_refuses_the_gemini_clis_own_shell_call(world: CliWorld) -> None:
    marker = world.workspace / "marker"
    rules = PermissionRules(":memory:")
    rules.add("deny", tool="run_shell_command", pattern="command=touch*")
    # --yes, and the CLI runs in yolo mode: only seamline's stored rule can refuse the call.
    service = PermissionService(rules=rules, workspace=world.workspace, yes=True)
    with FakeGemini(shell_script(f"touch {marker}"), fallback={"text": "side"}) as fake:
        events = await _turn(fake, world, service)
    decisions = [e for e in events if isinstance(e, PermissionDecision)]
    assert [d.decision for d in decisions] == ["deny"] and "denied by rule" in decisions[0].reason, events
    results = [e for e in events if isinstance(e, ToolResult)]
    assert results and results[0].is_error, events
    assert one_complete(events).outcome == "completed"
    assert not marker.exists()


@run_async
async def test_hard_denial_refuses_rm_rf_outside_even_with_yes(world: CliWorld, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep\n")
    service = PermissionService(workspace=world.workspace, yes=True)
    with FakeGemini(shell_script(f"rm -rf {outside}"), fallback={"text": "side"}) as fake:
        events = await _turn(fake, world, service)
    decisions = [e for e in events if isinstance(e, PermissionDecision)]
    assert [d.decision for d in decisions] == ["deny"] and "hard denial" in decisions[0].reason
    assert (outside / "keep.txt").read_text() == "keep\n"


@run_async
async def test_an_allowed_call_runs(world: CliWorld) -> None:
    marker = world.workspace / "marker"
    service = PermissionService(workspace=world.workspace, yes=True)
    with FakeGemini(shell_script(f"touch {marker}"), fallback={"text": "side"}) as fake:
        events = await _turn(fake, world, service)
    assert [e.decision for e in events if isinstance(e, PermissionDecision)] == ["allow"]
    assert marker.exists()


@run_async
async def test_without_a_private_folder_the_cli_is_not_started(
    world: CliWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The CLI ignores a settings file under /tmp: the hook could not be given, so nothing runs.
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "shared"))
    marker = world.workspace / "marker"
    service = PermissionService(workspace=world.workspace, yes=True)
    with FakeGemini(shell_script(f"touch {marker}"), fallback={"text": "side"}) as fake:
        events = await _turn(fake, world, service)
        assert fake.model_requests() == []
    errors = [e for e in events if isinstance(e, Error)]
    assert errors and "approval hook needs a folder only you can write" in errors[0].message, events
    assert one_complete(events).outcome == "failed"
    assert not marker.exists()
