"""The HTTP API v1 and the web page, on Starlette: routes mapped onto a :class:`RunHub`.

Every error is one JSON object ``{"error": {"kind", "message"}}`` with a fitting status:
400 bad input, 401 token, 403 host or origin (or a refused provider), 404 unknown session,
run or request, 409 a busy session, 413 an oversized body, 502 or 504 the backend failed.
docs/serve.md describes each route; docs/openapi.json is the pinned document (built by
:func:`seamline.server.openapi.openapi_document`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import asdict
from importlib import resources
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from seamline.errors import InvalidRequest, SeamlineError
from seamline.events import encode_event
from seamline.providers.base import Provider
from seamline.providers.registry import create_provider, provider_class, provider_names
from seamline.server.agents_file import AgentSpec, ServePolicy, UnknownAgent
from seamline.server.agui import AgUiTranslator
from seamline.server.agui_route import agui_routes
from seamline.server.guard import BodyTooLarge, Guard
from seamline.server.openapi import openapi_document
from seamline.server.runs import Busy, LiveSession, NotFound, Run, RunHub
from seamline.sessions.records import SessionRecord, session_title
from seamline.sessions.store import SessionStore
from seamline.tools.permissions import PermissionAnswer

__all__ = ["MAX_BODY", "create_app"]

MAX_BODY: Final = 1_000_000
HEARTBEAT: Final = 15.0
T = TypeVar("T")


class NewSession(msgspec.Struct, forbid_unknown_fields=True):
    provider: str | None = None  # the safe defaults' "offline" unless an agent is named
    agent: str | None = None
    model: str | None = None
    options: dict[str, str] = {}
    workspace: str | None = None
    yes: bool = False
    metadata: dict[str, Any] = {}


class NewRun(msgspec.Struct, forbid_unknown_fields=True):
    prompt: str
    busy: Literal["reject", "enqueue"] = "reject"
    max_steps: int = 50
    budget_usd: float | None = None
    options: dict[str, str] = {}
    yes: bool = False


class NewPipelineRun(msgspec.Struct, forbid_unknown_fields=True):
    prompt: str
    provider: str | None = None
    agent: str | None = None
    model: str | None = None
    options: dict[str, str] = {}
    workspace: str | None = None
    yes: bool = False
    max_steps: int = 50
    budget_usd: float | None = None


class ForkRequest(msgspec.Struct, forbid_unknown_fields=True):
    at: int | None = None
    options: dict[str, str] = {}
    yes: bool = False


class RevertRequest(msgspec.Struct, forbid_unknown_fields=True):
    to_step: int = 0
    force: bool = False


class PermissionReply(msgspec.Struct, forbid_unknown_fields=True):
    decision: Literal["allow", "deny"]
    scope: Literal["once", "session", "always"] = "once"


def _error(status: int, kind: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"kind": kind, "message": message}}, status_code=status)


def _guarded(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """Classified errors become JSON replies; nothing else is caught."""

    async def route(request: Request) -> Response:
        try:
            return await handler(request)
        except (NotFound, UnknownAgent) as exc:
            return _error(404, "not_found", exc.message)
        except Busy as exc:
            return _error(409, "busy", exc.message)
        except BodyTooLarge as exc:
            return _error(413, "invalid_request", str(exc))
        except SeamlineError as exc:
            return _error(_STATUS_OF_KIND.get(exc.kind, 502), exc.kind, exc.message)

    return route


async def _body(request: Request, kind: type[T]) -> T:
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise InvalidRequest("send the body as JSON (Content-Type: application/json)")
    raw = await request.body()
    try:
        return msgspec.json.decode(raw or b"{}", type=kind)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(f"invalid body: {exc}") from None
    except msgspec.DecodeError as exc:
        raise InvalidRequest(f"malformed JSON: {exc}") from None
    except UnicodeDecodeError as exc:  # msgspec's error for such bytes inside a string
        raise InvalidRequest(f"malformed JSON: not UTF-8: {exc}") from None
    except RecursionError:  # msgspec's error for arrays and objects nested too deep
        raise InvalidRequest("malformed JSON: nested too deep") from None


def _session_row(store: SessionStore, hub: RunHub, record: SessionRecord) -> dict[str, Any]:
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
        "title": session_title(store.first_prompt(record.id)),
    }


def create_app(
    store: SessionStore,
    *,
    workspace: str = ".",
    token: str | None = None,
    hosts: tuple[str, ...] = (),
    max_body: int = MAX_BODY,
    cancel_grace: float = 2.0,
    keep_finished: int = 1000,
    close_store: bool = False,
    agents: Mapping[str, AgentSpec] | None = None,
    allow_origins: tuple[str, ...] = (),
    sandbox: str = "auto",
    egress_allow: tuple[str, ...] = (),
) -> Guard:
    """The ASGI application of ``seamline serve`` over ``store``. The newest
    ``keep_finished`` finished runs stay readable; older ones are forgotten (their events
    stay in the store's raw log). ``agents``: the operator's declared agents (see
    :mod:`seamline.server.agents_file`); clients get the safe defaults besides them.
    ``allow_origins``: exact origins (``scheme://host[:port]``) whose pages may call the API.

    >>> from seamline.sessions.store import SQLiteStore
    >>> app = create_app(SQLiteStore(":memory:"))
    """
    policy = ServePolicy(Path(workspace), agents, sandbox=sandbox)
    from seamline.providers.envelope_launch import operator_envelope

    def backend(name: str, model: str | None, options: Mapping[str, str]) -> Provider:
        # A backend that runs programs runs in the envelope unless the operator said none.
        # A declared agent's own sandbox (only the operator can set it) wins over the default.
        mode = options.get("sandbox", sandbox)
        merged = operator_envelope(provider_class(name), options, mode=mode, allow_hosts=egress_allow)
        return create_provider(name, model=model, options=merged)

    hub = RunHub(
        store,
        workspace=workspace,
        cancel_grace=cancel_grace,
        keep_finished=keep_finished,
        policy=policy,
        provider_factory=backend,
    )

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await hub.close()
            if close_store:
                store.close()

    async def info(request: Request) -> Response:
        from ag_ui.core import PROTOCOL_VERSION

        from seamline._version import __version__

        return JSONResponse(
            {
                "name": "seamline",
                "version": __version__,
                "api": "v1",
                "agui_protocol_version": PROTOCOL_VERSION,
                "formats": ["agui", "seamline"],
                "store": store.location,
                "auth": token is not None,
            }
        )

    async def providers(request: Request) -> Response:
        check = request.query_params.get("preflight", "true").lower() not in ("0", "false", "no")
        rows: list[dict[str, Any]] = []
        for name in provider_names():
            try:
                cls = provider_class(name)
            except SeamlineError as exc:
                rows.append({"name": name, "error": exc.message})
                continue
            caps = cls.capabilities()
            rows.append(
                {
                    "name": name,
                    "description": cls.description,
                    "default_model": cls.default_model,
                    "capabilities": {f: getattr(caps, f) for f in caps.__struct_fields__},
                }
            )
        if check:
            await asyncio.gather(*(_preflight(row) for row in rows if "error" not in row))
        return JSONResponse({"providers": rows})

    async def list_sessions(request: Request) -> Response:
        limit = _int(request.query_params.get("limit", "100"), "limit", most=10_000)
        return JSONResponse({"sessions": [_session_row(store, hub, r) for r in store.list_sessions(limit=limit)]})

    async def create_session(request: Request) -> Response:
        body = await _body(request, NewSession)
        slot = await hub.open_session(
            provider=body.provider,
            model=body.model,
            options=body.options,
            workspace=body.workspace,
            yes=body.yes,
            metadata=body.metadata,
            agent=body.agent,
        )
        return JSONResponse(_live_row(slot), status_code=201)

    def _live_row(slot: LiveSession) -> dict[str, Any]:
        return _session_row(store, hub, store.require(slot.session.session_id))

    async def get_session(request: Request) -> Response:
        record = hub.require_session(request.path_params["session_id"])
        return JSONResponse(_session_row(store, hub, record))

    async def delete_session(request: Request) -> Response:
        removed = await hub.delete_session(request.path_params["session_id"])
        return JSONResponse({"removed": removed})

    async def fork_session(request: Request) -> Response:
        body = await _body(request, ForkRequest)
        slot = await hub.fork_session(request.path_params["session_id"], at=body.at, options=body.options, yes=body.yes)
        return JSONResponse(_live_row(slot), status_code=201)

    async def transcript(request: Request) -> Response:
        record = hub.require_session(request.path_params["session_id"])
        return JSONResponse(
            {
                "session_id": record.id,
                "entries": [asdict(e) for e in store.transcript(record.id)],
                "files": [asdict(f) for f in store.files_touched(record.id)],
            }
        )

    async def revert(request: Request) -> Response:
        body = await _body(request, RevertRequest)
        return JSONResponse(hub.revert(request.path_params["session_id"], to_step=body.to_step, force=body.force))

    async def start_run(request: Request) -> Response:
        body = await _body(request, NewRun)
        run = await hub.start_run(
            request.path_params["session_id"],
            body.prompt,
            busy=body.busy,
            max_steps=body.max_steps,
            budget_usd=body.budget_usd,
            options=body.options,
            yes=body.yes,
        )
        return JSONResponse(run.summary(), status_code=201, headers={"location": f"/v1/runs/{run.id}"})

    async def list_runs(request: Request) -> Response:
        wanted = request.query_params.get("session_id")
        runs = [r.summary() for r in hub.runs.values() if wanted is None or r.session_id == wanted]
        return JSONResponse({"runs": runs})

    async def get_run(request: Request) -> Response:
        return JSONResponse(hub.require_run(request.path_params["run_id"]).summary())

    async def cancel_run(request: Request) -> Response:
        run = await hub.cancel(request.path_params["run_id"])
        return JSONResponse(run.summary(), status_code=202)

    async def answer_permission(request: Request) -> Response:
        body = await _body(request, PermissionReply)
        asked = hub.answer(
            request.path_params["run_id"],
            request.path_params["request_id"],
            PermissionAnswer(body.decision, body.scope),
        )
        return JSONResponse({"request_id": asked.request_id, "decision": body.decision, "scope": body.scope})

    async def events(request: Request) -> Response:
        run = hub.require_run(request.path_params["run_id"])
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
            after = _int(last.split(".")[0], "Last-Event-ID")
            stream = _ndjson(run, after) if ndjson else _seamline_sse(run, after)
            media = "application/x-ndjson" if ndjson else "text/event-stream"
        else:
            # Checked here, before the 200 goes out: a bad id is a 400, not a cut stream.
            seq_text, _, part_text = last.partition(".")
            after = _int(seq_text, "Last-Event-ID")
            skip = _int(part_text, "Last-Event-ID") + 1 if part_text else 0
            stream = _agui_sse(run, after, skip, base=base, interrupts=interrupts)
            media = "text/event-stream"
        return StreamingResponse(
            stream, media_type=media, headers={"cache-control": "no-cache", "x-accel-buffering": "no"}
        )

    async def traces(request: Request) -> Response:
        from seamline.trace.verify import verify_trace
        from seamline.trace.writer import trace_path

        path = trace_path(request.path_params["run_id"], store_path=store.location)
        if not path.is_file():
            raise NotFound(f"no trace for run {request.path_params['run_id']!r}")
        verification = verify_trace(path)
        summary = verification.summary()
        if request.url.path.endswith("/verify"):
            return JSONResponse(
                {"ok": verification.ok, "replayable": verification.replayable, "problems": verification.problems}
            )
        return JSONResponse(summary)

    async def pipelines(request: Request) -> Response:
        from seamline.pipeline.builtin import BUILTIN_PIPELINES

        return JSONResponse({"pipelines": sorted(BUILTIN_PIPELINES)})

    async def start_pipeline(request: Request) -> Response:
        body = await _body(request, NewPipelineRun)
        run = await hub.start_pipeline(
            request.path_params["name"],
            body.prompt,
            provider=body.provider,
            model=body.model,
            options=body.options,
            workspace=body.workspace,
            yes=body.yes,
            max_steps=body.max_steps,
            budget_usd=body.budget_usd,
            agent=body.agent,
        )
        return JSONResponse(run.summary(), status_code=201, headers={"location": f"/v1/runs/{run.id}"})

    async def list_agents(request: Request) -> Response:
        return JSONResponse({"agents": [spec.public() for spec in policy.agents.values()]})

    async def openapi(request: Request) -> Response:
        return JSONResponse(openapi_document())

    async def page(request: Request) -> Response:
        name = request.path_params.get("name", "index.html")
        if name not in _PAGE_FILES:
            raise NotFound(f"no file {name!r}")
        data = resources.files("seamline.server").joinpath("page", name).read_bytes()
        return Response(data, media_type=_PAGE_FILES[name], headers=_PAGE_HEADERS)

    table: dict[str, dict[str, Callable[[Request], Awaitable[Response]]]] = {
        "/": {"GET": page},
        "/page/{name}": {"GET": page},
        "/v1/openapi.json": {"GET": openapi},
        "/v1/info": {"GET": info},
        "/v1/providers": {"GET": providers},
        "/v1/agents": {"GET": list_agents},
        "/v1/sessions": {"GET": list_sessions, "POST": create_session},
        "/v1/sessions/{session_id}": {"GET": get_session, "DELETE": delete_session},
        "/v1/sessions/{session_id}/fork": {"POST": fork_session},
        "/v1/sessions/{session_id}/transcript": {"GET": transcript},
        "/v1/sessions/{session_id}/revert": {"POST": revert},
        "/v1/sessions/{session_id}/runs": {"POST": start_run},
        "/v1/runs": {"GET": list_runs},
        "/v1/runs/{run_id}": {"GET": get_run},
        "/v1/runs/{run_id}/events": {"GET": events},
        "/v1/runs/{run_id}/cancel": {"POST": cancel_run},
        "/v1/runs/{run_id}/permissions/{request_id}": {"POST": answer_permission},
        "/v1/pipelines": {"GET": pipelines},
        "/v1/pipelines/{name}/runs": {"POST": start_pipeline},
        "/v1/traces/{run_id}": {"GET": traces},
        "/v1/traces/{run_id}/verify": {"GET": traces},
        **agui_routes(hub),
    }
    # One route per path, so a 405 names every method the path has (Allow).
    routes = [Route(path, _guarded(_by_method(handlers)), methods=list(handlers)) for path, handlers in table.items()]

    async def not_found(request: Request, exc: Exception) -> Response:
        return _error(404, "not_found", f"no route {request.method} {request.url.path}")

    async def not_allowed(request: Request, exc: Exception) -> Response:
        reply = _error(405, "invalid_request", f"{request.method} is not allowed on {request.url.path}")
        reply.headers.update(getattr(exc, "headers", None) or {})  # Allow: the methods there are
        return reply

    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={404: not_found, 405: not_allowed})
    app.state.hub = hub
    guard = Guard(app, hosts=hosts, token=token, max_body=max_body, allow_origins=allow_origins)
    guard.hub = hub
    return guard


# A classified error's HTTP status: the client's mistake, a refusal, or the backend's trouble.
_STATUS_OF_KIND: Final = {"invalid_request": 400, "permission": 403, "sandbox": 403, "budget": 400, "timeout": 504}

# The page loads only its own files and is framed by no one (clickjacking).
_PAGE_HEADERS: Final = {
    "cache-control": "no-cache",
    "content-security-policy": "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
}

_PAGE_FILES: Final = {
    "index.html": "text/html; charset=utf-8",
    "page.js": "text/javascript; charset=utf-8",
    "page.css": "text/css; charset=utf-8",
}


def _by_method(
    handlers: dict[str, Callable[[Request], Awaitable[Response]]],
) -> Callable[[Request], Awaitable[Response]]:
    def dispatch(request: Request) -> Awaitable[Response]:
        return handlers[request.method if request.method != "HEAD" else "GET"](request)

    return dispatch


def _int(value: str, name: str, *, most: int = 2**62) -> int:
    try:
        number = int(value)
    except ValueError:
        raise InvalidRequest(f"{name} must be a whole number, not {value[:40]!r}") from None
    if not 0 <= number <= most:
        raise InvalidRequest(f"{name} must be 0..{most}")
    return number


async def _preflight(row: dict[str, Any]) -> None:
    try:
        provider = create_provider(row["name"])
        checks = await asyncio.wait_for(provider.preflight(), 10.0)
        row["preflight"] = [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in checks]
        row["ready"] = all(c.ok for c in checks)
    except (SeamlineError, TimeoutError) as exc:
        detail = exc.message if isinstance(exc, SeamlineError) else "preflight timed out"
        row["preflight"] = [{"name": row["name"], "ok": False, "detail": detail}]
        row["ready"] = False


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
