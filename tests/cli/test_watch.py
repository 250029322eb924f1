"""`seamline watch`: the live and recent runs of a store. Two worktree runs on real git with
the scripted provider are listed with status, branch and cost while they run and after; the
live view refreshes until Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.worktrees.git_repo import environ_with, git_home, make_repo

USAGE = {"input_tokens": 10, "output_tokens": 2, "cost_usd": 0.01}


def _script(tmp: Path, name: str, *, delay: float) -> Path:
    call = {"name": "write_file", "arguments": {"path": f"{name}.txt", "content": f"{name}\n"}}
    script = tmp / f"{name}.json"
    entries = [{"delay": delay, "tool_calls": [call], "usage": USAGE}, {"text": f"wrote {name}", "usage": USAGE}]
    script.write_text(json.dumps(entries))
    return script


def _snapshot(cmd: list[str], env: dict[str, str], store: Path) -> dict[str, dict[str, Any]]:
    done = subprocess.run(
        [*cmd, "watch", "--snapshot", "--json", "--store", str(store)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return {row["session_id"]: row for row in map(json.loads, done.stdout.splitlines())}


def test_two_runs_are_listed_with_status_branch_and_cost_while_they_run_and_after(
    seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path
) -> None:
    env = environ_with({**cli_env, **git_home(tmp_path / "home")})
    repo = make_repo(tmp_path / "repo", env)
    store = tmp_path / "store.db"
    argv = [*seamline_cmd, "run", "--json", "--worktree", "--store", str(store), "-w", str(repo), "-p", "scripted"]
    runs = [
        subprocess.Popen(
            [*argv, "-o", f"script={_script(tmp_path, name, delay=6.0)}", "--yes", "go"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for name in ("left", "right")
    ]
    try:
        end = time.monotonic() + 60
        during: dict[str, dict[str, Any]] = {}
        while time.monotonic() < end:
            during = {k: v for k, v in _snapshot(seamline_cmd, env, store).items() if v["status"] == "running"}
            if len(during) == 2:
                break
            time.sleep(0.2)
        outputs = [proc.communicate(timeout=120) for proc in runs]
    finally:
        for proc in runs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert [proc.returncode for proc in runs] == [0, 0], [err for _, err in outputs]
    ids = {str(json.loads(out.splitlines()[0])["session_id"]) for out, _ in outputs}
    assert set(during) == ids, during  # both live at once
    assert all(
        row["branch"] == f"seamline/{sid[:8]}" and row["worktree_state"] == "open" for sid, row in during.items()
    )
    after = _snapshot(seamline_cmd, env, store)
    assert set(after) == ids
    for sid, row in after.items():
        assert row["status"] == "completed" and row["branch"] == f"seamline/{sid[:8]}"
        assert row["cost_usd"] == 0.02 and (row["input_tokens"], row["output_tokens"]) == (20, 4)
        assert row["provider"] == "scripted" and row["title"] == "go" and row["elapsed_s"] >= 6.0


def test_the_live_view_refreshes_until_ctrl_c(seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    done = subprocess.run(
        [*seamline_cmd, "run", "--store", str(store), "-w", str(tmp_path), "what is here?"],
        env=cli_env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    view = subprocess.Popen(
        [*seamline_cmd, "watch", "--interval", "0.1", "--store", str(store)],
        env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        time.sleep(1.5)
        os.killpg(view.pid, signal.SIGINT)
        out, err = view.communicate(timeout=30)
    finally:
        if view.poll() is None:
            os.killpg(view.pid, signal.SIGKILL)
            view.wait()
    assert view.returncode == 0, err
    assert out.count("seamline watch") >= 2 and out.count("what is here?") >= 2, out
    assert "Traceback" not in err


def test_json_without_snapshot_is_a_usage_error(seamline_cmd: list[str], cli_env: dict[str, str]) -> None:
    done = subprocess.run(
        [*seamline_cmd, "watch", "--json"], env=cli_env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2 and "--json goes with --snapshot" in done.stderr


def test_url_reads_a_running_server(seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path) -> None:
    pytest.importorskip("starlette")
    from tests.server.harness import serve

    with serve(tmp_path) as served, served.client() as client:
        made = client.post("/v1/sessions", json={"provider": "offline"})
        assert made.status_code == 201, made.text
        session_id = made.json()["id"]
        started = client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "what is here?"})
        assert started.status_code == 201, started.text
        run_id = started.json()["id"]
        end = time.monotonic() + 60
        while client.get(f"/v1/runs/{run_id}").json()["status"] != "completed":
            assert time.monotonic() < end
            time.sleep(0.05)
        done = subprocess.run(
            [*seamline_cmd, "watch", "--url", served.base, "--snapshot", "--json"],
            env=cli_env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["session_id"], r["run_id"], r["status"], r["title"]) for r in rows] == [
        (session_id, run_id, "completed", "what is here?")
    ]
    assert rows[0]["provider"] == "offline" and rows[0]["pending_approvals"] == 0 and "pending" not in rows[0]


def test_url_mistakes_are_usage_errors(seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path) -> None:
    cases = {
        ("--url", "http://127.0.0.1:9", "--store", str(tmp_path / "s.db")): "give one",
        ("--url", "ftp://example", "--snapshot"): "must be an http:// or https:// URL",
        ("--url", "http://127.0.0.1:9", "--snapshot"): "did not answer",  # nothing listens on port 9
    }
    for argv, message in cases.items():
        done = subprocess.run(
            [*seamline_cmd, "watch", *argv], env=cli_env, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 2 and message in done.stderr, (argv, done.stderr)
        assert "Traceback" not in done.stderr


def test_without_textual_url_names_the_extra(cli_env: dict[str, str]) -> None:
    program = (
        "import sys; sys.modules['textual'] = None\n"  # as if the watch extra were not installed
        "from seamline.cli.main import main\n"
        "sys.exit(main(['watch', '--url', 'http://127.0.0.1:9']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], env=cli_env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2, done.stderr
    assert "needs the watch extra" in done.stderr and "[watch]" in done.stderr and "textual missing" in done.stderr
