"""One approval path: every entry point applies the hard denials and rules of `run --yes`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import seamline

RM_OUTSIDE = '[{"tool_calls": [{"name": "shell", "arguments": {"command": "rm -rf ../x"}}]}, {"text": "done"}]'
HELLO = '[{"text": "hello"}]'


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Path]:
    victim = tmp_path / "x"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    ws = tmp_path / "ws"
    ws.mkdir()
    rm = tmp_path / "rm.json"
    rm.write_text(RM_OUTSIDE)
    hello = tmp_path / "hello.json"
    hello.write_text(HELLO)
    return {"victim": victim, "ws": ws, "rm": rm, "hello": hello, "store": tmp_path / "s.db"}


def sh(cmd: list[str], env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=120)


def refused(stdout: str) -> bool:
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return any(
        e["type"] == "permission_decision" and e["decision"] == "deny" and "hard denial" in str(e.get("reason"))
        for e in events
    )


def started_session(cmd: list[str], env: dict[str, str], world: dict[str, Path]) -> str:
    done = sh(
        cmd, env, "run", "--json", "--store", str(world["store"]), "-p", "scripted", "-o", f"script={world['hello']}",
        "-w", str(world["ws"]), "hi",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout.splitlines()[0])["session_id"])


def test_run_yes_refuses_a_recursive_delete_outside(
    seamline_cmd: list[str], cli_env: dict[str, str], world: dict[str, Path]
) -> None:
    done = sh(
        seamline_cmd, cli_env, "run", "--json", "--yes", "--store", str(world["store"]), "-p", "scripted",
        "-o", f"script={world['rm']}", "-w", str(world["ws"]), "go",
    )  # fmt: skip
    assert refused(done.stdout), done.stdout + done.stderr
    assert (world["victim"] / "precious.txt").read_text() == "keep me"


def test_run_session_yes_refuses_a_recursive_delete_outside(
    seamline_cmd: list[str], cli_env: dict[str, str], world: dict[str, Path]
) -> None:
    sid = started_session(seamline_cmd, cli_env, world)
    done = sh(
        seamline_cmd, cli_env, "run", "--json", "--yes", "--store", str(world["store"]), "--session", sid,
        "-o", f"script={world['rm']}", "go",
    )  # fmt: skip
    assert refused(done.stdout), done.stdout + done.stderr
    assert (world["victim"] / "precious.txt").read_text() == "keep me"


def test_sessions_resume_and_fork_yes_refuse_a_recursive_delete_outside(
    seamline_cmd: list[str], cli_env: dict[str, str], world: dict[str, Path]
) -> None:
    sid = started_session(seamline_cmd, cli_env, world)
    resumed = sh(
        seamline_cmd, cli_env, "sessions", "resume", sid, "go", "--json", "--yes", "--store", str(world["store"]),
        "-o", f"script={world['rm']}",
    )  # fmt: skip
    assert refused(resumed.stdout), resumed.stdout + resumed.stderr
    forked = sh(
        seamline_cmd, cli_env, "sessions", "fork", sid, "--prompt", "go", "--json", "--yes",
        "--store", str(world["store"]), "-o", f"script={world['rm']}",
    )  # fmt: skip
    assert refused(forked.stdout), forked.stdout + forked.stderr
    assert (world["victim"] / "precious.txt").read_text() == "keep me"


def test_pipeline_yes_refuses_a_recursive_delete_outside(
    seamline_cmd: list[str], cli_env: dict[str, str], world: dict[str, Path]
) -> None:
    done = sh(
        seamline_cmd, cli_env, "run", "--pipeline", "single", "--json", "--yes", "--store", str(world["store"]),
        "-p", "scripted", "-o", f"script={world['rm']}", "-w", str(world["ws"]), "go",
    )  # fmt: skip
    assert refused(done.stdout), done.stdout + done.stderr
    assert (world["victim"] / "precious.txt").read_text() == "keep me"


def test_run_sync_yes_refuses_a_recursive_delete_outside(world: dict[str, Path]) -> None:
    result = seamline.run_sync(
        "go", provider="scripted", options={"script": str(world["rm"])}, workspace=world["ws"], yes=True
    )
    decisions = [e for e in result.events if e.type == "permission_decision"]
    assert decisions and all(d.decision == "deny" and "hard denial" in d.reason for d in decisions)
    assert (world["victim"] / "precious.txt").read_text() == "keep me"
