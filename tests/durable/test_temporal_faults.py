"""Faults on real processes, no mocks: kill -9 a worker mid-turn or mid-advance (its advance
made to hang by a wrapper around the real worker), kill -9 the server.

The pipeline fans out to three scripted roles, one of them slow, then a summary role.
Whatever dies, the run finishes, no finished role turn runs again, the run's usage is
counted once and its trace verifies.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.durable.conftest import DevServer, Processes, opened_ledger
from tests.durable.pipelines import USAGE, fan_out_pipeline, write_script

pytestmark = pytest.mark.real

_WAIT_S = 90.0
# The workflow's next task waits on the queue of the worker that ran its last one until this
# runs out (Temporal's 10 s): after that worker's SIGKILL, the run stands still that long.
_STICKY = ("--sticky-timeout-s", "1")


def _wait_for_slow_turn(store: Path, client: subprocess.Popen[bytes]) -> str:
    """Wait until the fast roles finished and the slow one is running; return the run id."""
    deadline = time.monotonic() + _WAIT_S
    while time.monotonic() < deadline:
        assert client.poll() is None, "the client ended before the fault"
        if store.exists():
            with opened_ledger(store) as ledger:
                rows = ledger.store._query("SELECT run_id FROM durable_runs")
                if rows:
                    run_id = str(rows[0][0])
                    turns = {k.split("/")[1]: t for k, t in ledger.turns(run_id).items()}
                    fast_done = all(turns.get(r, {}).get("status") == "finished" for r in ("a", "c"))
                    if fast_done and turns.get("b", {}).get("status") == "running":
                        return run_id
        time.sleep(0.05)
    raise AssertionError("the slow turn never started")


def _check_run(store: Path, run_id: str, processes: Processes, *, slow_starts: int | None) -> None:
    with opened_ledger(store) as ledger:
        turns = {k.split("/")[1]: t for k, t in ledger.turns(run_id).items()}
        assert set(turns) == {"a", "b", "c", "summary"}
        assert all(t["status"] == "finished" for t in turns.values())
        # Turns finished before the fault never ran again.
        assert turns["a"]["starts"] == turns["c"]["starts"] == turns["summary"]["starts"] == 1
        if slow_starts is not None:
            assert turns["b"]["starts"] == slow_starts
        assert ledger.spent_usd(run_id) == pytest.approx(4 * USAGE["cost_usd"])
        report = ledger.report(run_id)
        assert report is not None and report["outcome"] == "completed"
    trace = Path(report["trace"])
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    run_end = next(r["r"]["d"] for r in records if r["r"]["kind"] == "run_end")
    total = run_end["usage"]["total"]
    assert (total["input_tokens"], total["output_tokens"]) == (40, 20)  # 4 turns, each counted once
    verify = subprocess.run(
        [*processes.cli, "trace", "verify", run_id, "--store", str(store)],
        capture_output=True, text=True, env=processes.env, timeout=60,
    )  # fmt: skip
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_a_worker_killed_mid_turn_is_replaced_and_no_finished_turn_runs_again(
    dev_server: DevServer, processes: Processes, tmp_path: Path
) -> None:
    definition = fan_out_pipeline(tmp_path, ["a", "b", "c"], slow="b", delay=120)
    store = tmp_path / "runs.db"
    first = processes.worker(dev_server.target, "q-kill-worker", name="w1", extra=_STICKY)
    client = processes.client(
        ["--temporal", dev_server.target, "--task-queue", "q-kill-worker", "--store", str(store),
         "--workspace", str(tmp_path), "--pipeline", str(definition), "--heartbeat-s", "2", "go"]
    )  # fmt: skip
    run_id = _wait_for_slow_turn(store, client)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    write_script(tmp_path / "b.json", "answer of b")  # the retry answers at once
    processes.worker(dev_server.target, "q-kill-worker", name="w2", extra=_STICKY)
    out, err = client.communicate(timeout=_WAIT_S)
    assert client.returncode == 0, err.decode()
    assert out.decode().strip() == "answer of summary"
    _check_run(store, run_id, processes, slow_starts=2)


def test_the_server_killed_mid_turn_and_restarted_on_its_db_finishes_the_run(
    own_dev_server: DevServer, processes: Processes, tmp_path: Path
) -> None:
    definition = fan_out_pipeline(tmp_path, ["a", "b", "c"], slow="b", delay=4)
    store = tmp_path / "runs.db"
    processes.worker(own_dev_server.target, "q-kill-server")
    client = processes.client(
        ["--temporal", own_dev_server.target, "--task-queue", "q-kill-server", "--store", str(store),
         "--workspace", str(tmp_path), "--pipeline", str(definition), "--heartbeat-s", "20", "go"]
    )  # fmt: skip
    run_id = _wait_for_slow_turn(store, client)
    own_dev_server.kill()
    own_dev_server.start()  # same db file, same port
    out, err = client.communicate(timeout=_WAIT_S)
    assert client.returncode == 0, err.decode()
    assert out.decode().strip() == "answer of summary"
    # The slow turn may have finished while the server was away: its retry then finds it
    # recorded and returns it, so it started once.
    _check_run(store, run_id, processes, slow_starts=1)


def test_the_client_follows_its_run_through_server_restarts_at_several_points(
    own_dev_server: DevServer, processes: Processes, tmp_path: Path
) -> None:
    definition = fan_out_pipeline(tmp_path, ["a", "b", "c"], slow="b", delay=3)
    write_script(tmp_path / "summary.json", "answer of summary", delay=3)
    store = tmp_path / "runs.db"
    client = processes.client(
        ["--temporal", own_dev_server.target, "--task-queue", "q-restarts", "--store", str(store),
         "--workspace", str(tmp_path), "--pipeline", str(definition), "--heartbeat-s", "2", "go"]
    )  # fmt: skip
    assert client.stderr is not None
    # 1. The client waits on the server and no worker has taken the run yet.
    submitted = client.stderr.readline().decode()
    assert "submitted" in submitted, submitted
    own_dev_server.kill()
    own_dev_server.start()
    processes.worker(own_dev_server.target, "q-restarts")
    # 2. A role turn runs on the worker while the client streams it.
    run_id = _wait_for_slow_turn(store, client)
    own_dev_server.kill()
    own_dev_server.start()
    # 3. The last turn runs: the client waits for the run's end.
    deadline = time.monotonic() + _WAIT_S
    while True:
        assert client.poll() is None, "the client ended before the last restart"
        with opened_ledger(store) as ledger:
            turns = {k.split("/")[1]: t for k, t in ledger.turns(run_id).items()}
        if turns.get("summary", {}).get("status") == "running":
            break
        assert time.monotonic() < deadline, "the summary turn never started"
        time.sleep(0.05)
    own_dev_server.kill()
    own_dev_server.start()
    out, err = client.communicate(timeout=_WAIT_S)
    assert client.returncode == 0, submitted + err.decode()
    assert out.decode().strip() == "answer of summary"
    assert "lost the workflow" not in err.decode()
    with opened_ledger(store) as ledger:
        report = ledger.report(run_id)
    assert report is not None and report["outcome"] == "completed"


def test_the_spend_of_a_killed_attempt_counts_in_the_run_and_its_budget(
    dev_server: DevServer, processes: Processes, tmp_path: Path
) -> None:
    definition = fan_out_pipeline(tmp_path, ["a", "b", "c"])
    # b spends on its first model call, runs a tool, then hangs in its second call.
    (tmp_path / "b.json").write_text(
        json.dumps(
            [
                {"tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}], "usage": USAGE},
                {"text": "never", "delay": 120, "usage": USAGE},
            ]
        )
    )
    store = tmp_path / "runs.db"
    first = processes.worker(dev_server.target, "q-spend", name="w1", extra=_STICKY)
    client = processes.client(
        ["--temporal", dev_server.target, "--task-queue", "q-spend", "--store", str(store),
         "--workspace", str(tmp_path), "--pipeline", str(definition), "--heartbeat-s", "2", "go"]
    )  # fmt: skip
    deadline = time.monotonic() + _WAIT_S
    run_id = ""
    while True:  # until b's first call is paid for and published, and a and c are done
        assert client.poll() is None, "the client ended before the fault"
        assert time.monotonic() < deadline, "b never spent"
        if store.exists():
            with opened_ledger(store) as ledger:
                rows = ledger.store._query(
                    "SELECT run_id FROM durable_events WHERE turn_key LIKE 'fan/b/%' AND event LIKE ?",
                    ('{"type":"tool_result"%',),
                )
                turns = {k.split("/")[1]: t for k, t in ledger.turns(str(rows[0][0])).items()} if rows else {}
            # Only b may be cut: a start of a or c killed after it spent would rightly count too.
            if rows and all(turns.get(r, {}).get("status") == "finished" for r in ("a", "c")):
                run_id = str(rows[0][0])
                break
        time.sleep(0.05)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    write_script(tmp_path / "b.json", "answer of b")  # the retry answers at once
    processes.worker(dev_server.target, "q-spend", name="w2", extra=_STICKY)
    out, err = client.communicate(timeout=_WAIT_S)
    assert client.returncode == 0, err.decode()
    assert out.decode().strip() == "answer of summary"
    with opened_ledger(store) as ledger:
        turns = {k.split("/")[1]: t for k, t in ledger.turns(run_id).items()}
        assert turns["b"]["starts"] == 2
        # b paid for two calls: the killed start's and the retry's.
        assert turns["b"]["cost_usd"] == pytest.approx(2 * USAGE["cost_usd"])
        assert (turns["b"]["input_tokens"], turns["b"]["output_tokens"]) == (20, 10)
        assert ledger.spent_usd(run_id) == pytest.approx(5 * USAGE["cost_usd"])
        report = ledger.report(run_id)
        assert report is not None
    records = [json.loads(line) for line in Path(report["trace"]).read_text().splitlines()]
    run_end = next(r["r"]["d"] for r in records if r["r"]["kind"] == "run_end")
    total = run_end["usage"]["total"]
    assert (total["input_tokens"], total["output_tokens"]) == (50, 25)
    assert total["cost_usd"] == pytest.approx(5 * USAGE["cost_usd"])


def _faulty_worker(mode: str, tmp: Path, finished: int) -> tuple[str, ...]:
    """The command of a worker whose first attempt of one advance pass hangs or fails."""
    return (sys.executable, str(Path(__file__).with_name("faulty_advance.py")), mode, str(tmp), str(finished))


def _advance_attempts(tmp: Path, finished: int) -> list[tuple[int, int]]:
    """(worker PID, attempt) of each advance attempt that found ``finished`` turns finished."""
    log = tmp / "advances.log"
    rows = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
    return [(int(pid), int(attempt)) for pid, seen, attempt in rows if int(seen) == finished]


# A dead worker's advance is retried once its heartbeat is missed (this timeout), never
# after the 10-minute start-to-close: the client's wait below would run out first.
_ADVANCE_HEARTBEAT_S = 5.0
_NOT_STALLED_S = 120.0


def test_a_worker_killed_during_advance_is_replaced_within_the_heartbeat_timeout(
    dev_server: DevServer, processes: Processes, tmp_path: Path
) -> None:
    definition = fan_out_pipeline(tmp_path, ["a", "b", "c"])
    store = tmp_path / "runs.db"
    # Both workers hang the first attempt of the pass that follows the fan-out (three turns
    # finished), whichever takes it; only one of them claims it.
    command = _faulty_worker("hang", tmp_path, 3)
    workers = [
        processes.worker(dev_server.target, "q-kill-advance", name=name, extra=_STICKY, command=command)
        for name in ("w1", "w2")
    ]
    client = processes.client(
        ["--temporal", dev_server.target, "--task-queue", "q-kill-advance", "--store", str(store),
         "--workspace", str(tmp_path), "--pipeline", str(definition), "--heartbeat-s", str(_ADVANCE_HEARTBEAT_S),
         "go"]
    )  # fmt: skip
    hung = tmp_path / "hung"
    deadline = time.monotonic() + _WAIT_S
    while not hung.exists() or not hung.read_text():
        assert client.poll() is None, "the client ended before the advance hung"
        assert time.monotonic() < deadline, "no advance found the fan-out finished"
        time.sleep(0.05)
    victim = next(w for w in workers if w.pid == int(hung.read_text()))
    # Alive and heartbeating, a slow advance is left alone: over two heartbeat timeouts,
    # no second attempt starts.
    time.sleep(2.5 * _ADVANCE_HEARTBEAT_S)
    assert _advance_attempts(tmp_path, 3) == [(victim.pid, 1)]
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait(timeout=30)
    try:
        out, err = client.communicate(timeout=_NOT_STALLED_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(
            f"the run stalled after its advance's worker died (attempts: {_advance_attempts(tmp_path, 3)})"
        ) from None
    assert client.returncode == 0, err.decode()
    assert out.decode().strip() == "answer of summary"
    survivor = next(w for w in workers if w is not victim)
    assert _advance_attempts(tmp_path, 3) == [(victim.pid, 1), (survivor.pid, 2)]
    with opened_ledger(store) as ledger:
        run_id = str(ledger.store._query("SELECT run_id FROM durable_runs")[0][0])
    # The retried pass re-drove the finished turns from the store: each ran once.
    _check_run(store, run_id, processes, slow_starts=1)


def test_a_transport_error_in_advance_is_retried_and_the_run_completes(
    dev_server: DevServer, processes: Processes, tmp_path: Path
) -> None:
    definition = fan_out_pipeline(tmp_path, ["a", "b", "c"])
    store = tmp_path / "runs.db"
    processes.worker(dev_server.target, "q-advance-transport", command=_faulty_worker("transport", tmp_path, 3))
    client = processes.client(
        ["--temporal", dev_server.target, "--task-queue", "q-advance-transport", "--store", str(store),
         "--workspace", str(tmp_path), "--pipeline", str(definition), "go"]
    )  # fmt: skip
    out, err = client.communicate(timeout=_WAIT_S)
    assert client.returncode == 0, err.decode()
    assert out.decode().strip() == "answer of summary"
    assert [attempt for _pid, attempt in _advance_attempts(tmp_path, 3)] == [1, 2]
    with opened_ledger(store) as ledger:
        run_id = str(ledger.store._query("SELECT run_id FROM durable_runs")[0][0])
    _check_run(store, run_id, processes, slow_starts=1)
