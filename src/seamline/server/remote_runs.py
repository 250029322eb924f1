"""``seamline serve --on temporal``: runs that execute on Temporal workers, read from the store.

The server keeps no run in memory. Starting a run writes its spec to the store and starts
its workflow (as ``seamline run --on temporal`` does); reading one asks the store
(``durable_runs``, ``durable_turns``, ``durable_events``); following one reads the rows
workers write, woken by one LISTEN connection per server process that fans each
notification out to the streams of that run (:class:`RunEventsFanout`). Every server on
the same store therefore sees every run, and an event's number (its place in the run,
from 1) is the same on each: a client that follows with ``Last-Event-ID`` may move from
one server to another and read on without a gap or a repeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import msgspec

from seamline.durable.ledger import RUN_EVENTS, RunLedger
from seamline.durable.wakeup import CHANNEL
from seamline.errors import InvalidRequest, TransportFailure
from seamline.events import Complete, Event, PermissionRequest, Usage, decode_event
from seamline.providers.pause import OnBudget
from seamline.server.runs import NotFound, Run, RunHub, RunStatus
from seamline.tools.permissions import PermissionAnswer

if TYPE_CHECKING:
    from temporalio.client import Client

__all__ = ["DurableTarget", "RemoteRunHub", "RunEventsFanout", "StoredRun"]

_LOG = logging.getLogger(__name__)
_RUN_ID: Final = re.compile(r"^[0-9a-f]{32}$")
_POLL_S: Final = 0.05  # an SQLite store has no channel: a follower looks this often


@dataclass(frozen=True)
class DurableTarget:
    """Where runs go: the Temporal frontend and task queue, and the store's full location
    (workers open it too, so a URL keeps its password here and only here).
    ``fallback_s``: how often a follower looks at a PostgreSQL store without a
    notification (a lost one costs that much latency, never an event)."""

    temporal: str
    task_queue: str
    store: str
    namespace: str = "default"
    heartbeat_s: float = 10.0
    fallback_s: float = 1.0


class RunEventsFanout:
    """One LISTEN connection for the whole server, woken per run: each follower waits on
    its run's id; a notification wakes every follower of that run, in this process."""

    def __init__(self, location: str | None, *, fallback_s: float) -> None:
        self.location = location  # None: no channel (SQLite), followers poll
        self.fallback_s = fallback_s if location is not None else _POLL_S
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._task: asyncio.Task[None] | None = None
        self.heard = 0  # notifications received (for status and tests)
        self.listening = asyncio.Event()  # set while the LISTEN connection is up

    def _ensure_listening(self) -> None:
        if self.location is not None and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._listen(self.location))

    async def _listen(self, location: str) -> None:
        from seamline.sessions.changes import listen

        while True:  # a dropped connection is opened again; followers poll meanwhile
            try:
                conn = await listen(location, CHANNEL)
                try:
                    self.wake_all()  # rows may have come while no one listened
                    self.listening.set()
                    async for note in conn.notifies():
                        self.heard += 1
                        for waiter in self._waiters.get(note.payload, ()):
                            waiter.set()
                finally:
                    self.listening.clear()
                    await conn.close()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the database restarting: listen again
                _LOG.warning("listening for run events failed (%s); again in 1 s", type(exc).__name__)
                await asyncio.sleep(1.0)

    def wake_all(self) -> None:
        for waiters in self._waiters.values():
            for waiter in waiters:
                waiter.set()

    async def wait(self, run_id: str, timeout: float) -> bool:
        """Wait for a notification about the run, ``timeout`` seconds at most; whether one came."""
        self._ensure_listening()
        waiter = asyncio.Event()
        self._waiters.setdefault(run_id, set()).add(waiter)
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await waiter.wait()
            return waiter.is_set()
        finally:
            found = self._waiters.get(run_id)
            if found is not None:
                found.discard(waiter)
                if not found:
                    del self._waiters[run_id]

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


class StoredRun(Run):
    """A durable run as the store holds it now: its events so far (numbered from 1, as
    every server numbers them) and its end, once there is one."""

    def __init__(self, hub: RemoteRunHub, run_id: str, spec: Mapping[str, Any], report: Mapping[str, Any] | None):
        definition = spec.get("definition") or {}
        phases = definition.get("phases") or [{}]
        super().__init__(
            id=run_id,
            session_id=None,
            prompt=str(spec.get("task", "")),
            pipeline=str(definition.get("name") or "single"),
            first_phase=phases[0].get("name"),
            yes=bool(spec.get("yes")),
        )
        self._hub = hub
        self._last_row = 0
        self._ended = False
        self.report = dict(report) if report is not None else None
        self._read_more()

    def _read_more(self, most: int = 1000) -> list[Event]:
        """The events written since the last look (at most ``most``), kept in order."""
        rows = self._hub.ledger.events_after(self.id, self._last_row, limit=most)
        fresh: list[Event] = []
        for row_id, key, data in rows:
            self._last_row = row_id
            event = decode_event(data)
            fresh.append(event)
            if key == RUN_EVENTS and isinstance(event, Complete):
                self._ended = True
                self.stop_reason = event.stop_reason
        self.events.extend(fresh)
        if len(rows) == most:
            fresh += self._read_more(most)
        return fresh

    @property
    def done(self) -> bool:
        return self._ended

    async def follow(
        self, after: int = 0, *, heartbeat: float | None = None, most: int = 256
    ) -> AsyncIterator[tuple[int, list[Event]]]:
        """As :meth:`Run.follow`, from the store: the events numbered above ``after`` as
        workers write them, until the run's own ``complete``."""
        index = max(0, after)
        loop = asyncio.get_running_loop()
        fanout = self._hub.fanout
        quiet_since = looked_at = loop.time()
        while True:
            if index < len(self.events):
                batch = self.events[index : index + most]
                yield index, batch
                index += len(batch)
                quiet_since = loop.time()
                continue
            if self._ended or self._hub.closing:
                return
            now = loop.time()
            until = looked_at + fanout.fallback_s  # the next look without a notification
            if heartbeat is not None:
                until = min(until, quiet_since + heartbeat)
            woken = await fanout.wait(self.id, max(0.0, until - now))
            now = loop.time()
            # The store is read when a notification says so or the fallback interval passed,
            # never on a keep-alive's account.
            if woken or now - looked_at >= fanout.fallback_s:
                looked_at = now
                if self._read_more():
                    continue
            if heartbeat is not None and now - quiet_since >= heartbeat:
                quiet_since = now
                yield index, []

    def summary(self) -> dict[str, Any]:
        status: RunStatus = "queued" if not self.events else "running"
        if self.report is not None:
            outcome = str(self.report.get("outcome", "failed"))
            status = outcome if outcome in ("completed", "failed", "aborted", "budget") else "failed"  # type: ignore[assignment]
            self.stop_reason = self.report.get("stop_reason")
        tokens_in = tokens_out = 0
        cost: float | None = 0.0
        for event in self.events:
            if isinstance(event, Usage):
                tokens_in += event.input_tokens
                tokens_out += event.output_tokens
                cost = None if cost is None or event.cost_usd is None else cost + event.cost_usd
        self.status, self.input_tokens, self.output_tokens, self.cost_usd = status, tokens_in, tokens_out, cost
        found = super().summary()
        found["on"] = "temporal"
        return found


class RemoteRunHub(RunHub):
    """The hub of ``serve --on temporal``: pipelines (a plain run is the ``single``
    pipeline) are submitted to Temporal; runs are read from the store, whichever server
    started them."""

    def __init__(
        self,
        *args: Any,
        durable: DurableTarget,
        options_for: Callable[[str, Mapping[str, str]], dict[str, str]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.durable = durable
        self.ledger = RunLedger(self.store)
        self.options_for = options_for or (lambda name, options: dict(options))
        postgres = self.store.dialect == "postgres"
        self.fanout = RunEventsFanout(durable.store if postgres else None, fallback_s=durable.fallback_s)
        self._client: Client | None = None
        self.closing = False  # the server is stopping: streams end

    async def _temporal(self) -> Client:
        if self._client is None:
            from seamline.durable.client import connect

            self._client = await connect(self.durable.temporal, namespace=self.durable.namespace)
        return self._client

    async def start_run(self, session_id: str, prompt: str, **_: Any) -> Run:
        raise InvalidRequest(
            "this server runs on Temporal: a run there is a pipeline of its own sessions; "
            "start one with POST /v1/pipelines/single/runs"
        )

    async def start_pipeline(
        self,
        name: str,
        prompt: str,
        *,
        provider: str | None = None,
        model: str | None = None,
        options: Mapping[str, str] | None = None,
        workspace: str | None = None,
        yes: bool = False,
        max_steps: int = 50,
        budget_usd: float | None = None,
        agent: str | None = None,
        on_budget: OnBudget | None = None,
        run_id: str | None = None,
    ) -> Run:
        """Keep the run's spec and start its workflow; with ``run_id`` (a client's retry
        after a lost reply) a run already started is returned, not started twice. A budget
        that pauses is not offered on Temporal yet (400)."""
        from seamline.durable.client import workflow_id
        from seamline.durable.steps import RunSpec
        from seamline.durable.workflow import WORKFLOW
        from seamline.runner import RunOptions

        if on_budget == "pause":
            raise InvalidRequest('on_budget "pause" is not offered by a server on Temporal yet; use "fail"')
        if run_id is not None and not _RUN_ID.match(run_id):
            raise InvalidRequest("a run id is 32 lower-case hex digits")
        definition, given, _, budget = self._pipeline_request(
            name, prompt, max_steps, provider=provider, model=model, options=dict(options or {}),
            workspace=workspace, yes=yes, agent=agent, budget_usd=budget_usd,
        )  # fmt: skip
        assert isinstance(given.provider, str)  # a plan names its provider
        given = RunOptions(
            provider=given.provider,
            model=given.model,
            options=self.options_for(given.provider, dict(given.options or {})),
            workspace=given.workspace,
            yes=given.yes,
            max_steps=given.max_steps,
            budget_usd=budget,
        )
        run_id = run_id or uuid.uuid4().hex
        spec = RunSpec.of(given, run_id=run_id, definition=definition, task=prompt, store=self.durable.store)
        client = await self._temporal()
        self.ledger.register(run_id, msgspec.to_builtins(spec))  # a retry keeps the first spec
        job = {"run_id": run_id, "store": self.durable.store, "heartbeat_s": self.durable.heartbeat_s}
        from temporalio.exceptions import WorkflowAlreadyStartedError

        try:
            await client.start_workflow(WORKFLOW, job, id=workflow_id(run_id), task_queue=self.durable.task_queue)
        except WorkflowAlreadyStartedError:
            pass  # the same run asked again: it is on its way
        except Exception as exc:  # noqa: BLE001 - the SDK raises plain errors for transport failures
            if self.ledger.report(run_id) is None and not self.ledger.events_after(run_id, 0, limit=1):
                self.ledger.forget(run_id)  # never submitted: leave nothing behind
            raise TransportFailure(f"cannot submit to Temporal at {self.durable.temporal}: {exc}") from None
        return self.require_run(run_id)

    def require_run(self, run_id: str) -> Run:
        rows = self.store._query(
            "SELECT spec, report, created_at, finished_at FROM durable_runs WHERE run_id = ?", (run_id,)
        )
        if not rows:
            raise NotFound(f"no run {run_id!r} in this server's store")
        spec, report, created_at, finished_at = rows[0]
        run = StoredRun(self, run_id, json.loads(spec), json.loads(report) if report else None)
        run.created_at = float(created_at)
        run.finished_at = float(finished_at) if finished_at is not None else None
        return run

    def summaries(self, session_id: str | None = None, *, most: int = 200) -> list[dict[str, Any]]:
        """The newest runs in the store (durable runs have no session of the server's)."""
        if session_id is not None:
            return []
        rows = self.store._query("SELECT run_id FROM durable_runs ORDER BY created_at DESC LIMIT ?", (most,))
        return [self.require_run(str(row[0])).summary() for row in rows]

    async def cancel(self, run_id: str) -> Run:
        """Ask Temporal to cancel the run's workflow (the workers end it)."""
        from seamline.durable.client import workflow_id

        run = self.require_run(run_id)
        if run.done:
            return run
        client = await self._temporal()
        try:
            await client.get_workflow_handle(workflow_id(run_id)).cancel()
        except Exception as exc:  # noqa: BLE001 - the SDK raises plain errors for transport failures
            raise TransportFailure(f"cannot cancel run {run_id} on Temporal: {exc}") from None
        return run

    def answer(self, run_id: str, request_id: str, answer: PermissionAnswer) -> PermissionRequest:
        self.require_run(run_id)
        raise NotFound(f"run {run_id} has no pending permission request {request_id!r} (runs on Temporal ask none)")

    def stop_runs(self) -> None:
        """End the streams (the runs are the workers' and go on)."""
        self.closing = True
        self.fanout.wake_all()

    async def close(self) -> None:
        await self.fanout.close()
        await super().close()
