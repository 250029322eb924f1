"""The Gemini CLI's own tool calls go through seamline's permission service: a BeforeTool
hook in a system settings file of seamline's (the layer above the user's) asks over a unix
socket before each call. The CLI reads that file only from a folder that is root's all the
way up (so the hook is given outside the envelope only when seamline runs as root; inside,
see tests/sandbox/test_envelope_gemini_cli.py); where it cannot be, the CLI runs without
shell or write tools. The real program against the fake Gemini API on 127.0.0.1."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from seamline.events import Error, Event, PermissionDecision, Raw, ToolResult
from seamline.providers.agent_clis.gemini_cli import GeminiCliProvider
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


def _not_roots(folder: Path) -> None:
    """Make ``folder`` (the CLI's private settings folder) a user's, not root's, as it is for
    everyone who does not run seamline as root."""
    if os.geteuid() == 0:
        os.chown(folder, 1000, 1000)


@run_async
async def test_where_the_cli_would_skip_the_hook_it_runs_without_shell_or_write_tools(
    world: CliWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The CLI reads a system settings file only when every folder above it is root's; where
    # the hook cannot be given, yolo would run the call unapproved: default mode has no shell.
    monkeypatch.setenv("HOME", str(world.home))
    _not_roots(Path(os.environ["XDG_RUNTIME_DIR"]))
    marker = world.workspace / "marker"
    service = PermissionService(workspace=world.workspace, yes=True)
    with FakeGemini(shell_script(f"touch {marker}"), fallback={"text": "side"}) as fake:
        events = await _turn(fake, world, service)
        assert fake.model_requests(), "the CLI was started"
    notices = [e for e in events if isinstance(e, Raw) and isinstance(e.payload, dict) and "notice" in e.payload]
    assert notices and "no shell or write tools" in notices[0].payload["notice"], events
    assert one_complete(events).outcome == "completed"
    assert not marker.exists()


@run_async
async def test_an_explicit_yolo_where_the_hook_cannot_be_given_is_refused(
    world: CliWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    _not_roots(Path(os.environ["XDG_RUNTIME_DIR"]))
    marker = world.workspace / "marker"
    service = PermissionService(workspace=world.workspace, yes=True)
    with FakeGemini(shell_script(f"touch {marker}"), fallback={"text": "side"}) as fake:
        options = {"executable": cli_path("gemini"), "base_url": fake.root_url, "approval_mode": "yolo"}
        gemini = GeminiCliProvider(model=MODEL, options=options)
        session = await gemini.open(workspace=world.workspace, approval=service)
        try:
            events = await collect(session, "do it")
        finally:
            await gemini.close(session)
        assert fake.model_requests() == []
    errors = [e for e in events if isinstance(e, Error)]
    assert errors and "approval_mode=yolo would run the CLI's tools without seamline's approval" in errors[0].message
    assert one_complete(events).outcome == "failed"
    assert not marker.exists()
