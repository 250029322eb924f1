"""The HTTP API v1 and the web page, on Starlette: the route table
(:mod:`seamline.server.routes`) over a :class:`RunHub` kept on ``app.state``, behind the
:class:`Guard`.

Every error is one JSON object ``{"error": {"kind", "message"}}`` with a fitting status:
400 bad input, 401 token, 403 host or origin (or a refused provider), 404 unknown session,
run or request, 405 a method the path lacks, 409 a busy session or a refused worktree
merge or discard, 413 an oversized body, 502 or 504 the backend failed. docs/serve.md describes each route; docs/openapi.json is
the pinned document, generated from the routes (:mod:`seamline.server.openapi`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Match

from seamline.errors import SeamlineError
from seamline.providers.base import Provider
from seamline.providers.registry import create_provider, provider_class
from seamline.server.a2a_tasks import PipelineTasks
from seamline.server.agents_file import AgentSpec, ServePolicy, UnknownAgent
from seamline.server.agui_route import AgUiThreads
from seamline.server.guard import BodyTooLarge, Guard
from seamline.server.notify import Notifier
from seamline.server.remote_runs import DurableTarget, RemoteRunHub
from seamline.server.routes import ROUTES
from seamline.server.routes_worktrees import Refused
from seamline.server.runs import Busy, NotFound, NotPaused, Run, RunHub
from seamline.server.state import ServeSettings, state_value, store_in
from seamline.server.users import UserBook
from seamline.sessions.portable_store import SessionStore

__all__ = ["MAX_BODY", "create_app"]

MAX_BODY: Final = 1_000_000

# A classified error's HTTP status: the client's mistake, a refusal, or the backend's trouble.
_STATUS_OF_KIND: Final = {
    "invalid_request": 400,
    "permission": 403,
    "sandbox": 403,
    "budget": 400,
    "timeout": 504,
    "storage": 500,
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
    users: UserBook | None = None,
    notifier: Notifier | None = None,
    durable: DurableTarget | None = None,
) -> Guard:
    """The ASGI application of ``seamline serve`` over ``store``. The newest
    ``keep_finished`` finished runs stay readable; older ones are forgotten (their events
    stay in the store's raw log). ``agents``: the operator's declared agents (see
    :mod:`seamline.server.agents_file`); clients get the safe defaults besides them.
    ``allow_origins``: exact origins (``scheme://host[:port]``) whose pages may call the API.
    ``users``: the users file (their tokens and roles, besides ``token``, an admin's);
    ``notifier``: where notifications of approvals wanted and runs ended go.
    ``durable``: run on Temporal workers, every run read from the store
    (:mod:`seamline.server.remote_runs`), instead of in this process.

    >>> from seamline.sessions.sqlite_store import SQLiteStore
    >>> app = create_app(SQLiteStore(":memory:"))
    """
    from seamline.providers.programs.envelope_launch import operator_envelope

    def backend(name: str, model: str | None, options: Mapping[str, str]) -> Provider:
        # A backend that runs programs runs in the envelope unless the operator said none.
        # A declared agent's own sandbox (only the operator can set it) wins over the default.
        mode = options.get("sandbox", sandbox)
        merged = operator_envelope(provider_class(name), options, mode=mode, allow_hosts=egress_allow)
        return create_provider(name, model=model, options=merged)

    policy = ServePolicy(Path(workspace), agents, sandbox=sandbox)
    hub_settings: dict[str, Any] = {
        "workspace": workspace,
        "cancel_grace": cancel_grace,
        "keep_finished": keep_finished,
        "policy": policy,
        "provider_factory": backend,
        "notify": (lambda what, run, details: notifier.emit(what, run.summary() if run else None, details))
        if notifier is not None
        else None,
    }
    if durable is None:
        hub = RunHub(store, **hub_settings)
    else:
        hub = RemoteRunHub(
            store,
            durable=durable,
            options_for=lambda name, options: operator_envelope(
                provider_class(name), options, mode=options.get("sandbox", sandbox), allow_hosts=egress_allow
            ),
            **hub_settings,
        )
    app = Starlette(routes=ROUTES, lifespan=_lifespan, exception_handlers=_EXCEPTION_HANDLERS)
    app.state.hub = hub
    app.state.store = store
    app.state.policy = policy
    app.state.settings = ServeSettings(auth=token is not None or users is not None, close_store=close_store)
    app.state.notifier = notifier
    app.state.agui_threads = AgUiThreads()
    app.state.a2a_pipelines = PipelineTasks()
    guard = Guard(
        app, hosts=hosts, token=token, max_body=max_body, allow_origins=allow_origins, users=users, routes=ROUTES
    )
    guard.hub = hub
    return guard


@asynccontextmanager
async def _lifespan(app: Starlette) -> AsyncIterator[None]:
    from seamline.server.pending import readopt

    await readopt(state_value(app.state, "hub", RunHub), Run)  # what a dead server left waiting
    try:
        yield
    finally:
        await state_value(app.state, "hub", RunHub).close()
        notifier = getattr(app.state, "notifier", None)
        if isinstance(notifier, Notifier):
            await notifier.close()  # after the hub: the runs it stopped are told too
        if state_value(app.state, "settings", ServeSettings).close_store:
            store_in(app.state).close()


def _error(status: int, kind: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"kind": kind, "message": message}}, status_code=status)


# Classified errors become JSON replies; nothing else is caught (a bug stays a 500).
async def _not_found(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, NotFound | UnknownAgent)
    return _error(404, "not_found", exc.message)


async def _busy(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Busy)
    return _error(409, "busy", exc.message)


async def _not_paused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, NotPaused)
    return _error(409, "not_paused", exc.message)


async def _refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Refused)
    return _error(409, "refused", exc.message)


async def _too_large(request: Request, exc: Exception) -> Response:
    return _error(413, "invalid_request", str(exc))


async def _classified(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SeamlineError)
    return _error(_STATUS_OF_KIND.get(exc.kind, 502), exc.kind, exc.message)


async def _no_route(request: Request, exc: Exception) -> Response:
    return _error(404, "not_found", f"no route {request.method} {request.url.path}")


async def _not_allowed(request: Request, exc: Exception) -> Response:
    reply = _error(405, "invalid_request", f"{request.method} is not allowed on {request.url.path}")
    # Allow names every method the path has: each route here holds one, so ask them all.
    methods = {
        method
        for route in request.app.routes
        if route.matches(request.scope)[0] is not Match.NONE
        for method in (getattr(route, "methods", None) or ())
    }
    reply.headers["allow"] = ", ".join(sorted(methods))
    return reply


_EXCEPTION_HANDLERS: Final = {
    NotFound: _not_found,
    UnknownAgent: _not_found,
    Busy: _busy,
    NotPaused: _not_paused,
    Refused: _refused,
    BodyTooLarge: _too_large,
    SeamlineError: _classified,
    404: _no_route,
    405: _not_allowed,
}
