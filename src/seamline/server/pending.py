"""Approvals that survive the server: each permission request a run of ``seamline serve``
waits on is kept in the store (:mod:`seamline.sessions.pending`) until it is answered or
its run ends, and a server that starts on a store where a dead server left some takes
their runs up again.

Taking a run up (:func:`readopt`): the run keeps its id and is ``running`` again, with the
stored requests pending (``GET /v1/runs`` lists them, the permissions route answers them).

- A model-API session goes on from its stored transcript: the calls of its last step that
  have no result yet are approved (the stored request waits for its answer; rules and
  ``yes`` decide the others as usual) and run once, then the loop calls the model again.
- An agent CLI or ACP session (it runs its own tools) is resumed the provider's way and
  told that its call was never run; when it asks for the same call again, the new request
  says so in its reason and takes the stored request's place (an answer given to the
  stored one meanwhile decides it).
- A pipeline run of ``serve`` never waits for a person (its calls are decided by rules and
  ``yes``); a row of one is dropped.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from seamline.errors import StorageFailure
from seamline.events import PermissionRequest, ToolCall
from seamline.sessions.pending import PendingPermissions, PendingRow
from seamline.sessions.records import TranscriptEntry
from seamline.tools.permissions import PermissionAnswer

if TYPE_CHECKING:
    from seamline.server.runs import Run, RunHub

__all__ = ["AGAIN_PREFIX", "Approvals", "readopt", "unanswered_calls"]

_log = logging.getLogger("seamline.server")

AGAIN_PREFIX: Final = "asked again after a restart of seamline serve"

# A request as announced, the future its answer comes through, and whether it is new to
# the run's events (announced, stored and told of by the caller).
Waiting = tuple[PermissionRequest, "asyncio.Future[PermissionAnswer]", bool]


class Approvals:
    """The hub's side of the stored requests: what a waiting request writes and removes,
    and which request an answer given before the restart belongs to."""

    def __init__(self, table: PendingPermissions) -> None:
        self.table = table
        self._asked_again: dict[tuple[str, str], str] = {}  # (run, stored request) -> the new request

    def current(self, run: Run, request_id: str) -> str:
        """The request an answer to ``request_id`` is for: the request that asked it again
        when a stored one was asked again under a new id, else ``request_id`` itself."""
        return self._asked_again.get((run.id, request_id), request_id)

    def waiting(self, run: Run, request: PermissionRequest, turn: int) -> Waiting | None:
        """A request this run already waited on when it was taken up: the same request (a
        model API asks with the same id), or the same call asked again (an agent's new call
        id, the same tool and arguments: then the request as announced says so, the raw log
        records it, and it takes the stored one's place). ``None``: a new request."""
        held = run.pending.get(request.request_id)
        if held is not None:
            return held[0], held[1], False
        for request_id in sorted(run.again):
            old, future = run.pending[request_id]
            if old.tool == request.tool and old.arguments == request.arguments:
                run.again.discard(request_id)
                del run.pending[request_id]
                self.removed(run, request_id)
                again = marked(request, request_id)
                self._asked_again[(run.id, request_id)] = again.request_id
                self.note(run, turn, "serve.asked_again", {"request_id": again.request_id, "first": request_id})
                return again, future, True
        return None

    def note(self, run: Run, turn: int, source: str, payload: Mapping[str, Any]) -> None:
        """A row of the run's session's raw log that says what the server did."""
        if run.session_id is None:
            return
        store = self.table.store
        try:
            store.append_raw(run.session_id, turn, "out", source, json.dumps({"run_id": run.id, **payload}))
            store.flush()
        except StorageFailure:  # a note that cannot be written must not stop the run
            _log.warning("could not record %s for run %s", source, run.id)

    def stored(self, run: Run, request: PermissionRequest) -> None:
        try:
            self.table.add(run.id, run.session_id, facts(run), request)
        except StorageFailure:  # a store that fails must not stop the prompt (the request is not kept then)
            _log.warning("could not store the pending permission request %s of run %s", request.request_id, run.id)

    def removed(self, run: Run, request_id: str) -> None:
        try:
            self.table.remove(run.id, request_id)
        except StorageFailure:
            _log.warning("could not remove the pending permission request %s of run %s", request_id, run.id)

    def ended(self, run: Run) -> None:
        """The run is over: none of its requests waits any more."""
        for key in [k for k in self._asked_again if k[0] == run.id]:
            del self._asked_again[key]
        try:
            self.table.remove_run(run.id)
        except StorageFailure:
            _log.warning("could not remove the pending permission requests of run %s", run.id)


def marked(request: PermissionRequest, first: str) -> PermissionRequest:
    """An agent's call asked again after a restart, saying so."""
    reason = f"{AGAIN_PREFIX} (first asked as {first}, which went with the server)"
    if request.reason:
        reason = f"{reason}; {request.reason}"
    return PermissionRequest(
        request_id=request.request_id,
        call_id=request.call_id,
        tool=request.tool,
        arguments=request.arguments,
        reason=reason,
    )


def facts(run: Run) -> dict[str, Any]:
    """What taking ``run`` up needs besides its session's transcript."""
    return {
        "prompt": run.prompt,
        "yes": run.yes,
        "started_by": run.started_by,
        "created_at": run.created_at,
        "max_steps": run.max_steps,
        "budget_usd": run.budget_usd,
        "pipeline": run.pipeline,
    }


def unanswered_calls(entries: Sequence[TranscriptEntry]) -> list[ToolCall]:
    """The tool calls of the session's last turn that have no result, in order."""
    if not entries:
        return []
    last = max(e.turn for e in entries)
    answered = {e.call_id for e in entries if e.kind == "tool_result" and e.turn == last}
    return [
        ToolCall(call_id=e.call_id or "", name=str(e.data.get("name")), arguments=dict(e.data.get("arguments") or {}))
        for e in entries
        if e.turn == last and e.kind == "tool_call" and e.call_id not in answered
    ]


def _continue_prompt(prompt: str, rows: Sequence[PendingRow]) -> str:
    asked = ", ".join(f"{r.request.tool} {_short(r.request.arguments)}" for r in rows)
    return (
        "The server that ran this session restarted while your tool call waited for approval "
        f"({asked}); that call was not run. Continue the task you were given, asking for the "
        f"call again if you still need it. The task was: {prompt}"
    )


def _short(arguments: Mapping[str, Any]) -> str:
    text = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
    return text if len(text) <= 200 else text[:197] + "..."


async def readopt(hub: RunHub, make_run: type[Run]) -> list[str]:
    """Take up the runs whose server on this host died while they waited for approval;
    their ids. A run that cannot be taken up has its rows dropped and is logged.
    ``make_run``: :class:`~seamline.server.runs.Run` (this room does not import its hub's)."""
    table = hub.approvals.table
    runs: dict[str, list[PendingRow]] = {}
    for row in table.adopt():
        runs.setdefault(row.run_id, []).append(row)
    taken: list[str] = []
    for run_id, rows in runs.items():
        if rows[0].session_id is None or run_id in hub.runs:
            table.remove_run(run_id)
            continue
        try:
            await _take_up(hub, rows, make_run)
        except Exception as exc:  # noqa: BLE001 - one run that cannot go on must not stop the server
            _log.warning("run %s waited for approval when its server died; it cannot go on: %s", run_id, exc)
            table.remove_run(run_id)
            continue
        taken.append(run_id)
    return taken


async def _take_up(hub: RunHub, rows: Sequence[PendingRow], make_run: type[Run]) -> None:
    first = rows[0]
    info = first.run
    session_id = first.session_id
    assert session_id is not None
    record = hub.require_session(session_id)
    slot = hub.sessions.get(record.id) or await hub._revive(record, options=None, yes=bool(info.get("yes")))
    own_tools = slot.session.provider.runs_own_tools
    run = make_run(
        id=first.run_id,
        session_id=record.id,
        prompt=str(info.get("prompt") or ""),
        yes=bool(info.get("yes")),
        started_by=info.get("started_by"),
        created_at=float(info.get("created_at") or first.created_at),
        max_steps=int(info.get("max_steps") or 50),
        budget_usd=info.get("budget_usd"),
    )
    run.status = "running"
    loop = asyncio.get_running_loop()
    if own_tools:
        run.turn_prompt = _continue_prompt(run.prompt, rows)
    else:
        run.carried = unanswered_calls(hub.store.transcript(record.id))
        for call in run.carried:
            run.append(call)  # the calls as the model asked for them, before the restart
    for row in rows:
        run.pending[row.request_id] = (row.request, loop.create_future())
        run.prompted.add(row.request_id)
        if own_tools:
            run.again.add(row.request_id)
        run.append(row.request)
    hub.runs[run.id] = run
    hub.approvals.note(
        run,
        slot.session.turn,
        "serve.taken_up",
        {
            "requests": [r.request_id for r in rows],
            "from_pid": first.owner_pid,
            "how": "native" if own_tools else "transcript",
        },
    )
    slot.runs.append(run.id)
    slot.waiting += 1
    run.task = asyncio.create_task(hub._drive(slot, run, hub.turn_options(run)))
