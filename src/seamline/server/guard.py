"""The gate in front of every route: Host and Origin checks against DNS rebinding and
cross-site requests, CORS for the origins the operator allows, the bearer token, and a
limit on request bodies.

A plain ASGI middleware, so it also guards what the routes never see (404s, the page).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

from starlette.routing import BaseRoute

from seamline.server.access import needed_for, refusal
from seamline.server.users import ACTING, User, UserBook

__all__ = ["LOCAL_USER", "LOOPBACK_HOSTS", "TOKEN_USER", "Guard", "is_loopback", "normalize_origin"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_HOSTS: Final = frozenset({"127.0.0.1", "localhost", "::1"})
COOKIE: Final = "seamline_token"
CORS_METHODS: Final = "GET, POST, DELETE"
CORS_HEADERS: Final = "Authorization, Content-Type, Last-Event-ID"
# Response headers a page on an allowed origin may read: a new run's Location, and the run
# and session an AG-UI POST started (its body is the stream).
CORS_EXPOSED: Final = "Location, x-seamline-run-id, x-seamline-session-id"
# Who a request is when the server asks no token (loopback, one person), and who `--token` is.
LOCAL_USER: Final = User(name="local", role="admin")
TOKEN_USER: Final = User(name="token", role="admin")


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


def normalize_origin(value: str) -> str:
    """An origin as browsers send it (``scheme://host[:port]``, lower case, no default
    port); ValueError when ``value`` is not one (a path, a query, user info)."""
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r} is not an origin (scheme://host[:port])")
    if parts.path not in ("", "/") or parts.query or parts.fragment or "@" in parts.netloc:
        raise ValueError(f"{value!r} is not an origin: give scheme://host[:port] only")
    port = parts.port
    host = parts.hostname.lower()
    shown = f"[{host}]" if ":" in host else host
    default = {"http": 80, "https": 443}[parts.scheme]
    return f"{parts.scheme}://{shown}" + (f":{port}" if port is not None and port != default else "")


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


def _host_port(value: str) -> tuple[str, str] | None:
    """The host and port ("" when none) of a Host header (``name``, ``name:port``, ``[v6]``
    or ``[v6]:port``), or None when it is none of these."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        rest = value[end + 1 :] if end > 0 else ""
        if end < 0 or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        return _canonical(value[: end + 1]), rest[1:]
    name, colon, port = value.partition(":")
    if not name or (colon and not port.isdigit()):
        return None
    return _canonical(name), port


def _hostname(value: str) -> str | None:
    parsed = _host_port(value)
    return parsed[0] if parsed is not None else None


class Guard:
    """Wraps the app. ``hosts``: names the Host header may carry (loopback names always);
    ``token``: required on every request when set (``Authorization: Bearer``, or the
    cookie the page gets from ``/?token=…``), an admin's; ``users``: the users file, whose
    tokens are accepted too, each with its user's role; ``routes``: the route table, whose
    roles (:mod:`seamline.server.access`) are checked; ``max_body``: bytes a request body may have;
    ``allow_origins``: exact origins whose pages may call the API (CORS), none by default.

    A request with an ``Origin`` header is served when that origin is the server's own
    (its host and port are the Host header's), an ``--allow-host`` name, or allowed;
    anything else is 403."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        hosts: Iterable[str] = (),
        token: str | None = None,
        max_body: int,
        allow_origins: Iterable[str] = (),
        users: UserBook | None = None,
        routes: Iterable[BaseRoute] = (),
    ) -> None:
        self.app = app
        self.users = users
        self.routes = tuple(routes)
        self.hub: Any = None  # the app's RunHub, for the serve command's shutdown
        self.named = frozenset(_canonical(h) for h in hosts)
        self.hosts = frozenset({*LOOPBACK_HOSTS, *self.named})
        self.allow_origins = frozenset(normalize_origin(o) for o in allow_origins)
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
        allowed: str | None = None
        if origin is not None:
            allowed = self._allowed_origin(origin)
            if allowed is None and not self._same_site(origin, headers.get("host", "")):
                shown = origin[:100]
                await _reply(send, 403, "permission", f"cross-site request from {shown!r} refused (--allow-origin)")
                return
        if allowed is not None:
            if scope.get("method") == "OPTIONS" and "access-control-request-method" in headers:
                await _preflight(send, allowed)  # before the token: a browser sends none here
                return
            send = _with_cors(send, allowed)
        user = LOCAL_USER
        if self.token is not None or self.users is not None:
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            if scope.get("path") == "/" and query.get("token"):
                if self._user(query["token"][0]) is not None:
                    await _login(send, query["token"][0])
                else:
                    await _reply(send, 401, "auth", "wrong token")
                return
            given = _bearer(headers.get("authorization", "")) or _cookie(headers.get("cookie", ""))
            known = self._user(given) if given is not None else None
            if known is None:
                await _reply(send, 401, "auth", "a valid bearer token is required (Authorization: Bearer TOKEN)")
                return
            user = known
        found = needed_for(self.routes, scope)
        if found is not None:
            refused = refusal(user, found[0], found[1], self.hub)
            if refused is not None:
                await _reply(send, 403, "permission", refused.message, role=refused.needed)
                return
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            await _reply(send, 413, "invalid_request", f"request body over {self.max_body} bytes")
            return
        # The hub records who starts a run and who answers a request (no one, with no users).
        acting = ACTING.set(user if user is not LOCAL_USER else None)
        try:
            await self.app(scope, self._limited(receive, send), send)
        finally:
            ACTING.reset(acting)

    def _allowed_origin(self, origin: str) -> str | None:
        try:
            normal = normalize_origin(origin)
        except ValueError:
            return None
        return normal if normal in self.allow_origins else None

    def _same_site(self, origin: str, host_header: str) -> bool:
        """The server's own page (the origin's host and port are the Host header's), or an
        ``--allow-host`` name; the scheme is not compared (a TLS proxy may sit in front)."""
        try:
            parts = urlsplit(origin)
        except ValueError:
            return False
        theirs = _host_port(parts.netloc) if "@" not in parts.netloc else None
        ours = _host_port(host_header)
        if theirs is None or ours is None or parts.scheme not in ("http", "https"):
            return False  # "null" (a sandboxed frame, a file) is no site of ours either
        if theirs[0] in self.named:
            return True
        default = "443" if parts.scheme == "https" else "80"
        return theirs[0] == ours[0] and (theirs[1] or default) == (ours[1] or default)

    def _serves(self, host: str) -> bool:
        """An exact name given to serve, or a loopback address (parsed, not a prefix)."""
        return host in self.hosts or is_loopback(host)

    def _user(self, given: str) -> User | None:
        """The user a token is: ``--token`` is an admin, the users file's tokens are theirs."""
        if self.token is not None and hmac.compare_digest(given.encode(), self.token.encode()):
            return TOKEN_USER
        return self.users.authenticate(given) if self.users is not None else None

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


async def _reply(send: Send, status: int, kind: str, message: str, *, role: str | None = None) -> None:
    error = {"kind": kind, "message": message} | ({"role": role} if role is not None else {})
    body = json.dumps({"error": error}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _preflight(send: Send, origin: str) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 204,
            "headers": [
                (b"access-control-allow-origin", origin.encode("latin-1")),
                (b"access-control-allow-methods", CORS_METHODS.encode()),
                (b"access-control-allow-headers", CORS_HEADERS.encode()),
                (b"access-control-max-age", b"600"),
                (b"vary", b"Origin"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": b""})


def _with_cors(send: Send, origin: str) -> Send:
    """``send`` that adds the CORS headers of an allowed origin to the response."""

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"vary"]
            headers += [
                (b"access-control-allow-origin", origin.encode("latin-1")),
                (b"access-control-expose-headers", CORS_EXPOSED.encode()),
                (b"vary", b"Origin"),
            ]
            message = {**message, "headers": headers}
        await send(message)

    return wrapped


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
