"""Codex, the real program, run whole inside the envelope (`--sandbox bwrap`) against the
fake OpenAI Responses API on 127.0.0.1: a write outside the workspace fails, a server not
on the allowlist is unreachable, the model endpoint works and the turn completes; a stored
deny rule refuses its shell call there too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from seamline.events import TextDelta, ToolResult
from seamline.providers.agent_clis.codex import CodexProvider
from seamline.transport.subprocess import group_members
from tests.fakes.openai_api import FakeOpenAI
from tests.providers.agent_cli_support import ROOT, CliWorld, cli_path, collect, make_world, one_complete, run_async
from tests.sandbox.envelope_support import (
    EnvelopedRun,
    check_revert_undoes_a_write,
    json_events,
    reach_command,
    refused,
    second_server,
    tool_outputs,
)

pytestmark = pytest.mark.real
MODEL = "gpt-5"


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bwrap_ready: None) -> CliWorld:
    return make_world(tmp_path, monkeypatch)


def seamline_run(fake: FakeOpenAI, world: CliWorld, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [
        sys.executable, "-m", "seamline", "run", "--provider", "codex", "--model", MODEL, "--json",
        "-o", f"executable={cli_path('codex')}", "-o", f"base_url={fake.base_url}", "-o", "max_retries=0",
        "-o", "turn_timeout=120", "--workspace", str(world.workspace), *extra, "Do the task.",
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=ROOT, check=False)


def shell(command: str) -> dict[str, object]:
    return {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": command}}]}


@pytest.mark.parametrize("warm", ["true", "false"])  # codex app-server, or codex exec
def test_a_write_outside_the_workspace_fails_and_creates_nothing(world: CliWorld, tmp_path: Path, warm: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    script = [shell(f"touch {outside}/escaped; touch inside.txt"), {"text": "Done."}]
    with FakeOpenAI(script) as fake:
        done = seamline_run(fake, world, "--sandbox", "bwrap", "-o", f"warm={warm}")
    assert done.returncode == 0, done.stderr
    events = json_events(done.stdout)
    assert not (outside / "escaped").exists()
    assert "cannot touch" in tool_outputs(events)
    assert (world.workspace / "inside.txt").is_file()
    assert events[-1]["type"] == "complete" and events[-1]["outcome"] == "completed"


def test_a_server_not_on_the_allowlist_is_unreachable_while_the_model_endpoint_works(world: CliWorld) -> None:
    with second_server() as (port, hits):
        with FakeOpenAI([shell(reach_command(port)), {"text": "Done."}]) as fake:
            done = seamline_run(fake, world, "--sandbox", "bwrap")
            asked = len(fake.model_requests())
    assert done.returncode == 0, done.stderr
    events = json_events(done.stdout)
    output = tool_outputs(events)
    assert hits == [] and "SECOND-SERVER-REACHED" not in output
    assert "Failed to connect" in output and "not on the sandbox's allowlist" in output
    assert {"host": "127.0.0.1", "port": port, "method": "GET", "egress": "refused"} in refused(events)
    assert asked == 2
    assert events[-1]["outcome"] == "completed" and events[-1]["text"] == "Done."


def test_a_stored_deny_rule_holds_inside_the_envelope(world: CliWorld, tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    marker = world.workspace / "marker"
    env = dict(os.environ, SEAMLINE_STORE=str(store))
    seamline = [sys.executable, "-m", "seamline"]
    add = [*seamline, "permissions", "add", "deny", "--tool", "Bash", "--pattern", "command=touch*"]
    added = subprocess.run(add, capture_output=True, text=True, timeout=60, cwd=ROOT, env=env, check=False)
    assert added.returncode == 0, added.stderr
    with FakeOpenAI([shell(f"touch {marker}"), {"text": "Done."}]) as fake:
        argv = [
            *seamline, "run", "--provider", "codex", "--model", MODEL, "--json", "--store", str(store),
            "-o", f"executable={cli_path('codex')}", "-o", f"base_url={fake.base_url}", "-o", "max_retries=0",
            "--sandbox", "bwrap", "--workspace", str(world.workspace), "Do it",
        ]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=ROOT, env=env, check=False)
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    decisions = [e for e in events if e["type"] == "permission_decision"]
    assert [d["decision"] for d in decisions] == ["deny"] and "denied by rule" in decisions[0]["reason"], events
    assert events[-1]["type"] == "complete" and events[-1]["outcome"] == "completed"
    assert not marker.exists()


def test_revert_undoes_a_file_it_wrote_inside_the_envelope(world: CliWorld, tmp_path: Path) -> None:
    check_revert_undoes_a_write(_enveloped(world), shell, workspace=world.workspace, store=tmp_path / "store.db")


def _enveloped(world: CliWorld) -> EnvelopedRun:
    def run(script: list[dict[str, object]], store: Path) -> subprocess.CompletedProcess[str]:
        with FakeOpenAI(script) as fake:
            return seamline_run(fake, world, "--sandbox", "bwrap", "--store", str(store))

    return run


@run_async
async def test_a_warm_session_keeps_one_process_inside_the_envelope(world: CliWorld, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    script = [{"text": "One."}, shell(f"touch {outside}/escaped; touch inside.txt"), {"text": "Two."}]
    with FakeOpenAI(script) as fake:
        options = {"executable": cli_path("codex"), "base_url": fake.base_url, "max_retries": "0", "sandbox": "bwrap"}
        codex = CodexProvider(model=MODEL, options=options)
        session = await codex.open(workspace=world.workspace)
        first = await collect(session, "one")
        proc = session.state["cli_process"]
        second = await collect(session, "two")
        same = session.state["cli_process"] is proc
        await codex.close(session)
    assert one_complete(first).text == "One." and one_complete(second).text == "Two." and same
    # the warm process is the enveloped one (bwrap, behind the launcher that joins the cgroups)
    assert any(arg.endswith("bwrap") for arg in proc.argv[:8])
    assert any(isinstance(e, TextDelta) for e in first)  # text deltas: only codex app-server streams them
    outputs = " ".join(e.output for e in second if isinstance(e, ToolResult))
    assert "cannot touch" in outputs and not (outside / "escaped").exists()
    assert (world.workspace / "inside.txt").is_file()
    assert group_members(proc.pgid) == []
