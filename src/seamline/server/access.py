"""Who may call which route: the role each route needs, and the routes where an operator
must own the run or session it acts on.

A viewer reads; an operator starts runs, cancels them and answers the permission requests
of its own runs, and merges and discards its own worktree runs; an admin does everything.
A route missing from :data:`ROUTE_ROLES` needs an admin, so a route added and forgotten
here is closed, not open (tests/server/test_roles.py walks the route table).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, Final

from starlette.routing import BaseRoute, Match, Route

from seamline.server.users import OWNER_KEY, Role, User

__all__ = ["ROUTE_ROLES", "Refusal", "needed_for", "refusal"]

_READ: Final = "viewer"
_RUN: Final = "operator"
_OWN: Final = "own"  # an operator's own run or session; anyone else's needs an admin

# (method, path) -> the role it needs, or "own".
ROUTE_ROLES: Final[Mapping[tuple[str, str], str]] = {
    ("GET", "/"): _READ,
    ("GET", "/page/{name}"): _READ,
    ("GET", "/v1/openapi.json"): _READ,
    ("GET", "/v1/info"): _READ,
    ("GET", "/v1/providers"): _READ,
    ("GET", "/v1/agents"): _READ,
    ("GET", "/v1/sessions"): _READ,
    ("POST", "/v1/sessions"): _RUN,
    ("GET", "/v1/sessions/{session_id}"): _READ,
    ("DELETE", "/v1/sessions/{session_id}"): "admin",
    ("POST", "/v1/sessions/{session_id}/fork"): _RUN,
    ("GET", "/v1/sessions/{session_id}/transcript"): _READ,
    ("POST", "/v1/sessions/{session_id}/revert"): "admin",
    ("POST", "/v1/sessions/{session_id}/runs"): _RUN,
    ("GET", "/v1/sessions/{session_id}/diff"): _READ,
    ("POST", "/v1/sessions/{session_id}/merge"): _OWN,
    ("POST", "/v1/sessions/{session_id}/discard"): _OWN,
    ("GET", "/v1/runs"): _READ,
    ("GET", "/v1/runs/{run_id}"): _READ,
    ("GET", "/v1/runs/{run_id}/events"): _READ,
    ("POST", "/v1/runs/{run_id}/cancel"): _OWN,
    ("POST", "/v1/runs/{run_id}/budget"): _OWN,
    ("POST", "/v1/runs/{run_id}/permissions/{request_id}"): _OWN,
    ("GET", "/v1/runs/{run_id}/diff"): _READ,
    ("POST", "/v1/runs/{run_id}/merge"): _OWN,
    ("POST", "/v1/runs/{run_id}/discard"): _OWN,
    ("GET", "/v1/pipelines"): _READ,
    ("POST", "/v1/pipelines/{name}/runs"): _RUN,
    ("GET", "/v1/traces/{run_id}"): _READ,
    ("GET", "/v1/traces/{run_id}/verify"): _READ,
    ("GET", "/v1/evals"): _READ,
    ("GET", "/v1/evals/{eval_id}"): _READ,
    ("GET", "/v1/evals/{eval_id}/page"): _READ,
    ("POST", "/v1/agui"): _RUN,
    ("POST", "/v1/agents/{name}/agui"): _RUN,
    # A2A: anyone may read an agent's card; its JSON-RPC (send, cancel, get) needs an
    # operator, and cancelling or answering a task is for its starter (checked per call).
    ("GET", "/v1/agents/{name}/a2a/.well-known/agent-card.json"): _READ,
    ("POST", "/v1/agents/{name}/a2a"): _RUN,
    ("GET", "/.well-known/agent-card.json"): _READ,
}


@dataclass(frozen=True)
class Refusal:
    """Why a user may not call a route, and the role that would be needed."""

    needed: Role
    message: str


def needed_for(routes: Iterable[BaseRoute], scope: MutableMapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The requirement of the route that serves ``scope`` and its path parameters, or None
    when no route serves it (a 404 or a 405 follows, which anyone may see). ``scope`` is
    only read."""
    method = scope.get("method")
    for route in routes:
        if not isinstance(route, Route) or (route.methods is not None and method not in route.methods):
            continue  # the method first: a cheap test that spares most regular expressions
        matched, child = route.matches(scope)
        if matched is Match.FULL:
            return ROUTE_ROLES.get((str(method), route.path), "admin"), dict(child.get("path_params", {}))
    return None


def refusal(user: User, needed: str, params: Mapping[str, Any], hub: Any) -> Refusal | None:
    """None when ``user`` may call a route that needs ``needed`` with these path
    parameters; otherwise what refuses it. ``hub``: the server's RunHub, which knows who
    started each run and session."""
    if needed != _OWN:
        role: Role = "admin" if needed == "admin" else "operator" if needed == _RUN else "viewer"
        if user.may(role):
            return None
        return Refusal(role, f"this needs the role {role}; {user.name} is a {user.role}")
    if user.may("admin"):
        return None
    if not user.may("operator"):
        return Refusal("operator", f"this needs the role operator (its own runs) or admin; {user.name} is a viewer")
    owner = _owner(params, hub)
    if owner is None or owner == user.name:
        return None  # its own, or nothing there (the route answers 404)
    return Refusal("admin", f"this run belongs to {owner}: an operator acts on its own runs only; this needs admin")


_UNOWNED: Final = "(no user)"


def _owner(params: Mapping[str, Any], hub: Any) -> str | None:
    """Who started the run or opened the session the path names; ``(no user)`` for one
    nobody did over this API as a user (a CLI run, a run from before users), None when
    there is no such run or session."""
    run_id = params.get("run_id")
    if run_id is not None:
        run = hub.runs.get(run_id)
        if run is not None:
            return str(run.started_by) if run.started_by else _UNOWNED
        session_id = str(run_id)  # a worktree run's own id names its session
    else:
        session_id = str(params.get("session_id", ""))
    record = hub.store.get(session_id) if session_id else None
    if record is None:
        return None
    owner = record.metadata.get(OWNER_KEY)
    return str(owner) if owner else _UNOWNED
