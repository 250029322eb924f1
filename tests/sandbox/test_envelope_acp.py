"""An ACP agent (claude-agent-acp, the real program) run whole inside the envelope
(`--sandbox bwrap`) against the fake Anthropic API on 127.0.0.1: a write outside the
workspace fails, a server not on the allowlist is unreachable, the model endpoint works and
the turn completes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.acp_capture import ACP_BIN, SideAnthropic
from tests.providers.agent_cli_support import ROOT, CliWorld, make_world
from tests.sandbox.envelope_support import (
    EnvelopedRun,
    check_a_deny_rule_holds,
    check_revert_undoes_a_write,
    envelope_summary,
    json_events,
    reach_command,
    refused,
    second_server,
    tool_outputs,
)

pytestmark = pytest.mark.real
AGENT = ACP_BIN / "claude-agent-acp"


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bwrap_ready: None) -> CliWorld:
    if not (AGENT.exists() and os.access(AGENT, os.X_OK)):
        pytest.fail(f"{AGENT} is not installed; run: bash scripts/system/45-acp-opencode.sh")
    made = make_world(tmp_path, monkeypatch)
    monkeypatch.setenv("CLAUDE_CODE_MAX_RETRIES", "0")
    return made


def seamline_run(fake: SideAnthropic, world: CliWorld, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [
        sys.executable, "-m", "seamline", "run", "--provider", "acp", "--json", "--yes",
        "-o", f"command={AGENT}", "-o", "turn_timeout=120",
        "--workspace", str(world.workspace), *extra, "Do the task.",
    ]  # fmt: skip
    env = {**os.environ, "ANTHROPIC_BASE_URL": fake.root_url, "IS_SANDBOX": "1"}  # as root (CI)
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=ROOT, env=env, check=False)


def shell(command: str) -> dict[str, object]:
    return {"tool_calls": [{"name": "Bash", "arguments": {"command": command}}]}


def test_a_write_outside_the_workspace_fails_and_creates_nothing(world: CliWorld, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    script = [shell(f"touch {outside}/escaped; touch inside.txt"), {"text": "Done."}]
    with SideAnthropic(script, fallback={"text": "side"}) as fake:
        done = seamline_run(fake, world, "--sandbox", "bwrap")
    assert done.returncode == 0, done.stderr
    events = json_events(done.stdout)
    assert not (outside / "escaped").exists()
    assert "cannot touch" in tool_outputs(events)
    assert (world.workspace / "inside.txt").is_file()
    assert events[-1]["type"] == "complete" and events[-1]["outcome"] == "completed"


def test_a_server_not_on_the_allowlist_is_unreachable_while_the_model_endpoint_works(world: CliWorld) -> None:
    with second_server() as (port, hits):
        with SideAnthropic([shell(reach_command(port)), {"text": "Done."}], fallback={"text": "side"}) as fake:
            done = seamline_run(fake, world, "--sandbox", "bwrap")
    assert done.returncode == 0, done.stderr
    events = json_events(done.stdout)
    output = tool_outputs(events)
    assert hits == [] and "SECOND-SERVER-REACHED" not in output
    assert "Failed to connect" in output and "not on the sandbox's allowlist" in output
    assert {"host": "127.0.0.1", "port": port, "method": "GET", "egress": "refused"} in refused(events)
    assert envelope_summary(events)["egress_refused"] == len(refused(events))
    assert events[-1]["outcome"] == "completed" and events[-1]["text"] == "Done."


def test_a_stored_deny_rule_refuses_its_shell_call_inside_the_envelope(world: CliWorld, tmp_path: Path) -> None:
    check_a_deny_rule_holds(
        _enveloped(world), shell, tool="Bash", workspace=world.workspace, store=tmp_path / "store.db"
    )


def test_revert_undoes_a_file_it_wrote_inside_the_envelope(world: CliWorld, tmp_path: Path) -> None:
    check_revert_undoes_a_write(_enveloped(world), shell, workspace=world.workspace, store=tmp_path / "store.db")


def _enveloped(world: CliWorld) -> EnvelopedRun:
    def run(script: list[dict[str, object]], store: Path) -> subprocess.CompletedProcess[str]:
        with SideAnthropic(script, fallback={"text": "side"}) as fake:
            return seamline_run(fake, world, "--sandbox", "bwrap", "--store", str(store))

    return run
