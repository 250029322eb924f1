"""What a route handler declares about itself for the OpenAPI document: its summary, the
model of its body, its query and header parameters, its replies and its errors.

>>> from starlette.responses import Response
>>> @operation("say hello", replies={200: Reply("hello", str, media=("text/plain",))})
... async def hello(request: object) -> Response:
...     return Response("hello")
>>> operation_of(hello).summary
'say hello'
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final, TypeVar

import msgspec
from starlette.requests import Request
from starlette.responses import Response

__all__ = ["Handler", "Operation", "Reply", "operation", "operation_of"]

Handler = Callable[[Request], Awaitable[Response]]
H = TypeVar("H", bound=Callable[..., Awaitable[Response]])
_ATTRIBUTE: Final = "__seamline_operation__"


@dataclass(frozen=True)
class Reply:
    """One success reply: what it is, its model (a type msgspec can describe, such as a
    Struct, ``str`` or ``Annotated[...]``) and the media types it comes in."""

    description: str
    model: object
    media: tuple[str, ...] = ("application/json",)


@dataclass(frozen=True)
class Operation:
    """A handler's declaration. ``errors``: the statuses of its classified errors beside the
    401 and 403 every route may give."""

    summary: str
    replies: Mapping[int, Reply]
    body: object | None = None
    query: type[msgspec.Struct] | None = None
    headers: type[msgspec.Struct] | None = None
    errors: tuple[int, ...] = ()


def operation(
    summary: str,
    *,
    replies: Mapping[int, Reply],
    body: object | None = None,
    query: type[msgspec.Struct] | None = None,
    headers: type[msgspec.Struct] | None = None,
    errors: tuple[int, ...] = (),
) -> Callable[[H], H]:
    """Declare a route handler's models; the handler itself is returned unchanged."""
    if not replies:
        raise ValueError(f"{summary!r}: an operation declares at least one reply")
    declared = Operation(summary, dict(replies), body=body, query=query, headers=headers, errors=errors)

    def declare(handler: H) -> H:
        setattr(handler, _ATTRIBUTE, declared)
        return handler

    return declare


def operation_of(endpoint: object) -> Operation | None:
    """The declaration of a route's endpoint, or None when it has none."""
    found = getattr(endpoint, _ATTRIBUTE, None)
    return found if isinstance(found, Operation) else None
