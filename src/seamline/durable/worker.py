"""A Temporal worker for durable runs: the workflow and its two activities.

``seamline worker --temporal HOST:PORT --task-queue Q`` runs :func:`serve`. Any number
of workers may serve the same queue; each must reach the run's store and workspace.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any, Final

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from seamline.durable.steps import advance, run_turn
from seamline.durable.workflow import ADVANCE, ROLE_TURN, PipelineWorkflow
from seamline.errors import SeamlineError

__all__ = ["activity_failure", "advance_activity", "role_turn_activity", "serve", "worker_identity"]

_BEAT_S: Final = 5.0  # the beat's period when the activity has no heartbeat timeout


def worker_identity() -> str:
    """This worker process, as Temporal names workers by default: ``PID@HOST``."""
    return f"{os.getpid()}@{socket.gethostname()}"


def activity_failure(exc: Exception) -> Exception:
    """What an activity raises for ``exc``: a classified failure keeps its kind and, from
    its ``retryable``, whether Temporal retries it (an unknown run, a malformed spec, a
    bad store: at once failed; a transport error: retried). Data nested too deep for
    Python fails the same way on every worker, so it is not retried either. Anything
    else (a dropped connection the store did not classify, a bug) is retried as before.

    >>> activity_failure(RecursionError("maximum recursion depth exceeded")).non_retryable
    True
    """
    if isinstance(exc, SeamlineError):
        return ApplicationError(exc.message, type=exc.kind, non_retryable=not exc.retryable)
    if isinstance(exc, RecursionError):
        return ApplicationError(
            f"the run's data is nested too deep to process: {exc}", type="invalid_request", non_retryable=True
        )
    return exc


@contextlib.asynccontextmanager
async def _heartbeating() -> AsyncIterator[None]:
    """Heartbeat on a timer while the body runs, a third of the heartbeat timeout apart:
    the server tells a slow step (a long re-drive, a silent provider) from a dead worker,
    whose attempt it retries elsewhere once a heartbeat timeout passes without one. The
    SDK sends at most one heartbeat per 80 % of the timeout, so a beat per event would
    add nothing."""
    timeout = activity.info().heartbeat_timeout
    interval = timeout.total_seconds() / 3 if timeout else _BEAT_S

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(interval)

    beating = asyncio.create_task(beat())
    try:
        yield
    finally:
        beating.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beating


@activity.defn(name=ADVANCE)
async def advance_activity(store: str, run_id: str) -> dict[str, Any]:
    """One pass of the controller. A retried pass re-drives the turns finished so far from
    the store and never runs one again; a pass that already ended the run returns its
    report."""
    try:
        async with _heartbeating():
            return await advance(store, run_id)
    except Exception as exc:
        failure = activity_failure(exc)
        if failure is exc:
            raise
        raise failure from None


@activity.defn(name=ROLE_TURN)
async def role_turn_activity(store: str, run_id: str, key: str) -> dict[str, Any]:
    """One role turn; a finished turn is returned as recorded, never run again."""
    try:
        async with _heartbeating():
            return await run_turn(store, run_id, key, worker=worker_identity())
    except Exception as exc:
        failure = activity_failure(exc)
        if failure is exc:
            raise
        raise failure from None


def build_worker(
    client: Client, task_queue: str, *, max_concurrent: int = 100, sticky_timeout_s: float = 10.0
) -> Worker:
    return Worker(
        client,
        task_queue=task_queue,
        identity=worker_identity(),
        workflows=[PipelineWorkflow],
        activities=[advance_activity, role_turn_activity],
        max_concurrent_activities=max_concurrent,
        # A workflow's next task waits this long on the queue of the worker that ran its last
        # one (which keeps it cached) before any worker may take it: a killed worker's run
        # stands still that long after its turn was retried elsewhere (Temporal's 10 s).
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=sticky_timeout_s),
        # The workflow module imports nothing of seamline, but importing it runs the
        # package's __init__; seamline is deterministic import-wise, so it passes through.
        workflow_runner=SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules("seamline", "msgspec", "yaml")
        ),
    )


async def serve(
    target: str,
    task_queue: str,
    *,
    namespace: str = "default",
    max_concurrent: int = 100,
    sticky_timeout_s: float = 10.0,
    ready: asyncio.Event | None = None,
) -> None:
    """Run a worker until cancelled."""
    client = await Client.connect(target, namespace=namespace)
    worker = build_worker(client, task_queue, max_concurrent=max_concurrent, sticky_timeout_s=sticky_timeout_s)
    async with worker:
        if ready is not None:
            ready.set()
        await asyncio.Future()
