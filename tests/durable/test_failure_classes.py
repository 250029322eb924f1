"""Which failures of a durable run Temporal retries, in one process: input no retry can
fix (a spec nested too deep, a job without ``store``, wrong types) fails at once with a
classified error; a transient failure (a transport error, a 429) stays retryable."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

pytest.importorskip("temporalio")

from temporalio.exceptions import ApplicationError

from seamline.durable.steps import MalformedRun, advance, load_spec
from seamline.durable.worker import activity_failure
from seamline.durable.workflow import InvalidJob, Job, parse_job
from seamline.errors import (
    InvalidRequest,
    ProviderFailure,
    QuotaExceeded,
    StorageFailure,
    TimeoutFailure,
    TransportFailure,
)
from tests.durable.conftest import opened_ledger


def _store_deep_spec(store: Path, run_id: str, depth: int) -> None:
    deep = "[" * depth + "]" * depth
    spec = (
        f'{{"run_id": "{run_id}", "definition": {{"name": "deep", "phases": {deep}}}, "task": "go", '
        f'"store": {json.dumps(str(store))}, "workspace": {json.dumps(str(store.parent))}}}'
    )
    with opened_ledger(store) as ledger:  # raw: no JSON encoder writes data this deep
        ledger.store._execute(
            "INSERT INTO durable_runs (run_id, spec, created_at) VALUES (?, ?, ?)", (run_id, spec, time.time())
        )


def test_a_spec_nested_5000_deep_is_a_malformed_run_not_a_recursion_error(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    _store_deep_spec(store, "deep", 5000)
    with opened_ledger(store) as ledger, pytest.raises(MalformedRun, match="the spec of run deep is nested too deep"):
        load_spec(ledger.store, "deep")
    with pytest.raises(MalformedRun, match="nested too deep"):
        asyncio.run(advance(str(store), "deep"))
    failure = activity_failure(MalformedRun("the spec of run deep is nested too deep to read"))
    assert isinstance(failure, ApplicationError)
    assert (failure.type, failure.non_retryable) == ("invalid_request", True)


@pytest.mark.parametrize(
    ("error", "kind", "retried"),
    [
        (InvalidRequest("the spec of run r is malformed"), "invalid_request", False),
        (MalformedRun("the spec of run r is not JSON"), "invalid_request", False),
        (StorageFailure("s.db is an SQLite database of another program"), "storage", False),
        (ProviderFailure("the provider crashed"), "provider", False),
        (TransportFailure("connection reset by peer"), "transport", True),
        (QuotaExceeded("429 Too Many Requests", retry_after=2.0), "quota", True),
        (TimeoutFailure("read timed out"), "timeout", True),
        (ProviderFailure("overloaded", retryable=True), "provider", True),
    ],
)
def test_a_classified_failure_keeps_its_kind_and_is_retried_only_when_retrying_may_help(
    error: Exception, kind: str, retried: bool
) -> None:
    failure = activity_failure(error)
    assert isinstance(failure, ApplicationError)
    assert failure.type == kind
    assert failure.non_retryable is not retried
    assert failure.message == str(error)


def test_data_nested_too_deep_for_python_is_not_retried_and_anything_else_is() -> None:
    deep = activity_failure(RecursionError("maximum recursion depth exceeded"))
    assert isinstance(deep, ApplicationError)
    assert (deep.type, deep.non_retryable) == ("invalid_request", True)
    assert "nested too deep" in deep.message
    dropped = ConnectionResetError("connection reset")
    assert activity_failure(dropped) is dropped  # raised as is: Temporal retries it


def test_a_good_job_is_read_with_its_timeouts() -> None:
    assert parse_job({"run_id": "r", "store": "/srv/runs.db"}) == Job(run_id="r", store="/srv/runs.db")
    job = parse_job({"run_id": "r", "store": "/srv/runs.db", "heartbeat_s": 2, "turn_timeout_s": 90.5, "later": 1})
    assert (job.heartbeat_s, job.turn_timeout_s) == (2.0, 90.5)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"run_id": "r"}, "'store' is missing"),
        ({"store": "/srv/runs.db"}, "'run_id' is missing"),
        ({"run_id": "r", "store": None}, "'store' must be a non-empty string, got None"),
        ({"run_id": "r", "store": " "}, "'store' must be a non-empty string, got ' '"),
        ({"run_id": 7, "store": "/srv/runs.db"}, "'run_id' must be a non-empty string, got 7"),
        ({"run_id": ["r"], "store": "/srv/runs.db"}, "'run_id' must be a non-empty string, got list"),
        ({"run_id": "r", "store": "/s", "heartbeat_s": "5"}, "'heartbeat_s' must be a positive number of seconds"),
        ({"run_id": "r", "store": "/s", "heartbeat_s": 0}, "'heartbeat_s' must be a positive number of seconds"),
        ({"run_id": "r", "store": "/s", "heartbeat_s": True}, "'heartbeat_s' must be a positive number of seconds"),
        ({"run_id": "r", "store": "/s", "turn_timeout_s": float("inf")}, "'turn_timeout_s' must be a positive"),
        ([1, 2], "the job must be a JSON object, got list"),
        ("seamline", "the job must be a JSON object, got str"),
        (None, "the job must be a JSON object, got NoneType"),
    ],
)
def test_a_job_the_workflow_cannot_use_is_refused_naming_the_fault(data: object, message: str) -> None:
    with pytest.raises(InvalidJob) as refused:
        parse_job(data)
    assert str(refused.value).startswith(message)


def test_a_long_bad_value_is_cut_short_in_the_message() -> None:
    with pytest.raises(InvalidJob) as refused:
        parse_job({"run_id": "r", "store": "/s", "heartbeat_s": "x" * 500})
    assert len(str(refused.value)) < 120
