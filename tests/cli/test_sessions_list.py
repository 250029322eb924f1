"""Sessions a user can tell apart: `sessions list` shows each one's title (the first line
of its first prompt) and workspace; a failed start leaves no record, and a session opened
but never started is `not_started` (hidden unless --all), never `interrupted`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path


def sh(cmd: list[str], env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=120, check=False)


def test_list_shows_titles_and_workspaces_and_hides_what_never_started(
    seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path
) -> None:
    ws = tmp_path / "project"
    ws.mkdir()
    (ws / "notes.md").write_text("# notes\nThe store keeps sessions.\n")
    done = sh(seamline_cmd, cli_env, "run", "--json", "-w", str(ws), "What does the store keep?\nand more lines")
    assert done.returncode == 0, done.stderr
    sid = json.loads(done.stdout.splitlines()[0])["session_id"]
    env = {k: v for k, v in cli_env.items() if k != "OPENAI_API_KEY"}
    env.pop("SEAMLINE_BLOCK_REAL_PROVIDERS")
    failed = sh(seamline_cmd, env, "run", "-p", "openai", "--model", "gpt-4o", "hello")  # no key: fails to start
    assert failed.returncode != 0 and "OPENAI_API_KEY" in failed.stderr
    forked = sh(seamline_cmd, cli_env, "sessions", "fork", sid)  # a fork with no prompt: never started
    assert forked.returncode == 0, forked.stderr

    listed = sh(seamline_cmd, cli_env, "sessions", "list").stdout.splitlines()
    assert len(listed) == 1, listed
    assert listed[0].startswith(sid[:12]) and "What does the store keep?" in listed[0] and "and more" not in listed[0]
    assert str(ws) in listed[0]

    everything = [
        json.loads(line)
        for line in sh(seamline_cmd, cli_env, "sessions", "list", "--all", "--json").stdout.splitlines()
    ]
    assert sorted(r["status"] for r in everything) == ["completed", "not_started"]  # the failed start left nothing
    assert {r["title"] for r in everything} == {"What does the store keep?", ""}
