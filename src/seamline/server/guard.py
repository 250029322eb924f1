"""The gate in front of every route: Host and Origin checks against DNS rebinding and
cross-site requests, the bearer token, and a limit on request bodies.

A plain ASGI middleware, so it also guards what the routes never see (404s, the page).
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

__all__ = ["LOOPBACK_HOSTS", "Guard", "is_loopback"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_HOSTS: Final = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
COOKIE: Final = "seamline_token"


def is_loopback(host: str) -> bool:
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def _hostname(value: str) -> str:
    value = value.strip().lower()
    if value.startswith("["):
        return value[: value.find("]") + 1] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class Guard:
    """Wraps the app. ``hosts``: names the Host header may carry (loopback names always);
    ``token``: required on every request when set (``Authorization: Bearer``, or the
    cookie the page gets from ``/?token=…``); ``max_body``: bytes a request body may have."""

    def __init__(self, app: ASGIApp, *, hosts: Iterable[str] = (), token: str | None = None, max_body: int) -> None:
        self.app = app
        self.hub: Any = None  # the app's RunHub, for the serve command's shutdown
        self.hosts = frozenset({*LOOPBACK_HOSTS, *(h.lower() for h in hosts)})
        self.token = token
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        host = _hostname(headers.get("host", ""))
        if host not in self.hosts and not host.startswith("127."):
            await _reply(send, 403, "permission", f"host {host!r} is not served here (DNS rebinding guard)")
            return
        origin = headers.get("origin")
        if origin and origin != "null":
            origin_host = (urlsplit(origin).hostname or "").lower()
            if origin_host not in self.hosts and not origin_host.startswith("127."):
                await _reply(send, 403, "permission", f"cross-site request from {origin!r} refused")
                return
        if self.token is not None:
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            if scope.get("path") == "/" and query.get("token"):
                if self._matches(query["token"][0]):
                    await _login(send, query["token"][0])
                else:
                    await _reply(send, 401, "auth", "wrong token")
                return
            given = _bearer(headers.get("authorization", "")) or _cookie(headers.get("cookie", ""))
            if given is None or not self._matches(given):
                await _reply(send, 401, "auth", "a valid bearer token is required (Authorization: Bearer TOKEN)")
                return
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            await _reply(send, 413, "invalid_request", f"request body over {self.max_body} bytes")
            return
        await self.app(scope, self._limited(receive, send), send)

    def _matches(self, given: str) -> bool:
        assert self.token is not None
        return hmac.compare_digest(given.encode(), self.token.encode())

    def _limited(self, receive: Receive, send: Send) -> Receive:
        seen = 0
        limit = self.max_body

        async def wrapped() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        return wrapped


class BodyTooLarge(Exception):
    """A chunked body passed the limit while the route read it."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"request body over {limit} bytes")
        self.limit = limit


def _bearer(value: str) -> str | None:
    scheme, _, credential = value.partition(" ")
    return credential.strip() if scheme.lower() == "bearer" and credential.strip() else None


def _cookie(value: str) -> str | None:
    for part in value.split(";"):
        name, _, content = part.strip().partition("=")
        if name == COOKIE and content:
            return content
    return None


async def _reply(send: Send, status: int, kind: str, message: str) -> None:
    body = json.dumps({"error": {"kind": kind, "message": message}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _login(send: Send, token: str) -> None:
    cookie = f"{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/"
    await send(
        {
            "type": "http.response.start",
            "status": 303,
            "headers": [(b"location", b"/"), (b"set-cookie", cookie.encode("latin-1")), (b"content-length", b"0")],
        }
    )
    await send({"type": "http.response.body", "body": b""})
