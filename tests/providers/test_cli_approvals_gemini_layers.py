"""The Gemini CLI merges ``hooksConfig.disabled`` as a union over its settings layers, so
any layer naming seamline's approval hook used to switch it off: the user's own
``~/.gemini/settings.json``, or a workspace's ``.gemini/settings.json`` (trusted: seamline
passes ``--skip-trust``). The hook's name is now new for every start of the CLI, and a
setting that would keep every hook from running is refused before the CLI starts. The real
program against the fake Gemini API on 127.0.0.1 (outside the envelope; inside, see
tests/sandbox/test_envelope_gemini_hook_layers.py).

Also here: the second turn of a session opened without a store (no edit journal). The first
turn's clean-up used to run late, when its generator was collected, in the middle of the
next turn, and took that turn's approval mode and hook socket with it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from seamline.events import Error, Event, PermissionDecision, ToolResult
from seamline.providers.agent_clis.gemini_cli import GeminiCliProvider
from seamline.sessions.rules import PermissionRules
from seamline.tools.permissions import PermissionService
from tests.fakes._http import FakeAPI
from tests.fakes.gemini_api import FakeGemini
from tests.providers.agent_cli_support import CliWorld, cli_path, collect, make_gemini_world, one_complete, run_async
from tests.providers.hook_layer_support import assert_denied_by_rule, deny_touch

pytestmark = pytest.mark.real
MODEL = "gemini-2.5-flash"
OLD_NAME = "seamline-approval"


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> CliWorld:
    return make_gemini_world(tmp_path, monkeypatch, request)


def shell_script(command: str) -> list[dict[str, object]]:
    return [{"tool_calls": [{"name": "run_shell_command", "arguments": {"command": command}}]}, {"text": "Done."}]


def add_settings(path: Path, extra: dict[str, Any]) -> None:
    """Merge ``extra`` into the settings file at ``path`` (made if missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    found = json.loads(path.read_text()) if path.is_file() else {}
    path.write_text(json.dumps(_merged(found, extra)))


def _merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        old = out.get(key)
        out[key] = _merged(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
    return out


async def one_turn(fake: FakeAPI, world: CliWorld, service: PermissionService) -> list[Event]:
    options = {"executable": cli_path("gemini"), "base_url": fake.root_url, "max_retries": "0"}
    gemini = GeminiCliProvider(model=MODEL, options=options)
    session = await gemini.open(workspace=world.workspace, approval=service)
    try:
        return await collect(session, "do it")
    finally:
        await gemini.close(session)


@run_async
async def test_the_users_settings_naming_the_hook_as_disabled_do_not_switch_it_off(world: CliWorld) -> None:
    add_settings(world.home / ".gemini" / "settings.json", {"hooksConfig": {"disabled": [OLD_NAME]}})
    marker = world.workspace / "marker"
    with FakeGemini(shell_script(f"touch {marker}"), fallback={"text": "side"}) as fake:
        events = await one_turn(fake, world, deny_touch(world, "run_shell_command"))
    assert_denied_by_rule(events, marker)


@pytest.mark.parametrize("trusted_by", ["environment", "user_settings"])
@run_async
async def test_a_trusted_workspaces_settings_naming_the_hook_as_disabled_do_not_switch_it_off(
    world: CliWorld, monkeypatch: pytest.MonkeyPatch, trusted_by: str
) -> None:
    # The CLI reads its settings before --skip-trust takes effect: a workspace's settings are
    # merged when the environment or the user's settings trust it.
    if trusted_by == "environment":
        monkeypatch.setenv("GEMINI_CLI_TRUST_WORKSPACE", "true")
    else:
        add_settings(world.home / ".gemini" / "settings.json", {"security": {"folderTrust": {"enabled": False}}})
    add_settings(world.workspace / ".gemini" / "settings.json", {"hooksConfig": {"disabled": [OLD_NAME]}})
    marker = world.workspace / "marker"
    with FakeGemini(shell_script(f"touch {marker}"), fallback={"text": "side"}) as fake:
        events = await one_turn(fake, world, deny_touch(world, "run_shell_command"))
    assert_denied_by_rule(events, marker)


@run_async
async def test_hooks_turned_off_in_the_users_and_the_workspaces_settings_stay_on(
    world: CliWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    # seamline's system layer is merged last: its hooksConfig.enabled=true outranks both.
    monkeypatch.setenv("GEMINI_CLI_TRUST_WORKSPACE", "true")
    off = {"hooksConfig": {"enabled": False}}
    add_settings(world.home / ".gemini" / "settings.json", off)
    add_settings(world.workspace / ".gemini" / "settings.json", off)
    marker = world.workspace / "marker"
    with FakeGemini(shell_script(f"touch {marker}"), fallback={"text": "side"}) as fake:
        events = await one_turn(fake, world, deny_touch(world, "run_shell_command"))
    assert_denied_by_rule(events, marker)


@run_async
async def test_the_hooks_name_is_new_for_every_start_of_the_cli(world: CliWorld) -> None:
    # Each turn is a new process: a name learnt in one turn disables nothing in the next.
    read = "cat $GEMINI_CLI_SYSTEM_SETTINGS_PATH"
    service = PermissionService(workspace=world.workspace, yes=True)
    script = [*shell_script(read), *shell_script(read)]
    with FakeGemini(script, fallback={"text": "side"}) as fake:
        options = {"executable": cli_path("gemini"), "base_url": fake.root_url, "max_retries": "0"}
        gemini = GeminiCliProvider(model=MODEL, options=options)
        session = await gemini.open(workspace=world.workspace, approval=service)
        try:
            turns = [await collect(session, "one"), await collect(session, "two")]
        finally:
            await gemini.close(session)
    names = []
    for events in turns:
        output = " ".join(e.output for e in events if isinstance(e, ToolResult))
        names += re.findall(rf'"name":\s*"({OLD_NAME}[^"]*)"', output)
    assert len(names) == 2 and names[0] != names[1], names
    assert all(re.fullmatch(rf"{OLD_NAME}-[0-9a-f]{{32}}", n) for n in names), names


@run_async
async def test_restricted_mode_that_would_skip_every_hook_is_refused(
    world: CliWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GEMINI_RESTRICTED_MODE makes the workspace untrusted whatever --skip-trust says, and the
    # CLI then loads no hook at all; without folder trust it does not refuse to run either.
    monkeypatch.setenv("GEMINI_RESTRICTED_MODE", "true")
    add_settings(world.home / ".gemini" / "settings.json", {"security": {"folderTrust": {"enabled": False}}})
    marker = world.workspace / "marker"
    with FakeGemini(shell_script(f"touch {marker}"), fallback={"text": "side"}) as fake:
        events = await one_turn(fake, world, deny_touch(world, "run_shell_command"))
        assert fake.model_requests() == []
    errors = [e for e in events if isinstance(e, Error)]
    assert errors and "GEMINI_RESTRICTED_MODE" in errors[0].message, events
    assert one_complete(events).outcome == "failed"
    assert not marker.exists()


@run_async
async def test_a_dotenv_file_cannot_put_the_cli_in_restricted_mode(world: CliWorld) -> None:
    # The CLI loads a .env file (the workspace's, once the user's settings trust every folder)
    # into its environment: GEMINI_RESTRICTED_MODE=true there made it load no hook, and its
    # read tools ran with no decision of seamline's (default mode offers only those).
    add_settings(world.home / ".gemini" / "settings.json", {"security": {"folderTrust": {"enabled": False}}})
    (world.workspace / ".env").write_text("GEMINI_RESTRICTED_MODE=true\n")
    rules = PermissionRules(":memory:")
    rules.add("deny", tool="read_file", pattern="path=*notes*")
    service = PermissionService(rules=rules, workspace=world.workspace, yes=True)
    script: list[dict[str, object]] = [
        {"tool_calls": [{"name": "read_file", "arguments": {"file_path": "notes.txt"}}]},
        {"text": "Done."},
    ]
    with FakeGemini(script, fallback={"text": "side"}) as fake:
        events = await one_turn(fake, world, service)
    decisions = [e for e in events if isinstance(e, PermissionDecision)]
    assert [d.decision for d in decisions] == ["deny"] and "denied by rule" in decisions[0].reason, events
    assert "pelican" not in " ".join(e.output for e in events if isinstance(e, ToolResult))
    assert one_complete(events).outcome == "completed"


@run_async
async def test_turn_two_of_a_session_without_a_store_keeps_its_approval_mode_and_hook(world: CliWorld) -> None:
    marker = world.workspace / "marker"
    script = [*shell_script("echo hello"), *shell_script(f"touch {marker}")]
    with FakeGemini(script, fallback={"text": "side"}) as fake:
        options = {"executable": cli_path("gemini"), "base_url": fake.root_url, "max_retries": "0"}
        gemini = GeminiCliProvider(model=MODEL, options=options)
        session = await gemini.open(
            workspace=world.workspace, approval=deny_touch(world, "run_shell_command")
        )  # no store
        try:
            first = await collect(session, "one")
            second = await collect(session, "two")
        finally:
            await gemini.close(session)
    assert [d.decision for d in first if isinstance(d, PermissionDecision)] == ["allow"], first
    assert "hello" in " ".join(e.output for e in first if isinstance(e, ToolResult))
    assert_denied_by_rule(second, marker)
