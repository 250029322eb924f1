"""Input no retry can fix fails a durable run at once, with one classified line, on a real
dev server and real workers: a spec nested 5,000 deep in the store, a job the workflow
cannot use (no ``store``, wrong types, not an object, nested too deep, none at all).
Before, each was retried for ever: the advance activity with backoff, the workflow task
without end."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.durable.conftest import DevServer, Processes, opened_ledger, temporal_binary

pytestmark = pytest.mark.real

# Each failure comes within a second or two; on the old code none came at all.
_FAIL_WITHIN_S = 60


def _execute(server: DevServer, queue: str, workflow_id: str, given: list[str]) -> str:
    """``temporal workflow execute`` of seamline.pipeline; returns its output (it must fail)."""
    result = subprocess.run(
        [temporal_binary(), "workflow", "execute", "--type", "seamline.pipeline", "--task-queue", queue,
         "--workflow-id", workflow_id, *given, "--address", server.target,
         "--command-timeout", f"{_FAIL_WITHIN_S}s"],
        capture_output=True, text=True, timeout=_FAIL_WITHIN_S + 30,
    )  # fmt: skip
    assert result.returncode != 0, result.stdout
    return result.stdout + result.stderr


def _history(server: DevServer, workflow_id: str) -> list[dict[str, Any]]:
    shown = subprocess.run(
        [temporal_binary(), "workflow", "show", "--workflow-id", workflow_id, "--output", "json",
         "--address", server.target],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    events: list[dict[str, Any]] = json.loads(shown.stdout)["events"]
    return events


def _pending_attempts(server: DevServer, workflow_id: str) -> list[tuple[str, int]]:
    """(activity type, attempt) of the workflow's activities still being retried."""
    shown = subprocess.run(
        [temporal_binary(), "workflow", "describe", "--workflow-id", workflow_id, "--output", "json",
         "--address", server.target],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    pending = json.loads(shown.stdout).get("pendingActivities", [])
    return [(str(p["activityType"]["name"]), int(p.get("attempt", 1))) for p in pending]


def _types(events: list[dict[str, Any]]) -> list[str]:
    return [str(e["eventType"]).removeprefix("EVENT_TYPE_") for e in events]


def _deep_spec(run_id: str, store: Path, workspace: Path, depth: int) -> str:
    """A run spec whose pipeline definition nests ``depth`` lists (no JSON encoder writes it)."""
    deep = "[" * depth + "]" * depth
    return (
        f'{{"run_id": {json.dumps(run_id)}, "definition": {{"name": "deep", "phases": {deep}}}, "task": "go", '
        f'"store": {json.dumps(str(store))}, "workspace": {json.dumps(str(workspace))}}}'
    )


def test_a_spec_nested_5000_deep_fails_the_run_at_once_with_one_classified_line(
    dev_server: DevServer, processes: Processes, tmp_path: Path
) -> None:
    store = tmp_path / "runs.db"
    client = processes.client(
        ["--temporal", dev_server.target, "--task-queue", "q-deep-spec", "--store", str(store),
         "--workspace", str(tmp_path), "hi"]
    )  # fmt: skip
    assert client.stderr is not None
    submitted = client.stderr.readline().decode()
    assert "submitted" in submitted, submitted
    run_id = submitted.split("seamline: run ", 1)[1].split()[0]
    with opened_ledger(store) as ledger:  # no worker yet: the spec a worker reads is the deep one
        ledger.store._execute(
            "UPDATE durable_runs SET spec = ? WHERE run_id = ?", (_deep_spec(run_id, store, tmp_path, 5000), run_id)
        )
    processes.worker(dev_server.target, "q-deep-spec")
    try:
        _out, err = client.communicate(timeout=_FAIL_WITHIN_S)
    except subprocess.TimeoutExpired:
        attempts = _pending_attempts(dev_server, f"seamline-{run_id}")
        raise AssertionError(f"the run was still retrying its deep spec (pending attempts: {attempts})") from None
    lines = err.decode().strip().splitlines()
    assert client.returncode == 2, err.decode()
    assert lines[-1].startswith(f"seamline: invalid_request error: run {run_id} failed on Temporal: ")
    assert f"the spec of run {run_id} is nested too deep" in lines[-1]
    assert "Traceback" not in err.decode()
    # One attempt of the advance, failed as not retryable; the workflow failed with it.
    events = _history(dev_server, f"seamline-{run_id}")
    started = [e["activityTaskStartedEventAttributes"] for e in events if "activityTaskStartedEventAttributes" in e]
    assert [s["attempt"] for s in started] == [1]
    failed = [e["activityTaskFailedEventAttributes"]["failure"] for e in events if "activityTaskFailedEventAttributes" in e]  # fmt: skip
    assert len(failed) == 1
    assert failed[0]["applicationFailureInfo"]["type"] == "invalid_request"
    assert failed[0]["applicationFailureInfo"]["nonRetryable"] is True
    assert _types(events)[-1] == "WORKFLOW_EXECUTION_FAILED"


def test_a_job_the_workflow_cannot_use_fails_it_at_once_before_any_activity(
    dev_server: DevServer, processes: Processes, tmp_path: Path
) -> None:
    deep_job = tmp_path / "deep-job.json"
    deep_job.write_text('{"run_id": "r", "store": "/nowhere.db", "extra": ' + "[" * 5000 + "]" * 5000 + "}")
    cases: list[tuple[str, list[str], str]] = [
        ("no-store", ["--input", '{"run_id": "r", "heartbeat_s": 5}'], "'store' is missing"),
        ("run-id-type", ["--input", '{"run_id": 7, "store": "/nowhere.db"}'], "'run_id' must be a non-empty string"),
        (
            "heartbeat-type",
            ["--input", '{"run_id": "r", "store": "/nowhere.db", "heartbeat_s": "soon"}'],
            "'heartbeat_s' must be a positive number of seconds",
        ),
        ("not-an-object", ["--input", "[1, 2]"], "the job must be a JSON object, got list"),
        ("nested-too-deep", ["--input-file", str(deep_job)], "the job cannot be decoded: nested too deep"),
        ("none", [], "no job given"),
    ]
    processes.worker(dev_server.target, "q-bad-jobs")
    for name, given, expected in cases:
        workflow_id = f"bad-job-{name}"
        out = _execute(dev_server, "q-bad-jobs", workflow_id, given)
        assert f"invalid job for seamline.pipeline: {expected}" in out, (name, out)
        types = _types(_history(dev_server, workflow_id))
        # The first workflow task failed the workflow: no task failure retried, no activity.
        assert "WORKFLOW_TASK_FAILED" not in types, name
        assert not any(t.startswith("ACTIVITY_TASK") for t in types), name
        assert types[-1] == "WORKFLOW_EXECUTION_FAILED", name
