"""What the routes share, kept on the Starlette app's ``state`` by ``create_app`` and read
back through ``request.app.state`` with these typed readers.

A reader checks the type it finds, so an app wired wrongly fails with a clear TypeError
rather than an AttributeError deep inside a route.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from starlette.datastructures import State
from starlette.requests import HTTPConnection

from seamline.server.agents_file import ServePolicy
from seamline.server.runs import RunHub
from seamline.sessions.portable_store import SessionStore

__all__ = ["ServeSettings", "run_hub", "serve_policy", "serve_settings", "session_store", "state_value", "store_in"]

T = TypeVar("T")


@dataclass(frozen=True)
class ServeSettings:
    """The operator's settings that routes and the lifespan read; the rest live in the
    guard (hosts, token, body limit, origins) and the hub (workspace, grace, retention)."""

    auth: bool  # a bearer token is required (GET /v1/info tells clients)
    close_store: bool  # the app closes the store when it shuts down


def state_value(state: State, name: str, kind: type[T]) -> T:
    """``state.<name>``, which must be a ``kind``."""
    value = getattr(state, name, None)
    if not isinstance(value, kind):
        raise TypeError(f"app.state.{name} is {type(value).__name__}, not {kind.__name__} (see create_app)")
    return value


def run_hub(request: HTTPConnection) -> RunHub:
    return state_value(request.app.state, "hub", RunHub)


def store_in(state: State) -> SessionStore:
    """``state.store`` (an abstract type, which ``state_value`` cannot take)."""
    value = getattr(state, "store", None)
    if not isinstance(value, SessionStore):
        raise TypeError(f"app.state.store is {type(value).__name__}, not a SessionStore (see create_app)")
    return value


def session_store(request: HTTPConnection) -> SessionStore:
    return store_in(request.app.state)


def serve_policy(request: HTTPConnection) -> ServePolicy:
    return state_value(request.app.state, "policy", ServePolicy)


def serve_settings(request: HTTPConnection) -> ServeSettings:
    return state_value(request.app.state, "settings", ServeSettings)
