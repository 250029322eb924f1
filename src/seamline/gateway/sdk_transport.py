"""The gateway's work for an in-process SDK client, with no HTTP hop: an ``httpx2`` transport.

seamline's model-API providers (``openai``, ``anthropic``) call their APIs from its own
process through the vendors' SDKs, which send every request through an ``httpx2`` client.
:class:`GatedTransport` sits under that client, in front of the transport the SDK would
have used (its connection pool, proxies and certificates unchanged), and does per request
what the relay (:mod:`seamline.gateway.relay`) does for a program, at the cost of a few
function calls instead of a local HTTP hop:

- **Turns at the upstream.** The request takes a slot of its upstream (scheme, host, port)
  from :func:`~seamline.gateway.upstream_slots.upstream_slots`, shared with every gateway
  and transport of the process, before it connects, and gives it back when its answer's
  stream is closed (or the request failed); a ``429``/``503``/``529`` with ``retry-after``
  holds that upstream's next requests, as at the relay.
- **Cassettes.** With a recorder, each exchange is written as the relay writes it (the
  request's method, target and body, never a header; the answer's status, headers and the
  body's pieces as they arrived). With a player, nothing leaves the process: the answer is
  the recorded one, piece by piece; a request the cassette does not hold is answered ``400``
  in the vendor's error format, and :attr:`CassettePlayer.mismatches` says why.
- **A spent budget.** A session whose binding has an ``admit`` check (a turn with a
  budget) is asked before each request takes its slot; a refusal (the budget is spent) is
  answered ``400`` in the vendor's error format with nothing sent, and kept in
  :attr:`SdkBinding.refused` for the provider to classify (``budget``). Without a budget
  the check is one attribute read.
- **An unreachable upstream** is a connection error that names it (host and port, never a
  password in the URL).

Which session a request belongs to (its limit, its cassette) is the
:class:`~seamline.gateway.sdk_binding.SdkBinding` the provider awaits the SDK call with
(:func:`~seamline.gateway.sdk_binding.sending`); one SDK client, and its kept-alive
connections, serves every session of a provider. The key stays in the SDK client,
in-process, as without the gateway.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Final

import httpx2

from seamline.gateway.cassette import CassettePlayer, CassetteRecorder
from seamline.gateway.http1 import Head
from seamline.gateway.meter import Vendor
from seamline.gateway.relay import vendor_error
from seamline.gateway.sdk_binding import CURRENT, SdkBinding
from seamline.gateway.upstream_slots import HOLDING_STATUSES, UpstreamSlots, retry_after_s, upstream_slots

__all__ = ["GatedTransport", "SdkGate"]

_UNKEPT: Final = frozenset({"transfer-encoding", "content-length", "connection", "set-cookie", "keep-alive"})
_DEFAULT_PORTS: Final = {"https": 443, "http": 80}


@dataclass(eq=False)
class SdkGate:
    """What every transport of one SDK client shares: its vendor (for an error body) and
    the binding of a request sent outside :func:`sending` (a probe)."""

    vendor: Vendor
    default: SdkBinding = field(default_factory=SdkBinding)


class GatedTransport(httpx2.AsyncBaseTransport):
    """``inner`` (the transport the SDK would have used) behind the gateway's per-request
    work; see the module's docstring."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, gate: SdkGate) -> None:
        self._inner = inner
        self._gate = gate
        # The upstreams' slots this transport has used, with their loop: asked of
        # upstream_slots() again only on another loop.
        self._slots: dict[tuple[str, str, int], tuple[asyncio.AbstractEventLoop, UpstreamSlots]] = {}

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        binding = CURRENT.get() or self._gate.default
        admit = binding.admit
        if admit is not None and (refusal := admit()) is not None:
            binding.refused = refusal
            message = vendor_error(self._gate.vendor, 400, refusal)
            return httpx2.Response(400, headers={"content-type": "application/json"}, content=message, request=request)
        binding.requests += 1
        cassette = binding.cassette
        if isinstance(cassette, CassettePlayer):
            return await self._replay(request, cassette)
        url = request.url
        scheme = url.scheme
        target = (scheme, url.host, url.port or _DEFAULT_PORTS.get(scheme, 80))
        slots = self._slots_of(target)
        limit = binding.limit
        await slots.acquire(limit)
        release = _Release(slots, limit)
        try:
            if cassette is not None:
                # Plain bodies, as the relay asks for them: the cassette holds readable text.
                request.headers["accept-encoding"] = "identity"
                await request.aread()
            try:
                response = await self._inner.handle_async_request(request)
            except (httpx2.ConnectError, httpx2.ConnectTimeout) as exc:
                # Named by host and port only: a password in the URL stays out.
                unreachable = f"{target[1]}:{target[2]} is unreachable ({type(exc).__name__}: {exc})"
                raise type(exc)(unreachable, request=request) from exc
            status = response.status_code
            if status in HOLDING_STATUSES:
                wait_s = retry_after_s(Head(f"HTTP/1.1 {status}", tuple(response.headers.items())))
                if wait_s is not None:
                    # The answer goes to the SDK unchanged (the provider's retries follow);
                    # the requests after it wait for their turn instead of meeting the same.
                    slots.hold(wait_s)
        except BaseException:
            release()
            raise
        done = release if cassette is None else _recording(cassette, request, response, release)
        stream = response.stream
        assert isinstance(stream, httpx2.AsyncByteStream)  # an async transport's answer
        response.stream = _Released(stream, done, keep=cassette is not None)
        return response

    def _slots_of(self, target: tuple[str, str, int]) -> UpstreamSlots:
        loop = asyncio.get_running_loop()
        known = self._slots.get(target)
        if known is not None and known[0] is loop:
            return known[1]
        slots = upstream_slots(target)
        self._slots[target] = (loop, slots)
        return slots

    async def _replay(self, request: httpx2.Request, player: CassettePlayer) -> httpx2.Response:
        """The recorded answer to ``request``: nothing leaves the process."""
        body = await request.aread()
        exchange = player.answer(request.method, request.url.raw_path.decode("ascii"), body)
        if exchange is None:
            message = vendor_error(self._gate.vendor, 400, player.mismatches[-1])
            return httpx2.Response(400, headers={"content-type": "application/json"}, content=message, request=request)
        headers = [(k, v) for k, v in exchange.headers if k.lower() not in _UNKEPT]
        return httpx2.Response(
            exchange.status,
            headers=headers,
            stream=_Replayed(exchange.chunks),
            extensions={"reason_phrase": (exchange.reason or "OK").encode("latin-1", "replace")},
            request=request,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Release:
    """Gives a request's slot back, the first time it is called."""

    __slots__ = ("_limit", "_slots")

    def __init__(self, slots: UpstreamSlots, limit: int | None) -> None:
        self._slots: UpstreamSlots | None = slots
        self._limit = limit

    def __call__(self, _chunks: list[bytes] | None = None) -> None:
        slots, self._slots = self._slots, None
        if slots is not None:
            slots.release(self._limit)


def _recording(
    recorder: CassetteRecorder, request: httpx2.Request, response: httpx2.Response, release: _Release
) -> Callable[[list[bytes] | None], None]:
    """What ends a recorded answer: the exchange written (what the SDK was given, even when
    it stopped reading early), then the slot given back."""

    def done(chunks: list[bytes] | None) -> None:
        try:
            reason = response.extensions.get("reason_phrase", b"")
            recorder.add(
                method=request.method,
                target=request.url.raw_path.decode("ascii"),
                body=request.content,
                status=response.status_code,
                reason=reason.decode("latin-1") if isinstance(reason, bytes) else str(reason),
                headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.headers.raw],
                chunks=chunks or [],
            )
        finally:
            release()

    return done


class _Released(httpx2.AsyncByteStream):
    """An answer's body as the inner transport gives it; its end (closed, or failed) calls
    ``done`` once, with the pieces that passed when ``keep``."""

    __slots__ = ("_chunks", "_done", "_inner")

    def __init__(
        self, inner: httpx2.AsyncByteStream, done: Callable[[list[bytes] | None], None], *, keep: bool
    ) -> None:
        self._inner = inner
        self._done: Callable[[list[bytes] | None], None] | None = done
        self._chunks: list[bytes] | None = [] if keep else None

    def __aiter__(self) -> AsyncIterator[bytes]:
        if self._chunks is None:
            return self._inner.__aiter__()  # nothing to see per piece: no layer in between
        return self._kept()

    async def _kept(self) -> AsyncIterator[bytes]:
        chunks = self._chunks
        assert chunks is not None
        async for piece in self._inner:
            chunks.append(piece)
            yield piece

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            done, self._done = self._done, None
            if done is not None:
                done(self._chunks)


class _Replayed(httpx2.AsyncByteStream):
    """A recorded answer's pieces, one by one."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self._chunks:
            if piece:
                yield piece
