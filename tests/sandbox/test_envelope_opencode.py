"""`opencode serve` (the real program) run whole inside the envelope (`--sandbox bwrap`),
its model pointed at the fake OpenAI-compatible server on 127.0.0.1: seamline reaches the
server inside through the bridge; a write outside the workspace fails, a server not on the
allowlist is unreachable, the model endpoint works and the turn completes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.providers.agent_cli_support import ROOT, CliWorld, make_world
from tests.providers.test_opencode_real import OpenCodeOpenAI, opencode_path
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


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bwrap_ready: None) -> CliWorld:
    return make_world(tmp_path, monkeypatch)


def seamline_run(fake: OpenCodeOpenAI, world: CliWorld, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [
        sys.executable, "-m", "seamline", "run", "--provider", "opencode", "--json", "--yes",
        "-o", f"executable={opencode_path()}", "-o", f"base_url={fake.base_url}", "-o", "turn_timeout=120",
        "--workspace", str(world.workspace), *extra, "Do the task.",
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=240, cwd=ROOT, check=False)


def shell(command: str) -> dict[str, object]:
    return {"tool_calls": [{"name": "bash", "arguments": {"command": command, "description": "try"}}]}


def test_a_write_outside_the_workspace_fails_and_creates_nothing(world: CliWorld, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    script = [shell(f"touch {outside}/escaped; touch inside.txt"), {"text": "Done."}]
    with OpenCodeOpenAI(script, fallback={"text": "A title"}) as fake:
        done = seamline_run(fake, world, "--sandbox", "bwrap")
    assert done.returncode == 0, done.stderr
    events = json_events(done.stdout)
    assert not (outside / "escaped").exists()
    assert "cannot touch" in tool_outputs(events)
    assert (world.workspace / "inside.txt").is_file()
    assert events[-1]["type"] == "complete" and events[-1]["outcome"] == "completed"


def test_a_server_not_on_the_allowlist_is_unreachable_while_the_model_endpoint_works(world: CliWorld) -> None:
    with second_server() as (port, hits):
        with OpenCodeOpenAI([shell(reach_command(port)), {"text": "Done."}], fallback={"text": "A title"}) as fake:
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
        _enveloped(world), shell, tool="bash", workspace=world.workspace, store=tmp_path / "store.db"
    )


def test_revert_undoes_a_file_it_wrote_inside_the_envelope(world: CliWorld, tmp_path: Path) -> None:
    check_revert_undoes_a_write(_enveloped(world), shell, workspace=world.workspace, store=tmp_path / "store.db")


def _enveloped(world: CliWorld) -> EnvelopedRun:
    def run(script: list[dict[str, object]], store: Path) -> subprocess.CompletedProcess[str]:
        with OpenCodeOpenAI(script, fallback={"text": "A title"}) as fake:
            return seamline_run(fake, world, "--sandbox", "bwrap", "--store", str(store))

    return run
