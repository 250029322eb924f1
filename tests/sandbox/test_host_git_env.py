"""The host's `git` that seamline starts runs no program a workspace's repository names:
an unsandboxed shell command and an agent CLI's own shell tool get `core.fsmonitor=false`
and no submodule recursion (issue 28: what a sandboxed run wrote must not run on the host)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from seamline.transport.env import HOST_GIT_CONFIG, host_git_environment, program_env
from tests.providers.agent_cli_support import ROOT, AgentAnthropic, CliWorld, cli_path, make_world

pytestmark = pytest.mark.skipif(not Path("/usr/bin/git").exists(), reason="git is not installed")


def _planted_repo(workspace: Path, marker: Path) -> None:
    """A repository whose config names a program git runs on `git status` (fsmonitor)."""
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    hook = workspace.parent / "fsmonitor-hook"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    subprocess.run(["git", "-C", str(workspace), "config", "core.fsmonitor", str(hook)], check=True)
    # The plant works on a git started without seamline's environment.
    subprocess.run(["git", "-C", str(workspace), "status"], capture_output=True, check=False)
    assert marker.exists(), "this git does not run core.fsmonitor: the test would prove nothing"
    marker.unlink()


def test_program_env_adds_the_host_git_config_once() -> None:
    env = program_env({"A": "1"})
    pairs = [(env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"]) for i in range(int(env["GIT_CONFIG_COUNT"]))]
    assert set(HOST_GIT_CONFIG) <= set(pairs) and env["A"] == "1"
    assert host_git_environment(env) == env  # a seamline started by seamline adds nothing twice


def test_an_unsandboxed_shell_command_does_not_run_the_repositorys_fsmonitor(
    tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]
) -> None:
    workspace, marker = tmp_path / "ws", tmp_path / "ran"
    _planted_repo(workspace, marker)
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps([{"tool_calls": [{"name": "shell", "arguments": {"command": "git status"}}]}, {"text": "ok"}])
    )
    done = subprocess.run(
        [*seamline_cmd, "run", "--json", "--yes", "-p", "scripted", "-o", f"script={script}", "-w", str(workspace), "x"],
        env=cli_env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = next(json.loads(line) for line in done.stdout.splitlines() if '"tool_result"' in line)
    assert "exit code 0" in result["output"], result  # git status ran
    assert not marker.exists()


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliWorld:
    return make_world(tmp_path, monkeypatch)


@pytest.mark.real
def test_claude_codes_own_shell_tool_does_not_run_the_repositorys_fsmonitor(world: CliWorld, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    _planted_repo(world.workspace, marker)
    script = [{"tool_calls": [{"name": "Bash", "arguments": {"command": "git status"}}]}, {"text": "Clean."}]
    with AgentAnthropic(script, fallback={"text": "side"}) as fake:
        argv = [
            sys.executable, "-m", "seamline", "run", "--provider", "claude-code", "--model", "claude-sonnet-4-5", "--json", "--yes",
            "-o", f"executable={cli_path('claude')}", "-o", f"base_url={fake.root_url}", "-o", "max_retries=0",
            "--workspace", str(world.workspace), "status?",
        ]  # fmt: skip
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=120, cwd=ROOT, env=dict(os.environ), check=False
        )
    assert done.returncode == 0, done.stderr
    results = [json.loads(line) for line in done.stdout.splitlines() if '"tool_result"' in line]
    assert results and "No commits yet" in results[0]["output"], done.stdout[-3000:]  # the agent's git status ran
    assert not marker.exists()
