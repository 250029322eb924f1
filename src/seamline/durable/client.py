"""Submit a durable run to Temporal and stream its events back from the store.

The client keeps the run's spec in the store, starts the workflow (history holds only
the run id and the store's location) and reads the events workers write from the store,
until the run's own ``complete`` arrives: woken by LISTEN/NOTIFY on a PostgreSQL store,
polling a SQLite one (:mod:`seamline.durable.wakeup`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

import msgspec
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.runtime import LogForwardingConfig, LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter

from seamline.durable.ledger import RUN_EVENTS, RunLedger
from seamline.durable.steps import RunSpec
from seamline.durable.wakeup import StoreWakeup, open_wakeup
from seamline.durable.workflow import WORKFLOW
from seamline.errors import InvalidRequest, ProviderFailure, SeamlineError, StorageFailure, TransportFailure
from seamline.events import Complete, Event, decode_event
from seamline.sessions.sqlite_store import open_store

__all__ = ["DEFAULT_TARGET", "DEFAULT_TASK_QUEUE", "connect", "run_report", "stream_run", "workflow_id"]

DEFAULT_TARGET: Final = "127.0.0.1:7233"
DEFAULT_TASK_QUEUE: Final = "seamline"
RECONNECT_S: Final = 300.0  # how long the client follows a run while the server is away
_BACKOFF_FIRST_S: Final = 0.2
_BACKOFF_MAX_S: Final = 5.0
_ANSWERED_S: Final = 30.0  # a wait for the result this long before failing means the server had answered


def workflow_id(run_id: str) -> str:
    return f"seamline-{run_id}"


def run_report(store_location: str, run_id: str) -> dict[str, Any] | None:
    """The report of a finished run (outcome, exit code, trace path), or None."""
    store = open_store(store_location)
    try:
        return RunLedger(store).report(run_id)
    finally:
        store.close()


@functools.cache
def _quiet_runtime() -> Runtime:
    """A Temporal runtime whose core logs go to Python logging, errors only: by default the
    core prints its retry warnings (a server restarting) on stdout, which is the run's
    output (``--json`` lines). The client reports what matters itself."""
    core = logging.getLogger("seamline.durable.temporal")
    return Runtime(
        telemetry=TelemetryConfig(
            logging=LoggingConfig(
                filter=TelemetryFilter(core_level="ERROR", other_level="ERROR"),
                forwarding=LogForwardingConfig(logger=core),
            )
        )
    )


async def connect(target: str, *, namespace: str = "default") -> Client:
    """A Temporal client, or one classified line when the server cannot be reached."""
    try:
        return await Client.connect(target, namespace=namespace, runtime=_quiet_runtime())
    except Exception as exc:  # noqa: BLE001 - the SDK raises plain RuntimeErrors for transport failures
        raise TransportFailure(f"cannot reach Temporal at {target}: {_first_line(exc)}") from None


async def stream_run(
    spec: RunSpec,
    *,
    target: str = DEFAULT_TARGET,
    task_queue: str = DEFAULT_TASK_QUEUE,
    namespace: str = "default",
    heartbeat_s: float = 10.0,
    turn_timeout_s: float = 3600.0,
    poll_s: float = 0.05,
    reconnect_s: float = RECONNECT_S,
    on_submitted: Callable[[], None] | None = None,
) -> AsyncIterator[tuple[str, Event]]:
    """Yield ``(turn key, event)`` as workers record them; the last is the run's ``complete``
    (turn key ``run``). A workflow that ends without one raises a classified error.

    Nothing is kept before the server answers: without one, the store holds no trace of the
    run. ``on_submitted`` is called once the workflow has started. While the server is away
    the client goes on reading the store and asks the server again with a bounded backoff
    (0.2 s doubling to 5 s), for ``reconnect_s`` at most."""
    client = await connect(target, namespace=namespace)  # before the store keeps anything
    store = open_store(spec.store)
    try:
        ledger = RunLedger(store)
        ledger.register(spec.run_id, msgspec.to_builtins(spec))
        job: dict[str, Any] = {
            "run_id": spec.run_id,
            "store": spec.store,
            "heartbeat_s": heartbeat_s,
            "turn_timeout_s": turn_timeout_s,
        }
        try:
            wakeup = await open_wakeup(store, spec.store, spec.run_id, poll_s=poll_s)  # before any event is written
            try:
                handle = await client.start_workflow(WORKFLOW, job, id=workflow_id(spec.run_id), task_queue=task_queue)
            except BaseException:
                await wakeup.close()
                raise
        except BaseException as exc:
            ledger.forget(spec.run_id)  # never submitted: leave nothing behind
            if isinstance(exc, Exception) and not isinstance(exc, SeamlineError):
                raise TransportFailure(f"cannot submit to Temporal at {target}: {_first_line(exc)}") from None
            raise
        if on_submitted is not None:
            on_submitted()
        try:
            async for item in _follow(spec, ledger, wakeup, handle, reconnect_s):
                yield item
        finally:
            await wakeup.close()
    finally:
        store.close()


async def _follow(
    spec: RunSpec,
    ledger: RunLedger,
    wakeup: StoreWakeup,
    handle: WorkflowHandle[Any, Any],
    reconnect_s: float,
) -> AsyncIterator[tuple[str, Event]]:
    loop = asyncio.get_running_loop()
    result: asyncio.Future[Any] | None = asyncio.ensure_future(handle.result())
    asked_at = loop.time()
    idle: asyncio.Future[None] = loop.create_future()  # never done: waits out one look at the store
    backoff, retry_at = _BACKOFF_FIRST_S, 0.0
    away_since: float | None = None  # since when the server has not answered
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
                away_since, backoff = None, _BACKOFF_FIRST_S  # the run goes on, whatever the server does
                continue
            if result is not None and result.done():
                exc = result.exception()
                if exc is None or isinstance(exc, WorkflowFailureError):
                    raise _failure(spec.run_id, exc)
                # The server is away (restarting): the workers may still be writing the
                # store; keep reading it and ask again after a bounded backoff.
                now = loop.time()
                if away_since is None or now - asked_at > _ANSWERED_S:  # a long wait: it had answered
                    away_since, backoff = now, _BACKOFF_FIRST_S
                if now - away_since > reconnect_s:
                    raise _failure(spec.run_id, exc)
                result, retry_at = None, now + backoff
                backoff = min(backoff * 2, _BACKOFF_MAX_S)
            if result is None and loop.time() >= retry_at:
                result, asked_at = asyncio.ensure_future(handle.result()), loop.time()
            await wakeup.wait(result if result is not None else idle)
    finally:
        idle.cancel()
        if result is not None:
            if not result.done():
                result.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await result


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _failure(run_id: str, exc: BaseException | None) -> Exception:
    if isinstance(exc, WorkflowFailureError):
        cause: BaseException = exc
        while cause.__cause__ is not None:  # workflow -> activity -> the worker's own message
            cause = cause.__cause__
        message = f"run {run_id} failed on Temporal: {cause}"
        if isinstance(cause, ApplicationError) and cause.type == "invalid_request":
            return InvalidRequest(message)
        if isinstance(cause, ApplicationError) and cause.type == "storage":
            return StorageFailure(message)
        return ProviderFailure(message)
    if exc is not None:
        return TransportFailure(f"run {run_id}: lost the workflow: {type(exc).__name__}: {exc}")
    return ProviderFailure(f"run {run_id} ended on Temporal without its final event")
