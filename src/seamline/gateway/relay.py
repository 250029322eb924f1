"""The model gateway: a local HTTP endpoint every model request of a session goes through.

seamline runs it outside the envelope, on 127.0.0.1; a program inside reaches it through
the envelope's loopback forward like any loopback model endpoint. A program is given the
gateway's URL as its base URL and a *placeholder* credential (one per binding, random); the
gateway relays a request only when it carries a placeholder it issued, puts the real
credential in its place, and sends it to the upstream that binding names (over TLS for an
``https`` upstream). So the real key is in no variable, file or process the envelope can
read, and a request without the placeholder goes nowhere (it is answered ``401`` and
reported in :attr:`ModelGateway.refusals`).

Each response is carried back as it arrives (SSE and chunked bodies piece by piece) and
read on the way for its usage (:mod:`seamline.gateway.meter`), which the binding's
``on_usage`` receives once the response has ended: one figure per model request, from the
vendor's own answer. Before a request goes out, the binding's ``admit`` may refuse it (a
budget reached): the program gets an error in its vendor's format and nothing is spent.

Requests take turns at their upstream (:mod:`seamline.gateway.upstream_slots`): at most the
upstream's ``max_concurrent`` at once across every gateway of the process, the rest waiting,
and none sent while an upstream's ``retry-after`` holds. Upstream connections are kept alive
and reused (:mod:`seamline.gateway.upstream_pool`): a request body is read whole first, so a
request whose kept connection the server had closed can be sent once more on a new one.

A binding may carry a cassette (:mod:`seamline.gateway.cassette`): a recorder is given each
exchange as it was relayed; a player answers instead of the upstream, which is never
connected to (no slot is taken, the budget still refuses).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from seamline.events import Usage
from seamline.gateway.cassette import CassettePlayer, CassetteRecorder, chunk_frame, replay_head
from seamline.gateway.http1 import HEAD_LIMIT, BadMessage, Head, carry_body, read_head
from seamline.gateway.meter import UsageMeter, Vendor
from seamline.gateway.upstream_pool import PoolKey, UpstreamConnection, UpstreamPool, upstream_pool
from seamline.gateway.upstream_slots import retry_after_s, upstream_slots

__all__ = ["Binding", "GatewayRefusal", "ModelGateway", "Upstream", "vendor_error"]

PLACEHOLDER_PREFIX: Final = "sl-gw-"
REPLAYABLE_BODY_LIMIT: Final = 16 * 1024 * 1024
"""A request body up to this size is read whole before it is sent, so it can be sent again
when a kept-alive upstream connection turns out closed; a larger one streams through."""


@dataclass(frozen=True, slots=True)
class Upstream:
    """Where a binding's requests go and the credential they carry there (never logged)."""

    vendor: Vendor
    base_url: str
    secret: str | None = field(default=None, repr=False)
    max_concurrent: int | None = None
    """The most requests in flight at once to this scheme, host and port, counting every
    gateway of the process (``None`` or 0: no limit; the smallest named holds)."""
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False, compare=False)
    """The TLS context an ``https`` upstream is reached with (``None``: the system's
    certificates); for tests and benches that serve TLS with a certificate of their own."""

    @property
    def limit(self) -> int | None:
        return self.max_concurrent if self.max_concurrent and self.max_concurrent > 0 else None

    @property
    def target(self) -> tuple[str, str, int]:
        """The scheme, host and port requests go to."""
        parts = urlsplit(self.base_url)
        scheme = parts.scheme or "https"
        host = parts.hostname or ""
        return scheme, host, parts.port or (443 if scheme == "https" else 80)

    @property
    def key(self) -> PoolKey:
        """What a kept-alive connection to this upstream is shared by."""
        scheme, host, port = self.target
        return scheme, host, port, self.ssl_context if scheme == "https" else None

    @property
    def netloc(self) -> str:
        return urlsplit(self.base_url).netloc


@dataclass(frozen=True, slots=True)
class GatewayRefusal:
    """A request the gateway did not relay, and why (no credential in it)."""

    reason: str
    method: str
    path: str


@dataclass(eq=False)
class Binding:
    """One program's way through the gateway: its placeholder, its upstream, its callbacks."""

    upstream: Upstream
    on_usage: Callable[[Usage], None] | None = None
    admit: Callable[[], str | None] | None = None
    placeholder: str = field(default_factory=lambda: PLACEHOLDER_PREFIX + secrets.token_urlsafe(24), repr=False)
    requests: int = 0
    usages: list[Usage] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    """Why requests could not reach the upstream (no secret in them), newest last."""
    cassette: CassetteRecorder | CassettePlayer | None = None
    """Records every exchange (a recorder), or answers every request instead of the
    upstream (a player: no connection leaves the gateway)."""


def vendor_error(vendor: Vendor, status: int, message: str, *, kind: str = "invalid_request_error") -> bytes:
    """An error body as ``vendor`` writes one, so the program shows ``message`` as its own."""
    if vendor == "anthropic":
        body: object = {"type": "error", "error": {"type": kind, "message": message}}
    elif vendor == "openai":
        body = {"error": {"message": message, "type": kind, "code": kind, "param": None}}
    else:
        body = {"error": {"code": status, "message": message, "status": "INVALID_ARGUMENT"}}
    return json.dumps(body).encode()


class ModelGateway:
    """The gateway of one session (or process): start it, bind programs, close it."""

    def __init__(self) -> None:
        self._bindings: dict[str, Binding] = {}
        self._server: asyncio.Server | None = None
        self._port = 0
        self._connections: set[asyncio.Task[None]] = set()
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._pool: UpstreamPool | None = None
        self.refusals: list[GatewayRefusal] = []

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def port(self) -> int:
        return self._port

    async def idle(self) -> None:
        """Until no request is being relayed (its usage, if any, has been handed over)."""
        await self._idle.wait()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=HEAD_LIMIT)
        self._port = self._server.sockets[0].getsockname()[1]
        self._pool = upstream_pool()
        self._pool.attach()

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(BaseException):
                await task
        await server.wait_closed()
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.detach()  # the last gateway of the loop closes its idle connections

    def bind(
        self,
        upstream: Upstream,
        *,
        on_usage: Callable[[Usage], None] | None = None,
        admit: Callable[[], str | None] | None = None,
        cassette: CassetteRecorder | CassettePlayer | None = None,
    ) -> Binding:
        binding = Binding(upstream=upstream, on_usage=on_usage, admit=admit, cassette=cassette)
        self._bindings[binding.placeholder] = binding
        return binding

    def unbind(self, binding: Binding) -> None:
        self._bindings.pop(binding.placeholder, None)

    def base_url(self, binding: Binding) -> str:
        """The URL a program is given in place of the upstream's (same path)."""
        path = urlsplit(binding.upstream.base_url).path.rstrip("/")
        return f"http://127.0.0.1:{self._port}{path}"

    # -- one client connection: requests in turn, each relayed to its upstream --------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            while await self._one_request(reader, writer):
                pass
        except (BadMessage, ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass  # the gateway is closing: the connection ends here, quietly
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _one_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Relay one request; whether the client connection may carry another."""
        head = await read_head(reader)
        if head is None:
            return False
        method, _, rest = head.start.partition(" ")
        target = rest.rpartition(" ")[0] or rest
        binding, head = self._swap_credential(head, target)
        if binding is None and method == "HEAD":
            # A connectivity check (Claude Code sends `HEAD /` without a key): answered here,
            # relayed nowhere; it can neither spend nor carry anything out.
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            await writer.drain()
            return False
        if binding is None:
            await carry_body(head, reader, _Sink(), until_close=False)
            self.refusals.append(GatewayRefusal("no credential this gateway issued", method, target.split("?")[0]))
            await _answer(writer, 401, b'{"error": "seamline gateway: this request carries no credential it issued"}')
            return False
        if await self._refused(binding, head, reader, writer):
            return False
        if isinstance(binding.cassette, CassettePlayer):
            return await self._counted(binding, self._replay(binding, head, target, reader, writer))
        slots, limit = upstream_slots(binding.upstream.target), binding.upstream.limit
        await slots.acquire(limit)
        try:
            # Asked again: while this request waited its turn, others may have spent the budget.
            if await self._refused(binding, head, reader, writer):
                return False
            return await self._counted(binding, self._relay(binding, head, target, reader, writer))
        finally:
            slots.release(limit)

    async def _counted(self, binding: Binding, answering: Awaitable[bool]) -> bool:
        """``answering`` awaited as one of the binding's requests, in flight until it ends."""
        binding.requests += 1
        self._in_flight += 1
        self._idle.clear()
        try:
            return await answering
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    async def _refused(
        self, binding: Binding, head: Head, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Whether the binding's ``admit`` refused the request (then it has been answered)."""
        refusal = binding.admit() if binding.admit is not None else None
        if refusal is None:
            return False
        await carry_body(head, reader, _Sink(), until_close=False)
        await _answer(writer, 400, vendor_error(binding.upstream.vendor, 400, refusal))
        return True

    def _swap_credential(self, head: Head, target: str) -> tuple[Binding | None, Head]:
        """The binding whose placeholder the request carries, and the head with the real
        credential in the placeholder's place."""
        for name in ("x-api-key", "authorization", "x-goog-api-key"):
            value = head.get(name)
            if value is None:
                continue
            token = value.removeprefix("Bearer ").removeprefix("bearer ").strip()
            binding = self._bindings.get(token)
            if binding is not None:
                secret = binding.upstream.secret
                real = None if secret is None else value.replace(token, secret)
                return binding, head.replaced({name: real})
        path, question, query = target.partition("?")
        if question:
            pairs = parse_qsl(query, keep_blank_values=True)
            for key, value in pairs:
                binding = self._bindings.get(value) if key == "key" else None
                if binding is not None:
                    secret = binding.upstream.secret or ""
                    swapped = urlencode([(k, secret if k == "key" else v) for k, v in pairs], quote_via=quote)
                    method, _, rest = head.start.partition(" ")
                    version = rest.rpartition(" ")[2]
                    return binding, head.with_start(f"{method} {path}?{swapped} {version}")
        return None, head

    async def _relay(
        self, binding: Binding, head: Head, target: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        upstream = binding.upstream
        pool = self._pool
        assert pool is not None, "start the gateway first"
        recorder = binding.cassette if isinstance(binding.cassette, CassetteRecorder) else None
        upgrade = head.get("upgrade") is not None
        # The body is read whole before it is sent (model requests are small), so that a
        # request sent on a kept-alive connection the server had just closed can be sent
        # again on a new one. A body too large for that, or chunked, streams as it comes,
        # on a new connection (an upgrade too: it never goes back to the pool).
        body = await _replayable_body(head, reader)
        out = head.replaced(
            {
                "host": upstream.netloc,
                "accept-encoding": "identity",  # plain bodies, so the meter can read them
                "connection": "close" if upgrade else "keep-alive",
            }
        )
        sent: list[bytes] = [body] if body is not None else []
        conn: UpstreamConnection | None = None
        reusable = False
        try:
            for attempt in range(2):
                try:
                    conn = await pool.take(upstream.key, fresh=body is None or upgrade or attempt > 0)
                except (OSError, TimeoutError) as exc:
                    # The program sees what it would have seen calling the upstream itself:
                    # a connection that fails (reset, no answer), so its own retries and its
                    # own words for an unreachable API apply.
                    binding.failures.append(
                        f"seamline gateway: {upstream.netloc} is unreachable ({type(exc).__name__})"
                    )
                    writer.transport.abort()
                    return False
                try:
                    if body is not None:
                        conn.writer.write(out.encode() + body)
                        await conn.writer.drain()
                    else:
                        conn.writer.write(out.encode())
                        await carry_body(
                            head, reader, conn.writer, until_close=False, tap=sent.append if recorder else None
                        )
                    answer = await _final_head(conn.reader)
                except OSError:
                    if not (conn.reused and body is not None and _nothing_received(conn.reader)):
                        raise
                    answer = None
                if answer is not None:
                    break
                if not (conn.reused and body is not None):
                    raise BadMessage("the upstream closed without answering")
                # A kept-alive connection the server closed while it was idle: nothing of an
                # answer came, so the request is sent once more, on a new connection.
                conn.close()
                conn = None
            else:
                raise BadMessage("the upstream closed without answering")
            wait_s = retry_after_s(answer)
            if wait_s is not None:
                # The answer itself goes to the program unchanged (its own retries follow);
                # the requests after it wait here instead of meeting the same refusal.
                upstream_slots(upstream.target).hold(wait_s)
            status = answer.start.split(" ", 2)[1] if answer.start.count(" ") else ""
            bodiless = head.start.startswith("HEAD ") or status in ("204", "304")
            framed = bodiless or answer.chunked or answer.length() is not None
            keep = framed and (head.get("connection") or "").lower() != "close"
            writer.write(answer.replaced({"connection": "keep-alive" if keep else "close"}).encode())
            meter = UsageMeter(upstream.vendor, answer.get("content-type"))
            chunks: list[bytes] = []
            try:
                if not bodiless:
                    await carry_body(
                        answer, conn.reader, writer, until_close=True, tap=_teed(meter.feed, chunks, recorder)
                    )
                # Read to its end and framed: the connection may carry the next request.
                reusable = framed and not upgrade and status != "101" and _keeps_alive(answer)
            finally:
                if recorder is not None:  # what the program was given, even when it hung up early
                    _, _, reason = answer.start.partition(" ")[2].partition(" ")
                    recorder.add(
                        method=head.start.partition(" ")[0],
                        target=target,
                        body=b"".join(sent),
                        status=int(status) if status.isdigit() else 0,
                        reason=reason,
                        headers=answer.fields,
                        chunks=chunks,
                    )
                # Counted even when the program hangs up once it has what it wanted (Codex
                # closes the connection at `response.completed`, before the body's end):
                # what the upstream said it spent was spent. That connection is closed.
                usage_id = answer.get("request-id") or answer.get("x-request-id")
                self._metered(binding, meter, usage_id, ok=status.startswith("2"))
            return keep
        finally:
            if conn is not None:
                if reusable:
                    pool.give_back(conn)
                else:
                    conn.close()

    async def _replay(
        self, binding: Binding, head: Head, target: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Answer from the binding's cassette: nothing leaves the gateway."""
        player = binding.cassette
        assert isinstance(player, CassettePlayer)
        sent: list[bytes] = []
        await carry_body(head, reader, _Sink(), until_close=False, tap=sent.append)
        exchange = player.answer(head.start.partition(" ")[0], target, b"".join(sent))
        if exchange is None:
            await _answer(writer, 400, vendor_error(binding.upstream.vendor, 400, player.mismatches[-1]))
            return False
        keep = (head.get("connection") or "").lower() != "close"
        writer.write(replay_head(exchange, keep_alive=keep))
        meter = UsageMeter(binding.upstream.vendor, _header(exchange.headers, "content-type"))
        try:
            for piece in exchange.chunks:
                meter.feed(piece)
                if piece:
                    writer.write(chunk_frame(piece))
                    await writer.drain()
            if exchange.status not in (204, 304):
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        finally:
            usage_id = _header(exchange.headers, "request-id") or _header(exchange.headers, "x-request-id")
            self._metered(binding, meter, usage_id, ok=200 <= exchange.status < 300)
        return keep

    def _metered(self, binding: Binding, meter: UsageMeter, usage_id: str | None, *, ok: bool) -> None:
        usage = meter.usage(usage_id or f"gateway-{secrets.token_hex(8)}")
        if usage is None or not ok:
            return
        binding.usages.append(usage)
        if binding.on_usage is not None:
            binding.on_usage(usage)


def _teed(
    feed: Callable[[bytes], None], chunks: list[bytes], recorder: CassetteRecorder | None
) -> Callable[[bytes], None]:
    """The meter's tap, which also keeps each piece when a recorder wants them."""
    if recorder is None:
        return feed

    def both(piece: bytes) -> None:
        feed(piece)
        chunks.append(piece)

    return both


async def _replayable_body(head: Head, reader: asyncio.StreamReader) -> bytes | None:
    """The request's whole body when its length is known and at most
    :data:`REPLAYABLE_BODY_LIMIT` (``b""`` when it has none); ``None``: it is to be streamed."""
    if head.chunked:
        return None
    length = head.length()
    if length is None:
        return b""
    if length > REPLAYABLE_BODY_LIMIT:
        return None
    try:
        return await reader.readexactly(length)
    except asyncio.IncompleteReadError as exc:
        raise BadMessage(f"the body ended {length - len(exc.partial)} bytes short") from None


async def _final_head(reader: asyncio.StreamReader) -> Head | None:
    """The answer's head, past any interim ``1xx`` (``103 Early Hints``; not ``101``)."""
    while True:
        answer = await read_head(reader)
        if answer is None:
            return None
        status = answer.start.split(" ", 2)[1] if answer.start.count(" ") else ""
        if not (status.startswith("1") and len(status) == 3 and status != "101"):
            return answer


def _nothing_received(reader: asyncio.StreamReader) -> bool:
    """No byte of an answer has arrived (the connection failed before any did)."""
    return not getattr(reader, "_buffer", b"")


def _keeps_alive(answer: Head) -> bool:
    """Whether the upstream lets the connection carry another request after ``answer``."""
    tokens = {t.strip().lower() for t in (answer.get("connection") or "").split(",")}
    if "close" in tokens:
        return False
    return not answer.start.startswith("HTTP/1.0") or "keep-alive" in tokens


def _header(fields: list[tuple[str, str]], name: str) -> str | None:
    return next((v for k, v in fields if k.lower() == name), None)


class _Sink:
    """A writer that drops what it is given: a refused request's body is read, not sent."""

    def write(self, data: bytes) -> None:
        pass

    async def drain(self) -> None:
        pass


async def _answer(writer: asyncio.StreamWriter, status: int, body: bytes) -> None:
    reason = {400: "Bad Request", 401: "Unauthorized"}.get(status, "Error")
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    writer.write(head.encode() + body)
    with contextlib.suppress(ConnectionError):
        await writer.drain()
