"""docs/openapi.json is the pinned contract: generated from seamline.server.openapi and
covering exactly the routes the app serves. Regenerate with
`python -m seamline.server.openapi docs/openapi.json`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("starlette")

from starlette.routing import Route

from seamline.server import create_app
from seamline.server.openapi import openapi_document
from seamline.sessions.store import SQLiteStore

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
            if isinstance(route, Route) and route.path.startswith("/v1/") and route.path != "/v1/openapi.json"
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
