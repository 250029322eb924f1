"""The routes about the server itself: its info, the providers, the operator's agents,
the OpenAPI document, and the web page."""

from __future__ import annotations

import asyncio
from importlib import resources
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from seamline.errors import SeamlineError
from seamline.providers.registry import create_provider, provider_class, provider_names
from seamline.server.api_document import api_document
from seamline.server.api_models import AgentList, Info, ProviderList, ProvidersQuery
from seamline.server.operations import Reply, operation
from seamline.server.runs import NotFound
from seamline.server.state import serve_policy, serve_settings, session_store

__all__ = ["info", "list_agents", "list_providers", "openapi", "page"]

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
    "fleet.js": "text/javascript; charset=utf-8",
    "evals.js": "text/javascript; charset=utf-8",
    "page.css": "text/css; charset=utf-8",
}


@operation("server, API and protocol versions", replies={200: Reply("info", Info)})
async def info(request: Request) -> Response:
    from ag_ui.core import PROTOCOL_VERSION

    from seamline._version import __version__
    from seamline.server.guard import LOCAL_USER
    from seamline.server.users import ACTING

    user = ACTING.get() or LOCAL_USER

    return JSONResponse(
        {
            "name": "seamline",
            "version": __version__,
            "api": "v1",
            "agui_protocol_version": PROTOCOL_VERSION,
            "formats": ["agui", "seamline"],
            "store": session_store(request).location,
            "auth": serve_settings(request).auth,
            "user": user.name,
            "role": user.role,
        }
    )


@operation(
    "every provider with its capabilities and preflight",
    replies={200: Reply("providers", ProviderList)},
    query=ProvidersQuery,
)
async def list_providers(request: Request) -> Response:
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


@operation(
    "the agents this server's operator declared (--agents FILE); never their option values",
    replies={200: Reply("agents", AgentList)},
)
async def list_agents(request: Request) -> Response:
    return JSONResponse({"agents": [spec.public() for spec in serve_policy(request).agents.values()]})


async def openapi(request: Request) -> Response:
    """The document of the routes this app serves (left out of the document itself)."""
    return JSONResponse(api_document(request.app.routes))


async def page(request: Request) -> Response:
    """The web page and its files (not part of the API)."""
    name = request.path_params.get("name", "index.html")
    if name not in _PAGE_FILES:
        raise NotFound(f"no file {name!r}")
    data = resources.files("seamline.server").joinpath("page", name).read_bytes()
    return Response(data, media_type=_PAGE_FILES[name], headers=_PAGE_HEADERS)
