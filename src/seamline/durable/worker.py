"""A Temporal worker for durable runs: the workflow and its two activities.

``seamline worker --temporal HOST:PORT --task-queue Q`` runs :func:`serve`. Any number
of workers may serve the same queue; each must reach the run's store and workspace.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from seamline.durable.steps import advance, run_turn
from seamline.durable.workflow import ADVANCE, ROLE_TURN, PipelineWorkflow
from seamline.errors import InvalidRequest, StorageFailure

__all__ = ["advance_activity", "role_turn_activity", "serve", "worker_identity"]


def worker_identity() -> str:
    """This worker process, as Temporal names workers by default: ``PID@HOST``."""
    return f"{os.getpid()}@{socket.gethostname()}"


@activity.defn(name=ADVANCE)
async def advance_activity(store: str, run_id: str) -> dict[str, Any]:
    try:
        return await advance(store, run_id)
    except (InvalidRequest, StorageFailure) as exc:  # no such run, a malformed spec, a bad store
        raise ApplicationError(exc.message, type=exc.kind, non_retryable=True) from None


@activity.defn(name=ROLE_TURN)
async def role_turn_activity(store: str, run_id: str, key: str) -> dict[str, Any]:
    info = activity.info()
    # A provider may be silent for long (thinking, a slow tool): beat on a timer as well
    # as on every event, so the server tells a slow turn from a dead worker.
    interval = (info.heartbeat_timeout.total_seconds() / 3) if info.heartbeat_timeout else 5.0

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(interval)

    beating = asyncio.create_task(beat())
    try:
        return await run_turn(store, run_id, key, heartbeat=activity.heartbeat, worker=worker_identity())
    except (InvalidRequest, StorageFailure) as exc:
        raise ApplicationError(exc.message, type=exc.kind, non_retryable=True) from None
    finally:
        beating.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beating


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
