"""Claude Code, the real program, run whole inside the envelope (`--sandbox bwrap`) against
the fake Anthropic API on 127.0.0.1: the escape from issue 28 (the model asks Bash to write
outside the workspace), the egress allowlist, and the refusal when it cannot be isolated."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from seamline.errors import SandboxViolation
from tests.providers.agent_cli_support import ROOT, AgentAnthropic, CliWorld, cli_path, make_world
from tests.sandbox.envelope_support import (
    EnvelopedRun,
    check_a_deny_rule_holds,
    check_revert_undoes_a_write,
    json_events,
    reach_command,
    refused,
    second_server,
    tool_outputs,
)

pytestmark = pytest.mark.real
MODEL = "claude-sonnet-4-5"


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bwrap_ready: None) -> CliWorld:
    return make_world(tmp_path, monkeypatch)


def seamline_run(fake: AgentAnthropic, world: CliWorld, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [
        sys.executable, "-m", "seamline", "run", "--provider", "claude-code", "--model", MODEL, "--json",
        "-o", f"executable={cli_path('claude')}", "-o", f"base_url={fake.root_url}", "-o", "max_retries=0",
        "--workspace", str(world.workspace), *extra, "Do the task.",
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=ROOT, check=False)


def shell(command: str) -> dict[str, object]:
    return {"tool_calls": [{"name": "Bash", "arguments": {"command": command}}]}


def test_bash_touch_outside_the_workspace_fails_and_creates_nothing(world: CliWorld, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    script = [
        {"tool_calls": [{"name": "Bash", "arguments": {"command": f"touch {outside}/escaped; touch inside.txt"}}]},
        {"text": "Done."},
    ]
    with AgentAnthropic(script, fallback={"text": "side"}) as fake:
        done = seamline_run(fake, world, "--sandbox", "bwrap")
    assert done.returncode == 0, done.stderr
    events = json_events(done.stdout)
    assert not (outside / "escaped").exists()
    assert "cannot touch" in tool_outputs(events)
    assert (world.workspace / "inside.txt").is_file()  # the workspace itself is writable, at its real path
    assert events[-1]["type"] == "complete" and events[-1]["outcome"] == "completed"


def test_a_server_not_on_the_allowlist_is_unreachable_while_the_model_endpoint_works(world: CliWorld) -> None:
    with second_server() as (port, hits):
        script = [{"tool_calls": [{"name": "Bash", "arguments": {"command": reach_command(port)}}]}, {"text": "Done."}]
        with AgentAnthropic(script, fallback={"text": "side"}) as fake:
            done = seamline_run(fake, world, "--sandbox", "bwrap")
            turns = fake.turn_requests()
    assert done.returncode == 0, done.stderr
    events = json_events(done.stdout)
    output = tool_outputs(events)
    assert hits == [] and "SECOND-SERVER-REACHED" not in output
    assert "Failed to connect" in output  # direct: nothing listens on that port inside
    assert "not on the sandbox's allowlist" in output  # through the proxy: 403
    assert {"host": "127.0.0.1", "port": port, "method": "GET", "egress": "refused"} in refused(events)
    summary = [e["payload"] for e in events if e["type"] == "raw" and "egress_refused" in e.get("payload", {})]
    assert summary and summary[-1]["egress_refused"] >= 1
    assert len(turns) == 2  # the model endpoint answered both model calls of the turn
    assert events[-1]["outcome"] == "completed" and events[-1]["text"] == "Done."


def test_allow_host_lets_that_host_through_the_proxy(world: CliWorld) -> None:
    with second_server() as (port, hits):
        command = f'env -u NO_PROXY -u no_proxy curl -sS -m 10 -x "$HTTP_PROXY" http://127.0.0.1:{port}/allowed'
        script = [{"tool_calls": [{"name": "Bash", "arguments": {"command": command}}]}, {"text": "Done."}]
        with AgentAnthropic(script, fallback={"text": "side"}) as fake:
            done = seamline_run(fake, world, "--sandbox", "bwrap", "--allow-host", f"127.0.0.1:{port}")
    assert done.returncode == 0, done.stderr
    assert hits == ["/allowed"]
    assert "SECOND-SERVER-REACHED" in tool_outputs(json_events(done.stdout))


def test_sandbox_that_cannot_isolate_exits_2_and_runs_nothing(world: CliWorld, tmp_path: Path) -> None:
    with AgentAnthropic([{"text": "never"}], fallback={"text": "side"}) as fake:
        argv = [
            sys.executable, "-m", "seamline", "run", "--provider", "claude-code", "--sandbox", "bwrap",
            "-o", f"executable={cli_path('claude')}", "-o", f"base_url={fake.root_url}",
            "--workspace", str(world.workspace), "hello",
        ]  # fmt: skip
        env = {**_env(), "SEAMLINE_BWRAP": str(tmp_path / "no-bwrap")}
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=ROOT, env=env, check=False)
        seen = fake.model_requests()
    assert done.returncode == 2, done.stderr
    assert "cannot isolate" in done.stderr and "Fix:" in done.stderr and "Traceback" not in done.stderr
    assert seen == [] and done.stdout == ""


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


def test_agent_sandbox_puts_the_cli_in_the_envelope(world: CliWorld, tmp_path: Path) -> None:
    from seamline import Agent

    outside = tmp_path / "outside"
    outside.mkdir()
    script = [{"tool_calls": [{"name": "Bash", "arguments": {"command": f"touch {outside}/escaped"}}]}, {"text": "Ok."}]
    with AgentAnthropic(script, fallback={"text": "side"}) as fake:
        options = {"executable": cli_path("claude"), "base_url": fake.root_url, "max_retries": "0"}
        agent = Agent(provider="claude-code", model=MODEL, options=options, workspace=world.workspace, sandbox="bwrap")
        result = agent.run_sync("Do the task.")
    assert result.text == "Ok."
    assert not (outside / "escaped").exists()
    with pytest.raises(SandboxViolation, match="runs its own programs"):
        Agent(provider="claude-code", options=options, workspace=world.workspace, sandbox="container")._backend()


def test_a_pipeline_run_with_sandbox_puts_the_cli_in_the_envelope(world: CliWorld, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    script = [{"tool_calls": [{"name": "Bash", "arguments": {"command": f"touch {outside}/escaped"}}]}, {"text": "Ok."}]
    with AgentAnthropic(script, fallback={"text": "side"}) as fake:
        done = seamline_run(fake, world, "--sandbox", "bwrap", "--pipeline", "single")
    assert done.returncode == 0, done.stderr
    assert not (outside / "escaped").exists()


def test_a_stored_deny_rule_refuses_its_shell_call_inside_the_envelope(world: CliWorld, tmp_path: Path) -> None:
    check_a_deny_rule_holds(
        _enveloped(world), shell, tool="Bash", workspace=world.workspace, store=tmp_path / "store.db"
    )


def test_revert_undoes_a_file_it_wrote_inside_the_envelope(world: CliWorld, tmp_path: Path) -> None:
    check_revert_undoes_a_write(_enveloped(world), shell, workspace=world.workspace, store=tmp_path / "store.db")


def _enveloped(world: CliWorld) -> EnvelopedRun:
    def run(script: list[dict[str, object]], store: Path) -> subprocess.CompletedProcess[str]:
        with AgentAnthropic(script, fallback={"text": "side"}) as fake:
            return seamline_run(fake, world, "--sandbox", "bwrap", "--store", str(store))

    return run
