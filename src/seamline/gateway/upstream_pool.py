"""Upstream connections kept alive between requests, shared by the gateways of one loop.

Opening an ``https`` connection costs a TCP and a TLS handshake (tens of milliseconds to a
real API); a program calling its API itself pays that once per connection it keeps alive.
So the gateway gives a connection whose answer ended cleanly (framed by ``content-length``
or chunking, read to its end, no ``connection: close``) back to an :class:`UpstreamPool`,
and the next request to the same scheme, host, port and TLS context takes it.

The pool belongs to the running loop and to the gateways started on it: each
:class:`~seamline.gateway.ModelGateway` holds it from ``start`` to ``close``, and when the
last one closes, every idle connection is closed and the pool is dropped (a connection is
never carried from one loop to the next; tests start many). An idle connection is closed
after :data:`IDLE_TIMEOUT_S`, and at most :data:`MAX_IDLE_PER_UPSTREAM` are kept per
upstream. A connection is not a slot: :mod:`seamline.gateway.upstream_slots` still counts
requests, and a request takes its slot before it takes a connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import weakref
from collections import deque
from typing import Final

from seamline.gateway.http1 import HEAD_LIMIT

__all__ = ["IDLE_TIMEOUT_S", "MAX_IDLE_PER_UPSTREAM", "PoolKey", "UpstreamConnection", "UpstreamPool", "upstream_pool"]

IDLE_TIMEOUT_S: Final = 30.0
"""An idle connection is closed after this long: below the keep-alive timeout of the
servers and proxies in front of model APIs (60 s and more), so the gateway closes first."""
MAX_IDLE_PER_UPSTREAM: Final = 8
"""The most idle connections kept per upstream; one given back beyond that closes the oldest."""
CONNECT_TIMEOUT_S: Final = 30.0

PoolKey = tuple[str, str, int, ssl.SSLContext | None]
"""Scheme, host, port, and the TLS context an ``https`` upstream is reached with (``None``:
the system's certificates)."""

_BY_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, UpstreamPool] = weakref.WeakKeyDictionary()


def upstream_pool() -> UpstreamPool:
    """The pool of the running loop (made when none is open)."""
    loop = asyncio.get_running_loop()
    pool = _BY_LOOP.get(loop)
    if pool is None or pool.closed:
        pool = _BY_LOOP[loop] = UpstreamPool(loop)
    return pool


class UpstreamConnection:
    """One connection to an upstream; ``reused``: it has carried an answer before."""

    __slots__ = ("idle_timer", "key", "reader", "reused", "writer")

    def __init__(self, key: PoolKey, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.key = key
        self.reader = reader
        self.writer = writer
        self.reused = False
        self.idle_timer: asyncio.TimerHandle | None = None

    @property
    def open(self) -> bool:
        """Still fit to carry a request: not closing, not at its end, nothing unasked for
        waiting in it (a server may write a ``408`` before it closes an idle connection)."""
        if self.writer.transport.is_closing() or self.reader.at_eof() or self.reader.exception() is not None:
            return False
        return not getattr(self.reader, "_buffer", b"")

    def close(self) -> None:
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None
        self.writer.close()


class UpstreamPool:
    """The idle upstream connections of one loop, by :data:`PoolKey`, most recent last."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        max_idle: int = MAX_IDLE_PER_UPSTREAM,
    ) -> None:
        self._loop = loop
        self.idle_timeout_s = idle_timeout_s
        self.max_idle = max_idle
        """The most idle connections kept per upstream (0: none kept, a connection per request)."""
        self._idle: dict[PoolKey, deque[UpstreamConnection]] = {}
        self._users = 0
        self.closed = False
        self.opened = 0
        """Connections opened so far (for the bench and tests)."""
        self.reuses = 0
        """Requests sent on a connection taken from the pool."""
        self._default_tls: ssl.SSLContext | None = None

    def idle(self, key: PoolKey | None = None) -> int:
        """How many connections wait in the pool (for ``key``, or in all)."""
        groups = [self._idle.get(key, deque())] if key is not None else list(self._idle.values())
        return sum(len(group) for group in groups)

    def attach(self) -> None:
        """A gateway starts using the pool (it must :meth:`detach` when it closes)."""
        self._users += 1

    async def detach(self) -> None:
        """A gateway is done with the pool; the last one out closes every idle connection."""
        self._users -= 1
        if self._users > 0:
            return
        self.closed = True
        if _BY_LOOP.get(self._loop) is self:
            del _BY_LOOP[self._loop]
        await self.close_idle()

    async def close_idle(self) -> None:
        """Close every idle connection (those in use are given back, or closed, as usual)."""
        idle = [conn for group in self._idle.values() for conn in group]
        self._idle.clear()
        for conn in idle:
            conn.close()
        for conn in idle:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.writer.wait_closed(), 1.0)
            conn.writer.transport.abort()  # a TLS peer that never answered the close

    async def take(self, key: PoolKey, *, fresh: bool = False) -> UpstreamConnection:
        """An idle connection to ``key`` that is still open, else a new one (``fresh``:
        always a new one). Raises ``OSError`` or ``TimeoutError`` when it cannot connect."""
        group = self._idle.get(key)
        while group and not fresh and asyncio.get_running_loop() is self._loop:
            conn = group.pop()  # the most recent: the least likely to have been closed
            if conn.idle_timer is not None:
                conn.idle_timer.cancel()
                conn.idle_timer = None
            if conn.open:
                conn.reused = True
                self.reuses += 1
                return conn
            conn.close()
        return await self._connect(key)

    def give_back(self, conn: UpstreamConnection) -> None:
        """``conn``'s answer was read to its end and did not ask to close: keep it idle
        (or close it, when the pool is closed or full)."""
        if self.closed or self.max_idle <= 0 or not conn.open or asyncio.get_running_loop() is not self._loop:
            conn.close()
            return
        group = self._idle.setdefault(conn.key, deque())
        while len(group) >= self.max_idle:
            group.popleft().close()
        group.append(conn)
        conn.idle_timer = self._loop.call_later(self.idle_timeout_s, self._expire, conn)

    def _expire(self, conn: UpstreamConnection) -> None:
        conn.idle_timer = None
        group = self._idle.get(conn.key)
        if group is not None and conn in group:
            group.remove(conn)
        conn.close()

    async def _connect(self, key: PoolKey) -> UpstreamConnection:
        scheme, host, port, context = key
        tls: ssl.SSLContext | None = None
        if scheme == "https":
            if context is None:  # made once per pool, not per request (loading certificates costs)
                context = self._default_tls = self._default_tls or ssl.create_default_context()
            tls = context
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(
                host, port, ssl=tls, server_hostname=host if tls is not None else None, limit=HEAD_LIMIT
            ),
            CONNECT_TIMEOUT_S,
        )
        self.opened += 1
        return UpstreamConnection(key, reader, writer)
