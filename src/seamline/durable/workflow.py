"""The Temporal workflow of a durable run: advance, run the missing turns, repeat.

Workflow code is replayed by Temporal, so it holds no logic of its own beyond this loop
and the check of its input, and imports nothing of seamline (the sandbox stays happy,
and a change to the controller never makes old histories non-deterministic). Its
history holds only the run id, turn keys and small summaries: the turns' events live in
the store.

An input it cannot use (no ``store``, a wrong type, not decodable) fails the workflow at
once: raised as a plain exception it would fail only the workflow task, which Temporal
retries for ever.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue, RetryPolicy
from temporalio.exceptions import ApplicationError

__all__ = ["ADVANCE", "ROLE_TURN", "WORKFLOW", "InvalidJob", "Job", "PipelineWorkflow", "parse_job"]

WORKFLOW = "seamline.pipeline"
ADVANCE = "seamline.advance"
ROLE_TURN = "seamline.role_turn"

_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=5))
# An advance re-drives the controller from the store (no provider call): seconds at most.
# It heartbeats, so a dead worker's attempt is retried after the heartbeat timeout; this
# bound only ends an attempt that is alive but stuck.
_ADVANCE_TIMEOUT: Final = timedelta(minutes=10)
_NO_JOB: Final = RawValue(Payload())  # the default when a start gives no input at all
_INVALID: Final = "invalid_request"  # seamline's error kind, named here as the workflow imports no seamline


class InvalidJob(ValueError):
    """A workflow input no retry can fix; the message says what is wrong with it."""


@dataclass(frozen=True)
class Job:
    """The workflow's input, checked: which run, in which store, and its activities' timeouts."""

    run_id: str
    store: str
    heartbeat_s: float = 10.0
    turn_timeout_s: float = 3600.0


def parse_job(data: object) -> Job:
    """Check a decoded workflow input; raises :class:`InvalidJob` naming the first fault.

    >>> parse_job({"run_id": "r1", "store": "/srv/runs.db"}).heartbeat_s
    10.0
    >>> parse_job({"run_id": "r1"})
    Traceback (most recent call last):
    ...
    seamline.durable.workflow.InvalidJob: 'store' is missing
    """
    if not isinstance(data, dict):
        raise InvalidJob(f"the job must be a JSON object, got {type(data).__name__}")
    texts: dict[str, str] = {}
    for name in ("run_id", "store"):
        if name not in data:
            raise InvalidJob(f"{name!r} is missing")
        value = data[name]
        if not isinstance(value, str) or not value.strip():
            raise InvalidJob(f"{name!r} must be a non-empty string, got {_shown(value)}")
        texts[name] = value
    seconds: dict[str, float] = {}
    for name in ("heartbeat_s", "turn_timeout_s"):
        if name not in data:
            continue
        value = data[name]
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
            raise InvalidJob(f"{name!r} must be a positive number of seconds, got {_shown(value)}")
        seconds[name] = float(value)
    return Job(run_id=texts["run_id"], store=texts["store"], **seconds)


def _shown(value: object) -> str:
    """A bad value for a message: short, whatever it holds."""
    if isinstance(value, dict | list):
        return type(value).__name__
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def _decoded(job: RawValue) -> Job:
    """The job from its payload; decoding is done here, not by the SDK, so a payload no
    decoder reads (nested too deep, another encoding) fails the workflow instead of its
    task, which Temporal would retry for ever."""
    if job is _NO_JOB:
        raise InvalidJob("no job given")
    try:
        data = workflow.payload_converter().from_payload(job.payload)
    except Exception as exc:  # noqa: BLE001 - any decoding failure is the input's
        cause: BaseException | None = exc
        while cause is not None and not isinstance(cause, RecursionError):  # the converter wraps it
            cause = cause.__cause__
        problem = "nested too deep" if cause is not None else f"{type(exc).__name__}: {exc}"
        raise InvalidJob(f"the job cannot be decoded: {problem}") from None
    return parse_job(data)


@workflow.defn(name=WORKFLOW)
class PipelineWorkflow:
    """Input: ``{"run_id", "store", "heartbeat_s", "turn_timeout_s"}``; result: the run's report.

    An input it cannot use fails the workflow at once with a non-retryable
    ``invalid_request`` error naming the fault."""

    @workflow.run
    async def run(self, job: RawValue = _NO_JOB) -> dict[str, Any]:
        try:
            given = _decoded(job)
        except InvalidJob as exc:
            raise ApplicationError(f"invalid job for {WORKFLOW}: {exc}", type=_INVALID, non_retryable=True) from None
        run_id, store = given.run_id, given.store
        heartbeat = timedelta(seconds=given.heartbeat_s)
        turn_timeout = timedelta(seconds=given.turn_timeout_s)
        while True:
            step: dict[str, Any] = await workflow.execute_activity(
                ADVANCE,
                args=[store, run_id],
                start_to_close_timeout=_ADVANCE_TIMEOUT,
                heartbeat_timeout=heartbeat,
                retry_policy=_RETRY,
            )
            if step["done"]:
                report: dict[str, Any] = step["report"]
                return report
            await asyncio.gather(
                *(
                    workflow.execute_activity(
                        ROLE_TURN,
                        args=[store, run_id, key],
                        start_to_close_timeout=turn_timeout,
                        heartbeat_timeout=heartbeat,
                        retry_policy=_RETRY,
                    )
                    for key in step["needed"]
                )
            )
