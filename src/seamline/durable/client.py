"""Submit a durable run to Temporal and stream its events back from the store.

The client keeps the run's spec in the store, starts the workflow (history holds only
the run id and the store's location) and reads the events workers write from the store,
until the run's own ``complete`` arrives: woken by LISTEN/NOTIFY on a PostgreSQL store,
polling a SQLite one (:mod:`seamline.durable.wakeup`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, Final

import msgspec
from temporalio.client import Client, WorkflowFailureError

from seamline.durable.ledger import RUN_EVENTS, RunLedger
from seamline.durable.steps import RunSpec
from seamline.durable.wakeup import StoreWakeup, open_wakeup
from seamline.durable.workflow import WORKFLOW
from seamline.errors import ProviderFailure, TransportFailure
from seamline.events import Complete, Event, decode_event
from seamline.sessions.store import open_store

__all__ = ["DEFAULT_TARGET", "DEFAULT_TASK_QUEUE", "connect", "run_report", "stream_run", "workflow_id"]

DEFAULT_TARGET: Final = "127.0.0.1:7233"
DEFAULT_TASK_QUEUE: Final = "seamline"


def workflow_id(run_id: str) -> str:
    return f"seamline-{run_id}"


def run_report(store_location: str, run_id: str) -> dict[str, Any] | None:
    """The report of a finished run (outcome, exit code, trace path), or None."""
    store = open_store(store_location)
    try:
        return RunLedger(store).report(run_id)
    finally:
        store.close()


async def connect(target: str, *, namespace: str = "default") -> Client:
    """A Temporal client, or one classified line when the server cannot be reached."""
    try:
        return await Client.connect(target, namespace=namespace)
    except Exception as exc:  # noqa: BLE001 - the SDK raises plain RuntimeErrors for transport failures
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TransportFailure(f"cannot reach Temporal at {target}: {first}") from None


async def stream_run(
    spec: RunSpec,
    *,
    target: str = DEFAULT_TARGET,
    task_queue: str = DEFAULT_TASK_QUEUE,
    namespace: str = "default",
    heartbeat_s: float = 10.0,
    turn_timeout_s: float = 3600.0,
    poll_s: float = 0.05,
) -> AsyncIterator[tuple[str, Event]]:
    """Yield ``(turn key, event)`` as workers record them; the last is the run's ``complete``
    (turn key ``run``). A workflow that ends without one raises a classified error."""
    store = open_store(spec.store)
    try:
        ledger = RunLedger(store)
        ledger.register(spec.run_id, msgspec.to_builtins(spec))
        wakeup = await open_wakeup(store, spec.store, spec.run_id, poll_s=poll_s)  # before any event is written
        try:
            async for item in _follow(spec, ledger, wakeup, target, task_queue, namespace, heartbeat_s, turn_timeout_s):
                yield item
        finally:
            await wakeup.close()
    finally:
        store.close()


async def _follow(
    spec: RunSpec,
    ledger: RunLedger,
    wakeup: StoreWakeup,
    target: str,
    task_queue: str,
    namespace: str,
    heartbeat_s: float,
    turn_timeout_s: float,
) -> AsyncIterator[tuple[str, Event]]:
    client = await connect(target, namespace=namespace)
    job: dict[str, Any] = {
        "run_id": spec.run_id,
        "store": spec.store,
        "heartbeat_s": heartbeat_s,
        "turn_timeout_s": turn_timeout_s,
    }
    handle = await client.start_workflow(WORKFLOW, job, id=workflow_id(spec.run_id), task_queue=task_queue)
    result = asyncio.ensure_future(handle.result())
    try:
        after = 0
        while True:
            rows = ledger.events_after(spec.run_id, after)
            for row_id, key, data in rows:
                after = row_id
                event = decode_event(data)
                yield key, event
                if key == RUN_EVENTS and isinstance(event, Complete):
                    return
            if rows:
                continue
            if result.done():
                raise _failure(spec.run_id, result.exception())
            await wakeup.wait(result)
    finally:
        if not result.done():
            result.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await result


def _failure(run_id: str, exc: BaseException | None) -> Exception:
    if isinstance(exc, WorkflowFailureError):
        cause: BaseException = exc
        while cause.__cause__ is not None:  # workflow -> activity -> the worker's own message
            cause = cause.__cause__
        return ProviderFailure(f"run {run_id} failed on Temporal: {cause}")
    if exc is not None:
        return TransportFailure(f"run {run_id}: lost the workflow: {type(exc).__name__}: {exc}")
    return ProviderFailure(f"run {run_id} ended on Temporal without its final event")
