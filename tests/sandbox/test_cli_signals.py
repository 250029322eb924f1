"""SIGTERM and Ctrl-C end what the CLI started: shell children and MCP servers, by PID."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.processes import alive

pytestmark = pytest.mark.real

SERVERS = Path(__file__).resolve().parents[1] / "tools" / "mcp_servers"
# An MCP server that starts, says who it is, and never answers (start-up hangs).
_SILENT_SERVER = "import os, sys, time\nopen(sys.argv[1], 'w').write(str(os.getpid()))\ntime.sleep(3600)\n"


def _wait_for_pids(files: list[Path], proc: subprocess.Popen[str], deadline_s: float = 60) -> list[int]:
    """Poll until each file holds a pid (written by the process it names), or fail."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        texts = [f.read_text().strip() if f.exists() else "" for f in files]
        if all(t.isdigit() for t in texts):
            return [int(t) for t in texts]
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"seamline ended early ({proc.returncode}): {out}\n{err}")
        time.sleep(0.05)
    pytest.fail(f"no pid in {[f.name for f in files]} after {deadline_s}s")


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[str] | int]]:
    """What a test started (the CLI, and pids it learned); a failed test still leaves nothing."""
    things: list[subprocess.Popen[str] | int] = []
    yield things
    for thing in things:
        if isinstance(thing, int):
            if alive(thing):
                os.kill(thing, signal.SIGKILL)
        elif thing.poll() is None:
            os.killpg(thing.pid, signal.SIGKILL)
            thing.wait()


def _start(cmd: list[str], env: dict[str, str], started: list[subprocess.Popen[str] | int]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    started.append(proc)
    return proc


def _mcp_config(path: Path, name: str, argv: list[str], *, startup_timeout: float = 60) -> Path:
    server = {"type": "stdio", "command": argv[0], "args": argv[1:], "startup_timeout": startup_timeout}
    path.write_text(json.dumps({"mcpServers": {name: server}}))
    return path


def test_sigterm_ends_shell_children_and_mcp_servers(
    tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str], started: list[subprocess.Popen[str] | int]
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    mcp_pid, mcp_child = tmp_path / "mcp.pid", tmp_path / "mcp-child.pid"
    # The server has a child of its own: ending the server must end its process group.
    wrapper = (
        f"sleep 1000 </dev/null >/dev/null 2>&1 & echo $! > {mcp_child}; echo $$ > {mcp_pid}; "
        f"exec {sys.executable} {SERVERS / 'python_server.py'} stdio"
    )
    config = _mcp_config(tmp_path / "mcp.json", "py", ["/bin/sh", "-c", wrapper])
    command = "echo $$ > sh.pid; sleep 1000 & echo $! > bg.pid; wait"
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps([{"tool_calls": [{"name": "shell", "arguments": {"command": command}}]}, {"text": "never"}])
    )
    env = dict(cli_env, XDG_CONFIG_HOME=str(tmp_path / "config"))
    proc = _start(
        [*seamline_cmd, "run", "-p", "scripted", "-o", f"script={script}", "--mcp-config", str(config), "--yes",
         "--json", "-w", str(ws), "go"],
        env, started,
    )  # fmt: skip
    pids = _wait_for_pids([mcp_pid, mcp_child, ws / "sh.pid", ws / "bg.pid"], proc)
    started.extend(pids)
    assert all(alive(p) for p in pids)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "terminated" in err and "Traceback" not in err
    assert [p for p in pids if alive(p)] == []
    events = [json.loads(line) for line in out.splitlines()]
    assert events[-1]["type"] == "complete" and events[-1]["outcome"] == "aborted"


def test_ctrl_c_during_mcp_start_up_aborts_the_run(
    tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str], started: list[subprocess.Popen[str] | int]
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    server = tmp_path / "silent.py"
    server.write_text(_SILENT_SERVER)
    pid_file = tmp_path / "silent.pid"
    config = _mcp_config(
        tmp_path / "mcp.json", "silent", [sys.executable, str(server), str(pid_file)], startup_timeout=600
    )
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "should not run"}]))
    env = dict(cli_env, XDG_CONFIG_HOME=str(tmp_path / "config"))
    proc = _start(
        [*seamline_cmd, "run", "-p", "scripted", "-o", f"script={script}", "--mcp-config", str(config), "--json",
         "-w", str(ws), "go"],
        env, started,
    )  # fmt: skip
    (server_pid,) = _wait_for_pids([pid_file], proc)
    started.append(server_pid)
    proc.send_signal(signal.SIGINT)  # one Ctrl-C
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert "aborted" in err and "Traceback" not in err
    assert "should not run" not in out
    events = [json.loads(line) for line in out.splitlines()]
    assert events and events[-1]["type"] == "complete" and events[-1]["outcome"] == "aborted"
    assert not alive(server_pid)
