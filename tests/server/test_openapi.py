"""docs/openapi.json is the pinned contract: generated from seamline.server.openapi and
covering exactly the routes the app serves. Regenerate with
`python -m seamline.server.openapi docs/openapi.json`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("starlette")

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from seamline.server import create_app
from seamline.server.api_document import UndeclaredRoute, api_document
from seamline.server.api_models import NewRun
from seamline.server.openapi import openapi_document
from seamline.server.operations import operation_of
from seamline.server.routes import ROUTES
from seamline.sessions.sqlite_store import SQLiteStore

PINNED = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


def test_pinned_document_is_current() -> None:
    assert json.loads(PINNED.read_text()) == openapi_document(), (
        "docs/openapi.json is stale: python -m seamline.server.openapi docs/openapi.json"
    )


def test_document_covers_exactly_the_served_routes() -> None:
    store = SQLiteStore(":memory:")
    try:
        guard = create_app(store)
        served = {
            (route.path, method.lower())
            for route in guard.app.routes
            if isinstance(route, Route)
            and route.path.startswith(("/v1/", "/.well-known/"))  # the A2A card's well-known path
            and route.path != "/v1/openapi.json"
            for method in (route.methods or ())
            if method != "HEAD"
        }
    finally:
        store.close()
    documented = {
        (path, method)
        for path, item in openapi_document()["paths"].items()
        for method in item
        if method in ("get", "post", "put", "delete", "patch")
    }
    assert served == documented


# The routes left out of the document: the web page and the document itself.
HIDDEN = {"/", "/page/{name}", "/v1/openapi.json"}


def test_every_documented_route_declares_its_models() -> None:
    store = SQLiteStore(":memory:")
    try:
        routes = [r for r in create_app(store).app.routes if isinstance(r, Route)]
    finally:
        store.close()
    assert {r.path for r in routes if not r.include_in_schema} == HIDDEN
    undeclared = [
        f"{sorted(r.methods or ())} {r.path}"
        for r in routes
        if r.include_in_schema and operation_of(r.endpoint) is None
    ]
    assert undeclared == [], "declare the models of these routes with @operation (seamline.server.operations)"


async def _undeclared(request: Request) -> Response:
    return Response()


def test_a_route_without_declared_models_has_no_document() -> None:
    # The document is walked from the route table: a route added without its models
    # stops the generator, so the document cannot leave it out silently.
    with pytest.raises(UndeclaredRoute, match=r"POST /v1/sessions/\{session_id\}/extra: _undeclared"):
        api_document([*ROUTES, Route("/v1/sessions/{session_id}/extra", _undeclared, methods=["POST"])])


def test_path_parameters_come_from_the_route_path() -> None:
    item = openapi_document()["paths"]["/v1/runs/{run_id}/permissions/{request_id}"]
    assert [(p["name"], p["in"], p["required"]) for p in item["parameters"]] == [
        ("run_id", "path", True),
        ("request_id", "path", True),
    ]


def test_request_bodies_are_the_models_the_routes_decode() -> None:
    paths = openapi_document()["paths"]
    new_run = paths["/v1/sessions/{session_id}/runs"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert new_run["required"] == ["prompt"] and new_run["additionalProperties"] is False
    assert set(new_run["properties"]) == set(NewRun.__struct_fields__)
    assert new_run["properties"]["busy"] == {"type": "string", "enum": ["reject", "enqueue"], "default": "reject"}
    assert new_run["properties"]["budget_usd"] == {"type": ["number", "null"], "minimum": 0}
