"""Which session an in-process SDK request belongs to, for the gateway's transport
(:mod:`seamline.gateway.sdk_transport`), without importing ``httpx2``.

A model-API provider awaits each SDK call inside :func:`sending`; the transport, called by
the SDK's HTTP client in the same task and context, finds the session's
:class:`SdkBinding` in :data:`CURRENT` (its limit of requests at once per upstream, its
cassette, its budget's check). A context variable set and reset around one ``await`` costs well under a
microsecond and follows the SDK into a redirect it follows.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Final, TypeVar

from seamline.gateway.cassette import CassettePlayer, CassetteRecorder

__all__ = ["CURRENT", "SdkBinding", "sending"]

_T = TypeVar("_T")


@dataclass(eq=False, slots=True)
class SdkBinding:
    """One session's way through the transport: its limit, its cassette and its budget."""

    limit: int | None = None
    """The most requests in flight at once to the upstream, counting the whole process
    (``None``: none; where requests name different limits, the smallest holds)."""
    cassette: CassetteRecorder | CassettePlayer | None = None
    requests: int = 0
    """Requests that passed the transport as this session's."""
    admit: Callable[[], str | None] | None = None
    """Asked before a request goes out (``None``: nothing to ask, the cost of one attribute
    read): why it must not (the turn's budget is spent), else ``None``. As at the relay."""
    refused: str | None = None
    """Why the transport last refused a request of this session (set by it; cleared by
    whoever reads it before the next request)."""


CURRENT: Final[ContextVar[SdkBinding | None]] = ContextVar("seamline_sdk_binding", default=None)


async def sending(binding: SdkBinding | None, call: Awaitable[_T]) -> _T:
    """``call`` (an SDK request) awaited as ``binding``'s."""
    token = CURRENT.set(binding)
    try:
        return await call
    finally:
        CURRENT.reset(token)
