"""Process and memory limits on the whole envelope, with the real Claude Code against the
fake Anthropic API: the model's own Bash tool tries to start 200 processes or to allocate
1 GiB inside the envelope; the policy's ``[limits]`` (or the envelope's defaults) hold, and
the turn's envelope report counts the forks refused and the processes killed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.providers.agent_cli_support import ROOT, AgentAnthropic, CliWorld, cli_path, make_world
from tests.sandbox.envelope_support import envelope_summary, json_events, tool_outputs

pytestmark = pytest.mark.real
MODEL = "claude-sonnet-4-5"

# Starts up to N sleeping processes, stops at the first refused fork, says how many
# started, then ends them all: nothing outlives the command.
_SPAWN = """python3 -c '
import subprocess, sys
started = []
for _ in range(int(sys.argv[1])):
    try:
        started.append(subprocess.Popen(["sleep", "30"]))
    except OSError:
        break
print("STARTED", len(started))
for p in started:
    p.kill()
    p.wait()
' {n}"""
# Touches every page of 1 GiB, so it is charged to the envelope's memory.
_ALLOCATE = """python3 -c 'x = b"x" * (1 << 30); print("ALLOC" + "ATED", len(x))'; echo "exit=$?" """


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bwrap_ready: None) -> CliWorld:
    return make_world(tmp_path, monkeypatch)


def _run(world: CliWorld, command: str, *extra: str) -> tuple[subprocess.CompletedProcess[str], int]:
    script: list[dict[str, object]] = [
        {"tool_calls": [{"name": "Bash", "arguments": {"command": command}}]},
        {"text": "Done."},
    ]
    with AgentAnthropic(script, fallback={"text": "side"}) as fake:
        argv = [
            sys.executable, "-m", "seamline", "run", "--provider", "claude-code", "--model", MODEL, "--json",
            "-o", f"executable={cli_path('claude')}", "-o", f"base_url={fake.root_url}", "-o", "max_retries=0",
            "--workspace", str(world.workspace), "--sandbox", "bwrap", *extra, "Do the task.",
        ]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=ROOT, check=False)
        asked = len(fake.model_requests())
    return done, asked


def _policy(tmp_path: Path, limits: str) -> str:
    policy = tmp_path / "policy.toml"
    policy.write_text(f"[limits]\n{limits}\n")
    return str(policy)


def _started(output: str) -> int:
    lines = [line for line in output.splitlines() if line.startswith("STARTED ")]
    assert len(lines) == 1, output
    return int(lines[0].split()[1])


def _report(done: subprocess.CompletedProcess[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    assert done.returncode == 0, done.stderr
    events = json_events(done.stdout)
    assert events[-1]["type"] == "complete" and events[-1]["outcome"] == "completed", events[-1]
    return events, envelope_summary(events)


def test_a_policys_max_processes_bounds_the_models_shell_and_the_report_counts_refused_forks(
    world: CliWorld, tmp_path: Path
) -> None:
    done, _ = _run(world, _SPAWN.format(n=200), "--sandbox-policy", _policy(tmp_path, "max_processes = 64"))
    events, summary = _report(done)
    started = _started(tool_outputs(events))
    # 64 tasks for the whole envelope (Claude Code's own threads among them), and a few for bubblewrap and the bridge
    assert 0 < started < 100, started
    assert summary.get("forks_refused", 0) >= 1, summary
    assert summary.get("oom_kills") == 0, summary


def test_a_policys_memory_bytes_bounds_the_whole_envelope_and_the_report_counts_the_kill(
    world: CliWorld, tmp_path: Path
) -> None:
    # 768 MiB: Claude Code itself keeps about 220 MiB resident, so a smaller limit would
    # end it rather than the model's command.
    done, _ = _run(world, _ALLOCATE, "--sandbox-policy", _policy(tmp_path, f"memory_bytes = {768 * 1024**2}"))
    events, summary = _report(done)
    output = tool_outputs(events)
    assert "ALLOCATED 1073741824" not in output and "exit=137" in output, output
    assert summary.get("oom_kills", 0) >= 1, summary


def test_without_a_policy_the_default_process_limit_holds(world: CliWorld) -> None:
    done, _ = _run(world, _SPAWN.format(n=700))
    events, summary = _report(done)
    started = _started(tool_outputs(events))
    assert 400 < started < 512, started  # 512 tasks by default, the program's own threads among them
    assert summary.get("forks_refused", 0) >= 1, summary


def test_a_turn_within_the_limits_reports_nothing_refused_or_killed(world: CliWorld) -> None:
    done, _ = _run(world, "echo fine")
    events, summary = _report(done)
    assert "fine" in tool_outputs(events)
    assert summary.get("forks_refused") == 0 and summary.get("oom_kills") == 0, summary


@pytest.mark.parametrize("limit", ["wall_s = 5", "cpu_s = 5", "output_bytes = 1000"])
def test_a_policy_limit_the_envelope_cannot_apply_is_refused_and_nothing_runs(
    world: CliWorld, tmp_path: Path, limit: str
) -> None:
    done, asked = _run(world, "echo never", "--sandbox-policy", _policy(tmp_path, limit))
    assert done.returncode == 2, (done.stdout, done.stderr)
    name = limit.split()[0]
    assert name in done.stderr and "nothing was run" in done.stderr.lower(), done.stderr
    assert "Traceback" not in done.stderr and done.stdout == "" and asked == 0
