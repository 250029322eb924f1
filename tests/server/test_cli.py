"""`seamline serve` as a program: it announces its address, serves, stops on SIGTERM;
a public bind without a token is a usage error."""

from __future__ import annotations

import os
import re
import selectors
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("ag_ui")

import httpx2


def _line(proc: subprocess.Popen[str], deadline: float) -> str:
    assert proc.stderr is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stderr, selectors.EVENT_READ)
        if not selector.select(max(0.0, deadline - time.monotonic())):
            raise AssertionError("seamline serve said nothing")
    return proc.stderr.readline()


def test_serve_starts_serves_and_stops(tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]) -> None:
    command = [*seamline_cmd, "serve", "--port", "0", "--store", str(tmp_path / "s.db"), "--workspace", str(tmp_path)]
    proc = subprocess.Popen(command, env=cli_env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        line = _line(proc, time.monotonic() + 60)
        found = re.search(r"serving (http://127\.0\.0\.1:\d+)/", line)
        assert found, line
        with httpx2.Client(base_url=found.group(1), timeout=20) as client:
            info = client.get("/v1/info").json()
            assert info["api"] == "v1" and info["store"] == str(tmp_path / "s.db")
            created = client.post("/v1/sessions", json={"provider": "offline"})
            assert created.status_code == 201
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def test_a_port_in_use_is_one_clear_line(tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = subprocess.run(
            [*seamline_cmd, "serve", "--port", str(port), "--store", str(tmp_path / "s.db")],
            env=cli_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 2
    assert done.stderr.startswith(f"seamline: cannot listen on 127.0.0.1:{port}: ") and done.stderr.count("\n") == 1


def test_public_bind_needs_a_token(seamline_cmd: list[str], cli_env: dict[str, str]) -> None:
    cli_env.pop("SEAMLINE_TOKEN", None)
    done = subprocess.run(
        [*seamline_cmd, "serve", "--host", "0.0.0.0", "--port", "0"],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "seamline: binding 0.0.0.0 (not loopback) needs a token (--token or $SEAMLINE_TOKEN) or users (seamline users add)"
    ]


def test_sigterm_ends_open_streams_and_waiting_runs(
    tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]
) -> None:
    script = tmp_path / "script.json"
    script.write_text('[{"tool_calls": [{"name": "write_file", "arguments": {"path": "x", "content": "y"}}]}]')
    store = tmp_path / "s.db"
    command = [*seamline_cmd, "serve", "--port", "0", "--store", str(store), "--workspace", str(tmp_path)]
    proc = subprocess.Popen(command, env=cli_env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        found = re.search(r"serving (http://127\.0\.0\.1:\d+)/", _line(proc, time.monotonic() + 60))
        assert found
        with httpx2.Client(base_url=found.group(1), timeout=20) as client:
            body = {"provider": "scripted", "options": {"script": str(script)}}
            session_id = client.post("/v1/sessions", json=body).json()["id"]
            run_id = client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "go"}).json()["id"]
            with client.stream("GET", f"/v1/runs/{run_id}/events", params={"format": "seamline"}) as response:
                lines = response.iter_lines()
                # The run now waits for a permission answer that never comes.
                assert any("permission_request" in line for line in lines)
                os.killpg(proc.pid, signal.SIGTERM)
                rest = list(lines)  # the server ends the stream: the run was stopped
            assert any('"outcome":"aborted"' in line for line in rest)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    from seamline.sessions.sqlite_store import SQLiteStore

    kept = SQLiteStore(store)
    try:
        assert kept.require(session_id).status == "aborted"
    finally:
        kept.close()


def test_a_bad_allow_origin_is_a_usage_error(seamline_cmd: list[str], cli_env: dict[str, str]) -> None:
    for bad in ("localhost:3000", "http://a.example/app"):
        done = subprocess.run(
            [*seamline_cmd, "serve", "--port", "0", "--allow-origin", bad],
            env=cli_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2
        assert done.stderr.startswith("seamline: --allow-origin ") and done.stderr.count("\n") == 1


def test_serve_with_agents_and_an_allowed_origin(
    tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]
) -> None:
    agents = tmp_path / "agents.toml"
    agents.write_text(f'[agents.local]\nprovider = "offline"\nworkspaces = ["{tmp_path}"]\n')
    command = [*seamline_cmd, "serve", "--port", "0", "--store", str(tmp_path / "s.db"), "--workspace", str(tmp_path)]
    command += ["--agents", str(agents), "--allow-origin", "http://localhost:3000"]
    proc = subprocess.Popen(command, env=cli_env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        found = re.search(r"serving (http://127\.0\.0\.1:\d+)/", _line(proc, time.monotonic() + 60))
        assert found
        with httpx2.Client(base_url=found.group(1), timeout=20) as client:
            assert [a["name"] for a in client.get("/v1/agents").json()["agents"]] == ["local"]
            created = client.post("/v1/sessions", json={"agent": "local"}, headers={"origin": "http://localhost:3000"})
            assert created.status_code == 201 and created.json()["metadata"]["agent"] == "local"
            assert created.headers["access-control-allow-origin"] == "http://localhost:3000"
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
