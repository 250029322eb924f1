"""Runs and pipelines on a real Temporal dev server with real worker processes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.durable.conftest import DevServer, Processes, opened_ledger
from tests.durable.pipelines import fan_out_pipeline, write_script

pytestmark = pytest.mark.real


def _finish(proc: subprocess.Popen[bytes], timeout: float = 120) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out.decode(), err.decode()


def _run_id(err: str) -> str:
    return err.split("seamline: run ", 1)[1].split()[0]


def test_a_pipeline_runs_on_a_worker_and_streams_back(
    dev_server: DevServer, processes: Processes, tmp_path: Path, seamline_cmd: list[str]
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.md").write_text("hello\nworld\n")
    store = tmp_path / "runs.db"
    processes.worker(dev_server.target, "q-basic")
    client = processes.client(
        ["--temporal", dev_server.target, "--task-queue", "q-basic", "--store", str(store), "--workspace", str(ws),
         "--pipeline", "answer-review", "--json", "what is hello?"]
    )  # fmt: skip
    code, out, err = _finish(client)
    assert code == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    types = [e["type"] for e in events]
    assert types[0] == "raw" and events[0]["source"] == "run"  # the run's start, before any turn
    assert types[1] == "session"  # the writer's turn, streamed from the store as the worker ran it
    assert "tool_call" in types and "usage" in types
    assert events[-1]["type"] == "complete"
    assert events[-1]["stop_reason"] == "converged"
    assert "Sources: notes.md:1-2" in events[-1]["text"]
    assert types.count("complete") == 2  # the writer's turn, then the run's own
    run_id = _run_id(err)
    verify = subprocess.run(
        [*seamline_cmd, "trace", "verify", run_id, "--store", str(store)],
        capture_output=True, text=True, env=processes.env, timeout=60,
    )  # fmt: skip
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "head in store    yes" in verify.stdout
    # The workflow's history holds ids and summaries, not the answer the worker streamed.
    history = subprocess.run(
        [sys.executable, "-c", _HISTORY, dev_server.target, f"seamline-{run_id}"],
        capture_output=True, text=True, env=processes.env, timeout=60,
    )  # fmt: skip
    assert history.returncode == 0, history.stderr
    size = int(history.stdout.split()[0])
    assert "world" not in history.stdout and "notes.md" not in history.stdout
    assert 0 < size < 20_000


# Dumps the workflow history as JSON (payloads decoded) in its own short-lived process.
_HISTORY = """
import asyncio, base64, json, os, sys
from temporalio.client import Client
async def main():
    client = await Client.connect(sys.argv[1])
    history = await client.get_workflow_handle(sys.argv[2]).fetch_history()
    text = history.to_json()
    decoded = []
    def walk(node):
        if isinstance(node, dict):
            if "data" in node and isinstance(node["data"], str):
                try: decoded.append(base64.b64decode(node["data"]).decode("utf-8", "replace"))
                except Exception: pass
            for v in node.values(): walk(v)
        elif isinstance(node, list):
            for v in node: walk(v)
    walk(json.loads(text))
    print(len(text), " ".join(decoded), flush=True)
asyncio.run(main())
sys.stdout.flush(); os._exit(0)
"""


def test_one_turn_runs_on_temporal_and_prints_the_answer(
    dev_server: DevServer, processes: Processes, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "guide.md").write_text("The store keeps sessions.\n")
    processes.worker(dev_server.target, "q-one")
    client = processes.client(
        ["--temporal", dev_server.target, "--task-queue", "q-one", "--store", str(tmp_path / "s.db"),
         "--workspace", str(ws), "what does the store keep?"]
    )  # fmt: skip
    code, out, err = _finish(client)
    assert code == 0, err
    assert "guide.md" in out
    assert "single completed" in err


def test_a_fan_out_spreads_over_two_workers_and_each_turn_runs_once(
    dev_server: DevServer, processes: Processes, tmp_path: Path
) -> None:
    roles = [f"r{i}" for i in range(8)]
    definition = fan_out_pipeline(tmp_path, roles)
    for role in roles:  # each role takes a while, and a worker holds four at most: the other takes the rest
        write_script(tmp_path / f"{role}.json", f"answer of {role}", delay=2)
    store = tmp_path / "fan.db"
    w1 = processes.worker(dev_server.target, "q-fan", name="w1", extra=("--max-concurrent", "4"))
    w2 = processes.worker(dev_server.target, "q-fan", name="w2", extra=("--max-concurrent", "4"))
    client = processes.client(
        ["--temporal", dev_server.target, "--task-queue", "q-fan", "--store", str(store),
         "--workspace", str(tmp_path), "--pipeline", str(definition), "go"]
    )  # fmt: skip
    code, out, err = _finish(client)
    assert code == 0, err
    assert out.strip() == "answer of summary"
    with opened_ledger(store) as ledger:
        turns = ledger.turns(_run_id(err))
        assert sorted(k.split("/")[1] for k in turns) == sorted([*roles, "summary"])
        assert all(t["status"] == "finished" and t["starts"] == 1 for t in turns.values())
        assert ledger.spent_usd(_run_id(err)) == pytest.approx(0.001 * 9)
    # Each turn's row names the worker that ran it: the fan-out ran on both.
    host = socket.gethostname()
    fan = {t["worker"] for k, t in turns.items() if k.split("/")[1] in roles}
    assert fan == {f"{w1.pid}@{host}", f"{w2.pid}@{host}"}


def test_without_a_server_the_client_and_the_worker_say_so_in_one_line(
    processes: Processes, tmp_path: Path, seamline_cmd: list[str]
) -> None:
    port = "127.0.0.1:9"  # discard: nothing answers gRPC there
    worker = subprocess.run(
        [*seamline_cmd, "worker", "--temporal", port, "--task-queue", "q"],
        capture_output=True, text=True, env=processes.env, timeout=120,
    )  # fmt: skip
    assert worker.returncode == 1
    assert worker.stderr.startswith("seamline: transport error: cannot reach Temporal at 127.0.0.1:9")
    assert len(worker.stderr.strip().splitlines()) == 1
    client = subprocess.run(
        [*seamline_cmd, "run", "--on", "temporal", "--temporal", port, "--store", str(tmp_path / "s.db"), "hi"],
        capture_output=True, text=True, env=processes.env, timeout=120,
    )  # fmt: skip
    assert client.returncode == 1
    assert "seamline: transport error: cannot reach Temporal" in client.stderr
    assert "Traceback" not in client.stderr
    # Nothing was submitted: nothing says so, and the store keeps no unfinished run.
    assert "submitted" not in client.stderr
    if (tmp_path / "s.db").exists():
        with opened_ledger(tmp_path / "s.db") as ledger:
            assert ledger.store._query("SELECT run_id FROM durable_runs") == []


def test_an_unreachable_temporal_ends_the_worker_without_interpreter_teardown(
    processes: Processes, tmp_path: Path, seamline_cmd: list[str]
) -> None:
    # The Temporal client's native threads can crash a finalizing interpreter (the worker
    # above died with -11 about one run in ten), so the worker, like `run --on temporal`,
    # leaves with os._exit once its one line is out. A handler registered at start-up runs
    # last at a normal exit; here it must never run.
    marker = tmp_path / "finalized"
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        f"import atexit, pathlib\natexit.register(lambda: pathlib.Path({str(marker)!r}).write_text('yes'))\n"
    )
    env = {**processes.env, "PYTHONPATH": os.pathsep.join([str(hook), processes.env.get("PYTHONPATH", "")])}
    worker = subprocess.run(
        [*seamline_cmd, "worker", "--temporal", "127.0.0.1:9", "--task-queue", "q"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert worker.returncode == 1, worker.stderr
    assert worker.stderr.startswith("seamline: transport error: cannot reach Temporal at 127.0.0.1:9")
    assert not marker.exists()
    # The hook itself works: a command that ends normally runs it.
    subprocess.run([*seamline_cmd, "--version"], capture_output=True, env=env, timeout=60, check=True)
    assert marker.read_text() == "yes"


def test_a_worker_on_another_store_fails_the_workflow_instead_of_retrying_forever(
    dev_server: DevServer, processes: Processes, tmp_path: Path
) -> None:
    from tests.durable.conftest import temporal_binary

    processes.worker(dev_server.target, "q-lost")
    job = json.dumps({"run_id": "nope", "store": str(tmp_path / "other.db"), "heartbeat_s": 5})
    result = subprocess.run(
        [temporal_binary(), "workflow", "execute", "--type", "seamline.pipeline", "--task-queue", "q-lost",
         "--workflow-id", "seamline-nope", "--input", job, "--address", dev_server.target, "--command-timeout", "60s"],
        capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert result.returncode != 0
    assert "cannot reach the run's store" in result.stdout + result.stderr
    assert not (tmp_path / "other.db").exists()  # the worker made no store where it found none


def test_a_malformed_run_spec_fails_the_workflow_at_once(
    dev_server: DevServer, processes: Processes, tmp_path: Path
) -> None:
    from tests.durable.conftest import temporal_binary

    store = tmp_path / "bad.db"
    with opened_ledger(store) as ledger:
        ledger.register("bad", {"run_id": "bad", "definition": "not a mapping", "max_steps": "many"})
    processes.worker(dev_server.target, "q-bad")
    job = json.dumps({"run_id": "bad", "store": str(store), "heartbeat_s": 5})
    result = subprocess.run(
        [temporal_binary(), "workflow", "execute", "--type", "seamline.pipeline", "--task-queue", "q-bad",
         "--workflow-id", "seamline-bad", "--input", job, "--address", dev_server.target, "--command-timeout", "30s"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0
    assert "the spec of run bad is malformed" in result.stdout + result.stderr  # not a retry until the timeout


def test_a_worker_that_cannot_see_the_store_fails_the_run_as_invalid_request(
    dev_server: DevServer, processes: Processes, tmp_path: Path
) -> None:
    store = tmp_path / "runs.db"
    client = processes.client(
        ["--temporal", dev_server.target, "--task-queue", "q-gone", "--store", str(store), "--workspace",
         str(tmp_path), "hi"]
    )  # fmt: skip
    assert client.stderr is not None
    submitted = client.stderr.readline().decode()
    assert "submitted" in submitted, submitted
    for path in tmp_path.glob("runs.db*"):  # the worker's host has no such file (the client keeps its own open)
        path.unlink()
    processes.worker(dev_server.target, "q-gone")
    _out, err = client.communicate(timeout=120)
    assert client.returncode == 2, err.decode()
    assert "seamline: invalid_request error: run " in err.decode()
    assert "cannot reach the run's store" in err.decode()
    assert not store.exists()


def test_a_worker_stops_cleanly_on_sigterm(dev_server: DevServer, processes: Processes, tmp_path: Path) -> None:
    import signal

    worker = processes.worker(dev_server.target, "q-stop", name="stopping")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0
    log = (tmp_path / "stopping.log").read_text()
    assert log.strip().splitlines()[-1] == "seamline: worker stopped"
    assert "Traceback" not in log
