"""The OpenAPI 3.1 document of a route table, generated from what each handler declares
(:func:`seamline.server.operations.operation`).

Starlette's schema generator walks the routes (``include_in_schema=False`` leaves one
out); every other route must declare its models, or there is no document
(:class:`UndeclaredRoute`). Path parameters come from the route's own path.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

from starlette.routing import BaseRoute
from starlette.schemas import BaseSchemaGenerator

from seamline.server.api_models import ErrorReply
from seamline.server.json_schema import parameters_of, schema_of
from seamline.server.operations import Operation, Reply, operation_of

__all__ = ["UndeclaredRoute", "api_document"]

# The classified errors' replies, named once under components/responses.
_ERRORS: Final = {
    400: "bad input",
    401: "missing or wrong bearer token",
    403: "Host or Origin not served here, or what only the operator may choose",
    404: "not found",
    409: "the session is busy, or a worktree merge or discard was refused (nothing changed)",
    413: "request body over the limit",
}
_EVERY_ROUTE_MAY: Final = (401, 403)  # the guard's answers, before any route runs
_PATH_PARAMETER_NOTES: Final = {"session_id": "a session id, or a unique prefix of at least four characters"}
_PATH_PARAMETER: Final = re.compile(r"{(\w+)}")


class UndeclaredRoute(LookupError):
    """A route in the document's table declares no models."""


def api_document(routes: Sequence[BaseRoute]) -> dict[str, Any]:
    """The document of ``routes``, as served at ``/v1/openapi.json``."""
    return _Generator().get_schema(list(routes))


class _Generator(BaseSchemaGenerator):
    def get_schema(self, routes: list[BaseRoute]) -> dict[str, Any]:
        paths: dict[str, dict[str, Any]] = {}
        for endpoint in self.get_endpoints(routes):
            declared = operation_of(endpoint.func)
            if declared is None:
                name = getattr(endpoint.func, "__qualname__", repr(endpoint.func))
                raise UndeclaredRoute(
                    f"{endpoint.http_method.upper()} {endpoint.path}: {name} declares no models "
                    "(@operation in seamline.server.operations, or include_in_schema=False)"
                )
            item = paths.setdefault(endpoint.path, _path_item(endpoint.path))
            item[endpoint.http_method] = _operation(declared)
        responses = {f"E{code}": _reply(Reply(text, ErrorReply)) for code, text in _ERRORS.items()}
        responses["Error"] = _reply(Reply("any other classified error (502 or 504: the backend failed)", ErrorReply))
        return {
            "openapi": "3.1.0",
            "info": {
                "title": "seamline HTTP API",
                "version": "1",
                "description": "Sessions, runs and their event streams (AG-UI or seamline's own). See docs/serve.md.",
            },
            "paths": paths,
            "components": {
                "responses": responses,
                "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            },
            "security": [{}, {"bearer": []}],
        }


def _path_item(path: str) -> dict[str, Any]:
    names = _PATH_PARAMETER.findall(path)
    if not names:
        return {}
    parameters = []
    for name in names:
        parameter: dict[str, Any] = {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        if name in _PATH_PARAMETER_NOTES:
            parameter["description"] = _PATH_PARAMETER_NOTES[name]
        parameters.append(parameter)
    return {"parameters": parameters}


def _operation(declared: Operation) -> dict[str, Any]:
    responses: dict[str, Any] = {str(status): _reply(reply) for status, reply in declared.replies.items()}
    for code in (*declared.errors, *_EVERY_ROUTE_MAY):
        if code not in _ERRORS:
            raise ValueError(f"{declared.summary!r}: no error reply {code} (known: {sorted(_ERRORS)})")
        responses[str(code)] = {"$ref": f"#/components/responses/E{code}"}
    responses["default"] = {"$ref": "#/components/responses/Error"}
    found: dict[str, Any] = {"summary": declared.summary, "responses": responses}
    parameters = [
        *(parameters_of(declared.query, "query") if declared.query is not None else []),
        *(parameters_of(declared.headers, "header") if declared.headers is not None else []),
    ]
    if parameters:
        found["parameters"] = parameters
    if declared.body is not None:
        found["requestBody"] = {"required": True, "content": {"application/json": {"schema": schema_of(declared.body)}}}
    return found


def _reply(reply: Reply) -> dict[str, Any]:
    schema = schema_of(reply.model)
    return {"description": reply.description, "content": {media: {"schema": schema} for media in reply.media}}
