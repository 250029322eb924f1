"""The run routes: list, read, cancel, answer a permission request, and the event stream
(AG-UI or seamline's own, over SSE or NDJSON; ``Last-Event-ID`` resumes it)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Final

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from seamline.errors import InvalidRequest
from seamline.events import encode_event
from seamline.server.agui import AgUiTranslator
from seamline.server.api_models import (
    BudgetRaise,
    EventsQuery,
    PermissionAnswered,
    PermissionReply,
    ResumeHeaders,
    RunList,
    RunsQuery,
    RunSummary,
)
from seamline.server.inputs import read_body, whole_number
from seamline.server.operations import Reply, operation
from seamline.server.runs import Run
from seamline.server.state import run_hub
from seamline.tools.permissions import PermissionAnswer

__all__ = ["HEARTBEAT", "answer_permission", "cancel_run", "get_run", "list_runs", "raise_budget", "run_events"]

HEARTBEAT: Final = 15.0


@operation("runs this server holds", replies={200: Reply("runs", RunList)}, query=RunsQuery)
async def list_runs(request: Request) -> Response:
    return JSONResponse({"runs": run_hub(request).summaries(request.query_params.get("session_id"))})


@operation("one run", replies={200: Reply("the run", RunSummary)}, errors=(404,))
async def get_run(request: Request) -> Response:
    return JSONResponse(run_hub(request).require_run(request.path_params["run_id"]).summary())


@operation("end the run `aborted`", replies={202: Reply("the run", RunSummary)}, errors=(404,))
async def cancel_run(request: Request) -> Response:
    run = await run_hub(request).cancel(request.path_params["run_id"])
    return JSONResponse(run.summary(), status_code=202)


@operation(
    "raise the budget of a run paused at it and go on with it (409 when it is not paused)",
    replies={202: Reply("the run", RunSummary)},
    body=BudgetRaise,
    errors=(400, 404, 409, 413),
)
async def raise_budget(request: Request) -> Response:
    body = await read_body(request, BudgetRaise)
    run = run_hub(request).raise_budget(request.path_params["run_id"], body.budget_usd)
    return JSONResponse(run.summary(), status_code=202)


@operation(
    "answer a pending permission request",
    replies={200: Reply("the answer", PermissionAnswered)},
    body=PermissionReply,
    errors=(400, 404, 413),
)
async def answer_permission(request: Request) -> Response:
    body = await read_body(request, PermissionReply)
    asked = run_hub(request).answer(
        request.path_params["run_id"],
        request.path_params["request_id"],
        PermissionAnswer(body.decision, body.scope),
    )
    return JSONResponse({"request_id": asked.request_id, "decision": body.decision, "scope": body.scope})


@operation(
    "the run's events: AG-UI over SSE (default), or seamline's own over SSE or NDJSON; "
    "every SSE event has an id, and Last-Event-ID (or ?after=) resumes after it",
    replies={
        200: Reply("the event stream, until the run ends", str, media=("text/event-stream", "application/x-ndjson"))
    },
    query=EventsQuery,
    headers=ResumeHeaders,
    errors=(400, 404),
)
async def run_events(request: Request) -> Response:
    run = run_hub(request).require_run(request.path_params["run_id"])
    fmt = request.query_params.get("format", "agui")
    if fmt not in ("agui", "seamline"):
        raise InvalidRequest(f"format is agui or seamline, not {fmt!r}")
    accept = request.headers.get("accept", "")
    ndjson = request.query_params.get("stream") == "ndjson" or "application/x-ndjson" in accept
    if ndjson and fmt != "seamline":
        raise InvalidRequest("NDJSON carries the seamline format only; add format=seamline")
    last = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    base = f"{request.url.scheme}://{request.url.netloc}"
    interrupts = request.query_params.get("interrupts", "false").lower() in ("1", "true", "yes")
    if fmt == "seamline":
        after = whole_number(last.split(".")[0], "Last-Event-ID")
        stream = _ndjson(run, after) if ndjson else _seamline_sse(run, after)
        media = "application/x-ndjson" if ndjson else "text/event-stream"
    else:
        # Checked here, before the 200 goes out: a bad id is a 400, not a cut stream.
        seq_text, _, part_text = last.partition(".")
        after = whole_number(seq_text, "Last-Event-ID")
        skip = whole_number(part_text, "Last-Event-ID") + 1 if part_text else 0
        stream = _agui_sse(run, after, skip, base=base, interrupts=interrupts)
        media = "text/event-stream"
    return StreamingResponse(stream, media_type=media, headers={"cache-control": "no-cache", "x-accel-buffering": "no"})


async def _seamline_sse(run: Run, after: int) -> AsyncIterator[bytes]:
    yield b"retry: 1000\n\n"
    async for start, batch in run.follow(after, heartbeat=HEARTBEAT):
        if not batch:
            yield b": keep-alive\n\n"
            continue
        yield b"".join(
            b"id: %d\nevent: %s\ndata: %s\n\n" % (start + i, event.type.encode(), encode_event(event))
            for i, event in enumerate(batch, 1)
        )


async def _ndjson(run: Run, after: int) -> AsyncIterator[bytes]:
    async for start, batch in run.follow(after):
        yield b"".join(b'{"id":%d,"event":%s}\n' % (start + i, encode_event(event)) for i, event in enumerate(batch, 1))


async def _agui_sse(run: Run, after: int, skip: int, *, base: str, interrupts: bool) -> AsyncIterator[bytes]:
    translator = AgUiTranslator(
        run.id,
        base_url=base,
        interrupts=interrupts,
        pipeline=run.pipeline,
        first_phase=run.first_phase,
        asked=run.asked,
    )
    # Replay what the reader already had, so the translation state is the same as before.
    for seen in run.events[: max(0, after - (1 if skip else 0))]:
        for _ in translator.feed(seen):
            pass
    start = after - 1 if skip else after
    yield b"retry: 1000\n\n"
    async for first, batch in run.follow(start, heartbeat=HEARTBEAT):
        if not batch:
            yield b": keep-alive\n\n"
            continue
        frames: list[bytes] = []
        for index, event in enumerate(batch, first + 1):
            for k, out in enumerate(translator.feed(event)):
                if index == after and k < skip:
                    continue
                frames.append(b"id: %d.%d\ndata: %s\n\n" % (index, k, out.model_dump_json(by_alias=True).encode()))
                if interrupts and translator.finished:
                    yield b"".join(frames)
                    return
        if frames:
            yield b"".join(frames)
