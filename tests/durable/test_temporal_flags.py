"""``seamline run --on temporal`` keeps every flag of a local run: each travels with the
run spec to the workers, or the client refuses it with exit 2 before submitting."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.durable.conftest import DevServer, Processes

pytestmark = pytest.mark.real


def _finish(proc: subprocess.Popen[bytes], timeout: float = 120) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out.decode(), err.decode()


def _reading_script(tmp: Path) -> Path:
    script = tmp / "read.json"
    script.write_text(
        json.dumps([{"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.md"}}]}, {"text": "done"}])
    )
    return script


def test_allow_refuses_on_the_worker_a_tool_left_out_as_it_does_locally(
    dev_server: DevServer, processes: Processes, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.md").write_text("the secret line\n")
    script = _reading_script(tmp_path)
    processes.worker(dev_server.target, "q-allow")
    client = processes.client(
        ["--temporal", dev_server.target, "--task-queue", "q-allow", "--store", str(tmp_path / "s.db"),
         "--workspace", str(ws), "--provider", "scripted", "-o", f"script={script}", "--allow", "list_dir",
         "--json", "read the notes"]
    )  # fmt: skip
    code, out, err = _finish(client)
    assert code == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    results = [e for e in events if e["type"] == "tool_result"]
    assert len(results) == 1
    assert results[0]["is_error"] is True
    assert "unknown tool 'read_file'; available: list_dir" in results[0]["output"]
    assert "the secret line" not in out


def test_an_unknown_tool_in_allow_is_refused_before_anything_is_submitted(processes: Processes, tmp_path: Path) -> None:
    # No server at all: the allowlist is checked before the client reaches for one.
    client = processes.client(
        ["--temporal", "127.0.0.1:9", "--store", str(tmp_path / "s.db"), "--workspace", str(tmp_path),
         "--allow", "list_files", "hi"]
    )  # fmt: skip
    code, _out, err = _finish(client)
    assert code == 2, err
    assert "unknown tool(s) in allowlist: list_files" in err
    assert "submitted" not in err
    assert not (tmp_path / "s.db").exists()
