"""Codex's approval hook in the envelope holds against the config layers it reads there: its
private home (seeded from the user's ``~/.codex``, and writable by the model's own shell). A
stored deny rule names ``touch*``; the model's shell runs ``touch marker``: the rule decides
and the marker is never made, also on a later turn after the model's shell wrote
``[hooks.state."<key>"] enabled = false`` into the private home's ``config.toml``. A user
with no ``~/.codex`` gets a working Codex there too. The real Codex, real bubblewrap, the
fake OpenAI Responses API on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import pytest

from seamline.providers.agent_clis.codex import CodexProvider
from tests.fakes._http import FakeAPI
from tests.fakes.openai_api import FakeOpenAI
from tests.providers.agent_cli_support import CliWorld, cli_path, collect, make_world, one_complete, run_async
from tests.providers.hook_layer_support import assert_denied_by_rule, deny_touch, outputs, two_turns

pytestmark = pytest.mark.real
CODEX_KEY = "/<session-flags>/config.toml:pre_tool_use:0:0"
CODEX_DISABLING = f'[hooks.state."{CODEX_KEY}"]\nenabled = false\n'
CODEX_PLANT = (
    f"printf '%s' '{CODEX_DISABLING}' >> \"$CODEX_HOME/config.toml\"; echo planted; cat \"$CODEX_HOME/config.toml\""
)


@pytest.fixture
def codex_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bwrap_ready: None) -> CliWorld:
    return make_world(tmp_path, monkeypatch)


def codex_shell(command: str) -> list[dict[str, object]]:
    return [{"tool_calls": [{"name": "exec_command", "arguments": {"cmd": command}}]}, {"text": "Done."}]


def codex(fake: FakeAPI, *, warm: str) -> CodexProvider:
    options = {
        "executable": cli_path("codex"),
        "base_url": fake.base_url,
        "max_retries": "0",
        "sandbox": "bwrap",
        "warm": warm,
        "turn_timeout": "120",
    }
    return CodexProvider(model="gpt-5", options=options)


@run_async
async def test_codex_a_private_home_seeded_with_the_hook_disabled_keeps_it_on(codex_world: CliWorld) -> None:
    (codex_world.home / ".codex" / "config.toml").write_text(CODEX_DISABLING)  # seeds the private home
    marker = codex_world.workspace / "marker"
    with FakeOpenAI(codex_shell(f"touch {marker}")) as fake:
        provider = codex(fake, warm="false")
        session = await provider.open(workspace=codex_world.workspace, approval=deny_touch(codex_world, "Bash"))
        try:
            events = await collect(session, "do it")
        finally:
            await provider.close(session)
    assert_denied_by_rule(events, marker)


@pytest.mark.parametrize("warm", ["true", "false"])  # one app-server for both turns, or codex exec resume
@run_async
async def test_codex_a_layer_the_models_shell_wrote_does_not_switch_the_hook_off_next_turn(
    codex_world: CliWorld, tmp_path: Path, warm: str
) -> None:
    marker = codex_world.workspace / "marker"
    script = [*codex_shell(CODEX_PLANT), *codex_shell(f"touch {marker}")]
    with FakeOpenAI(script) as fake:
        service = deny_touch(codex_world, "Bash")
        first, second = await two_turns(codex(fake, warm=warm), codex_world, service, tmp_path / "store.db")
    assert "planted" in outputs(first) and "enabled = false" in outputs(first), first
    assert_denied_by_rule(second, marker)


@run_async
async def test_codex_runs_in_the_envelope_for_a_user_with_no_codex_folder(
    codex_world: CliWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    (codex_world.home / ".codex").rmdir()
    monkeypatch.delenv("CODEX_HOME")
    marker = codex_world.workspace / "marker"
    with FakeOpenAI([*codex_shell("echo hello"), *codex_shell(f"touch {marker}")]) as fake:
        provider = codex(fake, warm="false")
        session = await provider.open(workspace=codex_world.workspace, approval=deny_touch(codex_world, "Bash"))
        try:
            first = await collect(session, "say hello")
            second = await collect(session, "now touch")
        finally:
            await provider.close(session)
    assert one_complete(first).outcome == "completed" and "hello" in outputs(first), first
    assert_denied_by_rule(second, marker)
    assert not (codex_world.home / ".codex").exists()  # nothing written into the host's home
