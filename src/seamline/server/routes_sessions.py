"""The session routes: list, open, read, remove, fork, transcript, revert, and a run on one."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from seamline.server.api_models import (
    ForkRequest,
    NewRun,
    NewSession,
    Removed,
    Reverted,
    RevertRequest,
    RunSummary,
    SessionList,
    SessionRow,
    SessionsQuery,
    Transcript,
)
from seamline.server.inputs import read_body, whole_number
from seamline.server.operations import Reply, operation
from seamline.server.runs import LiveSession, RunHub
from seamline.server.state import run_hub, session_store
from seamline.sessions.portable_store import SessionStore
from seamline.sessions.records import SessionRecord, session_title

__all__ = [
    "create_session",
    "delete_session",
    "fork_session",
    "get_session",
    "list_sessions",
    "revert_session",
    "session_row",
    "start_run",
    "transcript",
]


def session_row(store: SessionStore, hub: RunHub, record: SessionRecord) -> dict[str, Any]:
    """A session as the API shows it (:class:`SessionRow`)."""
    totals = store.totals(record.id, include_descendants=False)
    live = hub.sessions.get(record.id)
    return {
        **asdict(record),
        "cost_usd": totals.cost_usd if totals.cost_known else None,
        "input_tokens": totals.input_tokens,
        "output_tokens": totals.output_tokens,
        "live": live is not None,
        "busy": live.busy if live is not None else False,
        "runs": list(live.runs) if live is not None else [],
        "title": session_title(_first_prompt(store, hub, record.id)),
    }


def _first_prompt(store: SessionStore, hub: RunHub, session_id: str) -> str | None:
    """The stored first prompt; before the first turn's rows are committed (the provider's
    first answer, seconds later), the prompt of the first run this server started on it."""
    stored = store.first_prompt(session_id)
    if stored is not None:
        return stored
    live = hub.sessions.get(session_id)
    first = hub.runs.get(live.runs[0]) if live is not None and live.runs else None
    return first.prompt if first is not None else None


def _live_row(request: Request, slot: LiveSession) -> dict[str, Any]:
    store = session_store(request)
    return session_row(store, run_hub(request), store.require(slot.session.session_id))


@operation(
    "stored sessions, newest first, with status, cost and provider",
    replies={200: Reply("sessions", SessionList)},
    query=SessionsQuery,
    errors=(400,),
)
async def list_sessions(request: Request) -> Response:
    store, hub = session_store(request), run_hub(request)
    limit = whole_number(request.query_params.get("limit", "100"), "limit", most=10_000)
    return JSONResponse({"sessions": [session_row(store, hub, r) for r in store.list_sessions(limit=limit)]})


@operation("open a session", replies={201: Reply("the new session", SessionRow)}, body=NewSession, errors=(400, 413))
async def create_session(request: Request) -> Response:
    body = await read_body(request, NewSession)
    slot = await run_hub(request).open_session(
        provider=body.provider,
        model=body.model,
        options=body.options,
        workspace=body.workspace,
        yes=body.yes,
        metadata=body.metadata,
        agent=body.agent,
    )
    return JSONResponse(_live_row(request, slot), status_code=201)


@operation("one session", replies={200: Reply("the session", SessionRow)}, errors=(400, 404))
async def get_session(request: Request) -> Response:
    hub = run_hub(request)
    record = hub.require_session(request.path_params["session_id"])
    return JSONResponse(session_row(session_store(request), hub, record))


@operation(
    "remove a session and everything recorded of it",
    replies={200: Reply("removed", Removed)},
    errors=(400, 404, 409),
)
async def delete_session(request: Request) -> Response:
    removed = await run_hub(request).delete_session(request.path_params["session_id"])
    return JSONResponse({"removed": removed})


@operation(
    "a new session from this one's history (up to message `at`)",
    replies={201: Reply("the fork", SessionRow)},
    body=ForkRequest,
    errors=(400, 404, 413),
)
async def fork_session(request: Request) -> Response:
    body = await read_body(request, ForkRequest)
    slot = await run_hub(request).fork_session(
        request.path_params["session_id"], at=body.at, options=body.options, yes=body.yes
    )
    return JSONResponse(_live_row(request, slot), status_code=201)


@operation(
    "the canonical transcript and the files touched", replies={200: Reply("transcript", Transcript)}, errors=(400, 404)
)
async def transcript(request: Request) -> Response:
    store = session_store(request)
    record = run_hub(request).require_session(request.path_params["session_id"])
    return JSONResponse(
        {
            "session_id": record.id,
            "entries": [asdict(e) for e in store.transcript(record.id)],
            "files": [asdict(f) for f in store.files_touched(record.id)],
        }
    )


@operation(
    "undo the session's journaled workspace edits (after step `to_step`)",
    replies={200: Reply("what was undone", Reverted)},
    body=RevertRequest,
    errors=(400, 404, 409, 413),
)
async def revert_session(request: Request) -> Response:
    body = await read_body(request, RevertRequest)
    hub = run_hub(request)
    return JSONResponse(hub.revert(request.path_params["session_id"], to_step=body.to_step, force=body.force))


@operation(
    "run a turn; busy sessions reject (409) or enqueue, as asked",
    replies={201: Reply("the run", RunSummary)},
    body=NewRun,
    errors=(400, 404, 409, 413),
)
async def start_run(request: Request) -> Response:
    body = await read_body(request, NewRun)
    run = await run_hub(request).start_run(
        request.path_params["session_id"],
        body.prompt,
        busy=body.busy,
        max_steps=body.max_steps,
        budget_usd=body.budget_usd,
        options=body.options,
        yes=body.yes,
        on_budget=body.on_budget,
    )
    return JSONResponse(run.summary(), status_code=201, headers={"location": f"/v1/runs/{run.id}"})
