"""The gate in front of every route: Host and Origin checks against DNS rebinding and
cross-site requests, the bearer token, and a limit on request bodies.

A plain ASGI middleware, so it also guards what the routes never see (404s, the page).
"""

from __future__ import annotations

import hmac
import ipaddress
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

LOOPBACK_HOSTS: Final = frozenset({"127.0.0.1", "localhost", "::1"})
COOKIE: Final = "seamline_token"


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a bind address or a Host name, IPv6 with or without brackets) is
    this machine: the exact name ``localhost`` or an address in 127.0.0.0/8 or ``::1``.
    Parsed, never a prefix test: ``127.0.0.1.evil.example`` is a DNS name anyone can point
    anywhere (DNS rebinding)."""
    name = host.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _canonical(name: str) -> str:
    """A host name as the guard compares it: lower case, an IPv6 address without brackets
    and in its compressed form."""
    name = name.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    try:
        return ipaddress.ip_address(name).compressed
    except ValueError:
        return name


def _hostname(value: str) -> str | None:
    """The host of a Host header (``name``, ``name:port``, ``[v6]`` or ``[v6]:port``), or
    None when it is none of these."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        rest = value[end + 1 :] if end > 0 else ""
        if end < 0 or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        return _canonical(value[: end + 1])
    name, colon, port = value.partition(":")
    if not name or (colon and not port.isdigit()):
        return None
    return _canonical(name)


class Guard:
    """Wraps the app. ``hosts``: names the Host header may carry (loopback names always);
    ``token``: required on every request when set (``Authorization: Bearer``, or the
    cookie the page gets from ``/?token=…``); ``max_body``: bytes a request body may have."""

    def __init__(self, app: ASGIApp, *, hosts: Iterable[str] = (), token: str | None = None, max_body: int) -> None:
        self.app = app
        self.hub: Any = None  # the app's RunHub, for the serve command's shutdown
        self.hosts = frozenset({*LOOPBACK_HOSTS, *(_canonical(h) for h in hosts)})
        self.token = token
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        host = _hostname(headers.get("host", ""))
        if host is None or not self._serves(host):
            shown = headers.get("host", "")[:100]
            await _reply(send, 403, "permission", f"host {shown!r} is not served here (DNS rebinding guard)")
            return
        origin = headers.get("origin")
        if origin and origin != "null":
            if not self._serves(_origin_host(origin)):
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

    def _serves(self, host: str) -> bool:
        """An exact name given to serve, or a loopback address (parsed, not a prefix)."""
        return host in self.hosts or is_loopback(host)

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


def _origin_host(origin: str) -> str:
    """The host of an Origin header (``scheme://host[:port]``), parsed as strictly as Host;
    "" when it is malformed (``http://[::1].evil.example`` is, and refused)."""
    try:
        netloc = urlsplit(origin).netloc
    except ValueError:  # a malformed IPv6 literal
        return ""
    return "" if "@" in netloc else _hostname(netloc) or ""


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
