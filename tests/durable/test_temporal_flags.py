"""``seamline run --on temporal`` keeps every flag of a local run: each travels with the
run spec to the workers, or the client refuses it with exit 2 before submitting."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from seamline.telemetry.spans import trace_id_of
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


def test_json_lines_carry_the_run_id_as_a_local_pipeline_runs_do(
    dev_server: DevServer, processes: Processes, tmp_path: Path
) -> None:
    processes.worker(dev_server.target, "q-json")
    client = processes.client(
        ["--temporal", dev_server.target, "--task-queue", "q-json", "--store", str(tmp_path / "s.db"),
         "--workspace", str(tmp_path), "--json", "what is here?"]
    )  # fmt: skip
    code, out, err = _finish(client)
    assert code == 0, err
    run_id = err.split("seamline: run ", 1)[1].split()[0]
    events = [json.loads(line) for line in out.splitlines()]
    assert events and all(e["run_id"] == run_id for e in events)
    assert events[-1]["type"] == "complete"


@pytest.mark.parametrize(
    "flag",
    [["--module", "masking"], ["--mcp-config", "mcp.json"], ["--sandbox", "auto"], ["--sandbox-policy", "p.toml"]],
)
def test_a_flag_that_cannot_travel_to_a_worker_exits_2(processes: Processes, tmp_path: Path, flag: list[str]) -> None:
    client = processes.client(
        ["--temporal", "127.0.0.1:9", "--store", str(tmp_path / "s.db"), "--workspace", str(tmp_path), *flag, "hi"]
    )  # fmt: skip
    code, _out, err = _finish(client)
    assert code == 2, err
    assert f"{flag[0]} cannot run --on temporal" in err
    assert "submitted" not in err
    assert not (tmp_path / "s.db").exists()


def _tree(spans: list[Any]) -> list[tuple[str, str | None]]:
    """Each span's name and its parent's name: the shape, free of ids and times."""
    names = {s.span_id: s.name for s in spans}
    return sorted((s.name, names.get(s.parent_span_id)) for s in spans)


def test_otel_sends_the_same_span_tree_as_a_local_run(
    dev_server: DevServer, processes: Processes, tmp_path: Path, seamline_cmd: list[str]
) -> None:
    from tests.telemetry.test_cli_otlp import Receiver

    receiver = Receiver()
    thread = threading.Thread(target=receiver.server.serve_forever, daemon=True)
    thread.start()
    try:
        ws = tmp_path / "ws"
        ws.mkdir()
        (ws / "notes.md").write_text("hello\nworld\n")
        otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_METRICS_EXPORTER": "none"}
        args = ["--store", str(tmp_path / "s.db"), "--workspace", str(ws), "--pipeline", "answer-review"]
        local = subprocess.run(
            [*seamline_cmd, "run", "--otel", *args, "what is hello?"],
            capture_output=True, text=True, env=processes.env | otel, timeout=120,
        )  # fmt: skip
        assert local.returncode == 0, local.stderr
        here = receiver.spans()
        receiver.traces.clear()
        processes.env.update(otel)
        processes.worker(dev_server.target, "q-otel")
        client = processes.client(
            ["--temporal", dev_server.target, "--task-queue", "q-otel", "--otel", *args, "what is hello?"]
        )
        code, _out, err = _finish(client)
        assert code == 0, err
        there = receiver.spans()
        assert len(here) >= 5
        assert _tree(there) == _tree(here)
        run_id = err.split("seamline: run ", 1)[1].split()[0]
        assert {s.trace_id for s in there} == {trace_id_of(run_id).to_bytes(16, "big")}
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()
        thread.join(timeout=10)


def test_ctrl_c_with_no_worker_ends_at_once_and_says_how_to_cancel(
    dev_server: DevServer, processes: Processes, tmp_path: Path
) -> None:
    # No worker polls this queue: the run waits there. Ctrl-C ends the client, not the run.
    client = processes.client(
        ["--temporal", dev_server.target, "--task-queue", "nobody-polls", "--store", str(tmp_path / "s.db"),
         "--workspace", str(tmp_path), "--provider", "offline", "hi"]
    )  # fmt: skip
    assert client.stderr is not None
    lines: list[str] = []
    submitted = threading.Event()

    def read() -> None:
        assert client.stderr is not None
        for raw in client.stderr:
            lines.append(raw.decode())
            if "submitted" in lines[-1]:
                submitted.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert submitted.wait(60), "".join(lines)
    run_id = lines[-1].split("run ", 1)[1].split()[0]
    client.send_signal(signal.SIGINT)
    code = client.wait(timeout=30)
    reader.join(10)
    err = "".join(lines)
    assert code == 130, err
    assert f"run {run_id} stays queued" in err and f"--workflow-id seamline-{run_id}" in err, err
    assert "Traceback" not in err
