"""Long-lived helper processes shared by sessions: started once per key, reference counted,
ended when the last session lets go (an ACP agent, an ``opencode serve``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Generic, Protocol, TypeVar

from seamline.errors import SeamlineError

__all__ = ["SharedProcess", "SharedProcessPool"]

Key = tuple[Any, ...]


class SharedProcess(Protocol):
    key: Key
    refs: int

    @property
    def alive(self) -> bool: ...

    async def close(self, *, grace: float) -> None: ...


P = TypeVar("P", bound=SharedProcess)


class SharedProcessPool(Generic[P]):
    """One running process per key; :meth:`acquire` adds a reference, :meth:`release` drops one."""

    def __init__(self) -> None:
        self._running: dict[Key, P] = {}
        self._locks: dict[Key, asyncio.Lock] = {}

    async def acquire(self, key: Key, start: Callable[[], Awaitable[P]]) -> P:
        """The process for ``key``, started by ``start()`` when none is alive; one more ref."""
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            process = self._running.get(key)
            if process is not None and not process.alive:
                # It died (crashed, or its stream broke): end what is left and start afresh.
                self._running.pop(key, None)
                with contextlib.suppress(SeamlineError):
                    await process.close(grace=1.0)
                process = None
            if process is None:
                process = await start()
                self._running[key] = process
            process.refs += 1
            return process

    async def release(self, process: P, *, grace: float) -> None:
        """One ref less; the last one ends the process (its whole group)."""
        process.refs -= 1
        if process.refs > 0:
            return
        if self._running.get(process.key) is process:
            del self._running[process.key]
        self._locks.pop(process.key, None)
        await process.close(grace=grace)

    def running(self) -> list[P]:
        """The processes this pool holds now."""
        return list(self._running.values())
