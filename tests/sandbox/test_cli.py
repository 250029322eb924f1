"""The sandbox through the command line, as a user runs it (subprocesses)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.sandbox.conftest import tree_digest

pytestmark = pytest.mark.real


def _seamline(
    cmd: list[str], env: dict[str, str], *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*cmd, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )


def _workspace(root: Path) -> Path:
    ws = root / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "app.py").write_text("print('hello')\n")
    (ws / "notes.md").write_bytes(b"line one\r\nline two\x00 binary tail \xff\xfe")
    (ws / "run.sh").write_text("#!/bin/sh\necho run\n")
    (ws / "run.sh").chmod(0o755)
    (ws / "gone.txt").write_text("to be deleted\n")
    (ws / "old").mkdir()
    (ws / "old" / "inner.txt").write_text("inner\n")
    (ws / "link").symlink_to("src/app.py")
    return ws


def test_run_in_bwrap_then_revert_restores_byte_for_byte(
    bwrap_ready: None, seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path
) -> None:
    ws = _workspace(tmp_path)
    before = tree_digest(ws)
    command = (
        "echo new > made.txt && printf 'changed' > notes.md && rm gone.txt && rm -r old && chmod 600 run.sh "
        "&& mkdir -p deep/er && echo x > deep/er/file && ln -sf notes.md link && echo out > /outputs/report.txt"
    )
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                {"tool_calls": [{"name": "shell", "arguments": {"command": command}}]},
                {"tool_calls": [{"name": "write_file", "arguments": {"path": "src/app.py", "content": "rewritten\n"}}]},
                {"tool_calls": [{"name": "edit_file", "arguments": {"path": "made.txt", "old": "new", "new": "NEW"}}]},
                {"text": "done"},
            ]
        )
    )
    done = _seamline(
        seamline_cmd,
        cli_env,
        "run",
        "--provider",
        "scripted",
        "--provider-option",
        f"script={script}",
        "--sandbox",
        "bwrap",
        "--json",
        "-w",
        str(ws),
        "change things",
    )
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    run_id = events[0]["session_id"]
    results = [e for e in events if e["type"] == "tool_result"]
    assert [r["is_error"] for r in results] == [False, False, False], results
    changes = {(e["path"], e["kind"]) for e in events if e["type"] == "file_change"}
    assert {("made.txt", "created"), ("gone.txt", "deleted"), ("notes.md", "edited")} <= changes
    assert (ws / "made.txt").read_text() == "NEW\n"
    assert not (ws / "gone.txt").exists() and (ws / "deep" / "er" / "file").exists()
    assert tree_digest(ws) != before
    outputs = list((Path(cli_env["SEAMLINE_STORE"]).parent / "outputs").glob("*/report.txt"))
    assert [p.read_text() for p in outputs] == ["out\n"]

    listed = _seamline(seamline_cmd, cli_env, "revert", run_id, "--list", "--json")
    assert listed.returncode == 0, listed.stderr
    steps = json.loads(listed.stdout)
    assert [s["tool"] for s in steps] == ["shell", "write_file", "edit_file"]

    partial = _seamline(seamline_cmd, cli_env, "revert", run_id, "--to", "2", "--json")
    assert partial.returncode == 0, partial.stderr
    assert json.loads(partial.stdout)["steps_undone"] == 1
    assert (ws / "made.txt").read_text() == "new\n" and (ws / "src" / "app.py").read_text() == "rewritten\n"

    full = _seamline(seamline_cmd, cli_env, "revert", run_id)
    assert full.returncode == 0, full.stderr
    assert tree_digest(ws) == before  # contents, links and modes, byte for byte


def test_revert_refuses_when_the_workspace_changed_since(
    bwrap_ready: None, seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path
) -> None:
    ws = _workspace(tmp_path)
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps([{"tool_calls": [{"name": "shell", "arguments": {"command": "echo one > a.txt"}}]}, {"text": "ok"}])
    )
    done = _seamline(
        seamline_cmd, cli_env, "run", "-p", "scripted", "-o", f"script={script}", "--sandbox", "bwrap", "--json",
        "-w", str(ws), "go",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout.splitlines()[0])["session_id"]
    (ws / "a.txt").write_text("edited by hand\n")
    refused = _seamline(seamline_cmd, cli_env, "revert", run_id)
    assert refused.returncode == 1 and "changed since" in refused.stderr
    assert (ws / "a.txt").read_text() == "edited by hand\n"
    forced = _seamline(seamline_cmd, cli_env, "revert", run_id, "--force")
    assert forced.returncode == 0 and not (ws / "a.txt").exists()
    unknown = _seamline(seamline_cmd, cli_env, "revert", "no-such-run")
    assert unknown.returncode == 2 and "no run 'no-such-run' in the store or its edit journal" in unknown.stderr


def test_revert_restores_a_folder_that_the_run_swapped_for_a_symlink(
    bwrap_ready: None, seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path
) -> None:
    ws = _workspace(tmp_path)
    before = tree_digest(ws)
    script = tmp_path / "script.json"
    command = "rm -r old && ln -s src old"
    script.write_text(
        json.dumps([{"tool_calls": [{"name": "shell", "arguments": {"command": command}}]}, {"text": "ok"}])
    )
    done = _seamline(
        seamline_cmd, cli_env, "run", "-p", "scripted", "-o", f"script={script}", "--sandbox", "bwrap", "--json",
        "-w", str(ws), "go",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (ws / "old").is_symlink()
    run_id = json.loads(done.stdout.splitlines()[0])["session_id"]
    reverted = _seamline(seamline_cmd, cli_env, "revert", run_id)
    assert reverted.returncode == 0, reverted.stderr
    assert (ws / "old" / "inner.txt").read_text() == "inner\n"
    assert not (ws / "src" / "inner.txt").exists()
    assert tree_digest(ws) == before


def _env_without_bwrap(cli_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """PATH holding only a folder without bwrap (the interpreter is called by its full path)."""
    empty = tmp_path / "bin"
    empty.mkdir()
    env = dict(cli_env)
    env["PATH"] = str(empty)
    env.pop("SEAMLINE_BWRAP", None)
    return env


def test_auto_without_bubblewrap_refuses_with_guidance(
    seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path
) -> None:
    env = _env_without_bwrap(cli_env, tmp_path)
    ws = tmp_path / "ws"
    ws.mkdir()
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"tool_calls": [{"name": "shell", "arguments": {"command": "touch x"}}]}]))
    refused = _seamline(
        seamline_cmd, env, "run", "-p", "scripted", "-o", f"script={script}", "--sandbox", "auto", "-w", str(ws), "go"
    )
    assert refused.returncode == 1
    assert "bubblewrap (bwrap) not found" in refused.stderr
    assert "scripts/system/20-bubblewrap.sh" in refused.stderr and "no unisolated fallback" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert list(ws.iterdir()) == []  # nothing ran

    check = _seamline(seamline_cmd, env, "sandbox", "check", "--json")
    assert check.returncode == 1
    report = json.loads(check.stdout)
    assert report["ok"] is False and report["backend"] is None
    assert any("20-bubblewrap.sh" in g for g in report["guidance"])

    # An explicit binary that does not exist is the same refusal.
    missing = dict(cli_env, SEAMLINE_BWRAP=str(tmp_path / "missing" / "bwrap"))
    check = _seamline(seamline_cmd, missing, "sandbox", "check", "--mode", "bwrap")
    assert check.returncode == 1 and "not found" in check.stdout


def test_sandbox_check_reports_what_works(bwrap_ready: None, seamline_cmd: list[str], cli_env: dict[str, str]) -> None:
    check = _seamline(seamline_cmd, cli_env, "sandbox", "check", "--json")
    assert check.returncode == 0, check.stdout
    report = json.loads(check.stdout)
    assert report["backend"] == "bwrap"
    assert report["features"] == {
        "user_namespace": True,
        "network_namespace": True,
        "pid_namespace_with_proc": True,
        "seamline_layout": True,
    }
    # Which memory limit applies is said, honestly: the whole sandbox or each process.
    assert report["memory_limit"].startswith(("whole sandbox, memory cgroup", "per process only (RLIMIT_AS"))
    assert report["unix_sockets"].startswith(("refused", "reachable"))
    text = _seamline(seamline_cmd, cli_env, "sandbox", "check")
    assert "backend: bwrap" in text.stdout and "process limit:" in text.stdout
    assert "memory limit: " in text.stdout and "unix sockets with the network off: " in text.stdout


def test_without_sandbox_the_old_rule_holds(seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps([{"tool_calls": [{"name": "shell", "arguments": {"command": "touch x"}}]}, {"text": "ok"}])
    )
    done = _seamline(
        seamline_cmd, cli_env, "run", "-p", "scripted", "-o", f"script={script}", "--json", "-w", str(ws), "go"
    )
    results = [json.loads(x) for x in done.stdout.splitlines() if '"tool_result"' in x]
    assert results[0]["is_error"] is True and "--yes" in results[0]["output"]
    assert not (ws / "x").exists()
    policy_alone = _seamline(seamline_cmd, cli_env, "run", "--sandbox-policy", "p.toml", "-w", str(ws), "go")
    assert policy_alone.returncode == 2 and "needs --sandbox" in policy_alone.stderr
    assert os.listdir(ws) == []


def test_a_pipeline_with_sandbox_runs_its_tools_in_the_sandbox(
    bwrap_ready: None, seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path
) -> None:
    # `run --pipeline --sandbox bwrap` on a model API: the roles' shell runs in bubblewrap,
    # where nothing outside the workspace can be written (it ran on the host before).
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    escaped = outside / "escaped"
    script = tmp_path / "script.json"
    touch = {"tool_calls": [{"name": "shell", "arguments": {"command": f"touch {escaped}; echo done"}}]}
    script.write_text(json.dumps([touch, {"text": "ok"}]))
    done = subprocess.run(
        [*seamline_cmd, "run", "--pipeline", "single", "--sandbox", "bwrap", "--yes", "--json",
         "-p", "scripted", "-o", f"script={script}", "-w", str(ws), "go"],
        env=cli_env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = [json.loads(line) for line in done.stdout.splitlines() if '"tool_result"' in line]
    assert results and "done" in results[0]["output"], done.stdout  # the command ran, inside
    assert not escaped.exists()
