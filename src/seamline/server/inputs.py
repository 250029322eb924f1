"""What a request brings, read for a route: its JSON body as a model, and whole numbers
from its query and headers. A bad one is :class:`InvalidRequest` (400)."""

from __future__ import annotations

from typing import TypeVar

import msgspec
from starlette.requests import Request

from seamline.errors import InvalidRequest

__all__ = ["read_body", "whole_number"]

T = TypeVar("T")


async def read_body(request: Request, kind: type[T]) -> T:
    """The request's JSON body decoded as ``kind`` (an empty body is ``{}``)."""
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


def whole_number(value: str, name: str, *, most: int = 2**62) -> int:
    """``value`` as a whole number in 0..most; ``name`` says where it came from."""
    try:
        number = int(value)
    except ValueError:
        raise InvalidRequest(f"{name} must be a whole number, not {value[:40]!r}") from None
    if not 0 <= number <= most:
        raise InvalidRequest(f"{name} must be 0..{most}")
    return number
