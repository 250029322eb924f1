"""A repository's `.mcp.json` names programs; `seamline run` started them on the host before
anything was asked (a `command` that writes a marker ran). Now the workspace's file is
loaded only when the user says so (`--project-mcp`, or `--mcp-config .mcp.json`), and a
run in such a workspace says how to load it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.tools.test_mcp import EVERYTHING


def _workspace(tmp_path: Path) -> tuple[Path, Path]:
    ws, marker = tmp_path / "ws", tmp_path / "MCP-SERVER-RAN"
    ws.mkdir()
    # The "server" writes the marker, then becomes the reference MCP server.
    script = f"touch {marker}; exec node {EVERYTHING} stdio"
    (ws / ".mcp.json").write_text(json.dumps({"mcpServers": {"repo": {"command": "sh", "args": ["-c", script]}}}))
    return ws, marker


def _run(ws: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "seamline", "run", "--no-store", "--workspace", str(ws), *extra, "What is here?"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def test_a_workspace_mcp_json_starts_nothing_unless_asked(tmp_path: Path) -> None:
    ws, marker = _workspace(tmp_path)
    done = _run(ws)
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    assert "--project-mcp" in done.stderr and ".mcp.json" in done.stderr


def test_the_user_may_load_it(tmp_path: Path) -> None:
    ws, marker = _workspace(tmp_path)
    done = _run(ws, "--project-mcp")
    assert done.returncode == 0, done.stderr
    assert marker.exists()
    assert "--project-mcp" not in done.stderr
