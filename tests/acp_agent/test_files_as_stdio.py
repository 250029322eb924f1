"""`seamline acp < requests.jsonl > answers.jsonl`: regular files as stdin and stdout work
(stdout as a file was an internal error: "Pipe transport is only for pipes…")."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from tests.acp_agent.support import WRITE_NOTE, agent_argv, agent_env, write_script


def test_requests_from_a_file_answers_into_a_file(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    argv = agent_argv(write_script(tmp_path, "note", WRITE_NOTE), tmp_path / "s.db")
    requests = tmp_path / "requests.jsonl"
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
        {"jsonrpc": "2.0", "id": 2, "method": "session/nope"},
    ]
    requests.write_text("".join(json.dumps(line) + "\n" for line in lines))
    answers = tmp_path / "answers.jsonl"
    with requests.open("rb") as stdin, answers.open("wb") as stdout:
        proc = subprocess.Popen(
            argv, env=agent_env(tmp_path), stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, start_new_session=True
        )
        try:
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert proc.returncode == 0, err
    assert b"internal error" not in err
    got = {m["id"]: m for m in map(json.loads, answers.read_text().splitlines())}
    assert got[1]["result"]["protocolVersion"] == 1
    assert got[2]["error"]["code"] == -32601


def test_stdin_from_dev_null_ends_quietly(tmp_path: Path) -> None:
    """`seamline acp < /dev/null`: no client, so the agent ends at once (it hung on an
    asyncio traceback: epoll refuses /dev/null)."""
    (tmp_path / "ws").mkdir()
    argv = agent_argv(write_script(tmp_path, "note", WRITE_NOTE), tmp_path / "s.db")
    with open(os.devnull, "rb") as stdin:
        proc = subprocess.Popen(
            argv, env=agent_env(tmp_path), stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True,
        )  # fmt: skip
        try:
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert proc.returncode == 0, err
    assert b"Traceback" not in err and out == b""
