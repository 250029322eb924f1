"""Turn-taking at an upstream, shared by every gateway of the process on one event loop.

A model API accepts only so many requests at once from one key; twenty runs of a process
(``serve``, ``race``, a pipeline's steps) that each send their program's requests on their
own would see the excess refused (429) or dropped. So the gateway asks an upstream's
:class:`UpstreamSlots` for a slot before it connects and gives it back once the answer has
been carried back (or failed): requests beyond the limit wait their turn, first come first
served. A request names its limit (``None``: none); while requests naming different limits
are in flight or waiting at one upstream, the smallest holds.

When the upstream answers ``429`` (or ``503``, ``529``) with ``retry-after`` (or
``retry-after-ms``), the slots are *held*: no request is sent to that upstream until then
(at most :data:`MAX_HOLD_S`), so the next ones wait instead of meeting the same refusal.

The slots are keyed by the running loop and the upstream's scheme, host and port; a loop
that ends takes its slots with it (nothing is shared across loops, as tests start many).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import time
import weakref
from collections import Counter, deque
from typing import Final

from seamline.gateway.http1 import Head

__all__ = ["MAX_HOLD_S", "UpstreamSlots", "retry_after_s", "upstream_slots"]

MAX_HOLD_S: Final = 60.0
"""The longest an upstream's ``retry-after`` holds the requests that follow."""
HOLDING_STATUSES: Final = frozenset({429, 503, 529})

Target = tuple[str, str, int]
_BY_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Target, UpstreamSlots]] = (
    weakref.WeakKeyDictionary()
)


def upstream_slots(target: Target) -> UpstreamSlots:
    """The slots of ``target`` (scheme, host, port) on the running loop."""
    loop = asyncio.get_running_loop()
    by_target = _BY_LOOP.setdefault(loop, {})
    slots = by_target.get(target)
    if slots is None:
        slots = by_target[target] = UpstreamSlots(loop)
    return slots


class UpstreamSlots:
    """The requests in flight at one upstream, those waiting for a slot, and a hold."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.active = 0
        self.held_until = 0.0
        """The loop time before which no request is let through (``retry-after``)."""
        self._limits: Counter[int] = Counter()  # of the requests in flight or waiting
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._timer: asyncio.TimerHandle | None = None

    @property
    def limit(self) -> int | None:
        """The smallest limit named by a request in flight or waiting (``None``: none)."""
        return min(self._limits) if self._limits else None

    @property
    def waiting(self) -> int:
        return sum(1 for future in self._waiting if not future.done())

    @property
    def held(self) -> bool:
        return self._loop.time() < self.held_until

    async def acquire(self, limit: int | None) -> None:
        """Until this request may be sent: a slot is free and no hold is on. Whoever
        acquired must :meth:`release` with the same ``limit``."""
        if limit is not None:
            self._limits[limit] += 1
        if not self._waiting and self._free():
            self.active += 1
            return
        future: asyncio.Future[None] = self._loop.create_future()
        self._waiting.append(future)
        self._wake()
        try:
            await future
        except BaseException:
            if future.done() and not future.cancelled():
                self.release(limit)  # granted just as it was cancelled: give it back
            else:
                with contextlib.suppress(ValueError):
                    self._waiting.remove(future)
                self._forget(limit)
                self._wake()
            raise

    def release(self, limit: int | None) -> None:
        self.active -= 1
        self._forget(limit)
        self._wake()

    def hold(self, seconds: float) -> None:
        """No request is let through for ``seconds`` (at most :data:`MAX_HOLD_S`)."""
        until = self._loop.time() + min(max(seconds, 0.0), MAX_HOLD_S)
        self.held_until = max(self.held_until, until)

    def _forget(self, limit: int | None) -> None:
        if limit is None:
            return
        self._limits[limit] -= 1
        if self._limits[limit] <= 0:
            del self._limits[limit]

    def _free(self) -> bool:
        limit = self.limit
        return not self.held and (limit is None or self.active < limit)

    def _wake(self) -> None:
        """Let the waiting through in order while slots are free; while a hold is on, come
        back when it ends."""
        while self._waiting and self._free():
            future = self._waiting.popleft()
            if future.done():
                continue  # cancelled while waiting
            self.active += 1
            future.set_result(None)
        if self._waiting and self.held and self._timer is None:
            self._timer = self._loop.call_at(self.held_until, self._hold_ended)

    def _hold_ended(self) -> None:
        self._timer = None
        self._wake()  # a timer may fire a hair early: then it is set again


def retry_after_s(answer: Head) -> float | None:
    """How long an upstream's answer asks to wait before the next request, when its status
    is one that asks (429, 503, 529) and it says: ``retry-after-ms`` (OpenAI), else
    ``retry-after`` in seconds or as an HTTP date."""
    parts = answer.start.split(" ", 2)
    if len(parts) < 2 or not parts[1].isdigit() or int(parts[1]) not in HOLDING_STATUSES:
        return None
    millis = answer.get("retry-after-ms")
    if millis is not None:
        with contextlib.suppress(ValueError):
            return _bounded(float(millis) / 1000.0)
    value = answer.get("retry-after")
    if value is None:
        return None
    with contextlib.suppress(ValueError):
        return _bounded(float(value))
    with contextlib.suppress(TypeError, ValueError, IndexError):
        when = email.utils.parsedate_to_datetime(value)
        return _bounded(when.timestamp() - time.time())
    return None


def _bounded(seconds: float) -> float | None:
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), MAX_HOLD_S)
