"""The team bus: task submission, messages, reports, cancellation and shared context.

Every role the controller runs goes through the bus as a task, so a phase with several
roles is a team: tasks run concurrently (bounded by the spawn guard), their reports are
collected in submission order, and one can be cancelled without the others. Messages get
a total-order ``seq`` and are read with a cursor. Shared context is owned per key: a role
may add its own keys but never overwrite another's evidence.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from seamline.errors import InvalidRequest, PermissionDenied
from seamline.pipeline.guard import SpawnGuard

__all__ = ["AgentBus", "BusMessage", "TaskHandle"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BusMessage:
    seq: int
    from_agent: str
    to_agent: str
    message_type: str
    payload: Any
    correlation_id: str | None = None


@dataclass(slots=True)
class TaskHandle(Generic[T]):
    task_id: str
    agent: str
    depth: int
    future: asyncio.Task[T]


@dataclass
class AgentBus:
    """One team's bus. ``guard`` limits what may be spawned on it."""

    guard: SpawnGuard = field(default_factory=SpawnGuard)
    messages: list[BusMessage] = field(default_factory=list)
    _context: dict[str, tuple[str, Any]] = field(default_factory=dict)
    _tasks: dict[str, TaskHandle[Any]] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    # -- tasks ------------------------------------------------------------------------------
    def submit(self, agent: str, work: Callable[[], Awaitable[T]], *, depth: int = 1) -> TaskHandle[T]:
        """Start ``work`` as a task of ``agent``; the guard admits it and bounds parallelism."""
        self.guard.admit(depth=depth)
        task_id = f"t{next(self._ids)}"
        slot = self.guard.slot()

        async def bounded() -> T:
            async with slot:
                return await work()

        handle: TaskHandle[T] = TaskHandle(task_id, agent, depth, asyncio.ensure_future(bounded()))
        self._tasks[task_id] = handle
        return handle

    async def collect(self, handles: Sequence[TaskHandle[T]]) -> list[T | BaseException]:
        """Every report, in submission order; a failed or cancelled task gives its exception."""
        results = await asyncio.gather(*(h.future for h in handles), return_exceptions=True)
        return list(results)

    def cancel(self, task_id: str) -> bool:
        handle = self._tasks.get(task_id)
        return handle is not None and handle.future.cancel()

    def cancel_all(self) -> None:
        for handle in self._tasks.values():
            handle.future.cancel()

    # -- messages ---------------------------------------------------------------------------
    def post(
        self, *, from_agent: str, to_agent: str, message_type: str, payload: Any, correlation_id: str | None = None
    ) -> BusMessage:
        message = BusMessage(len(self.messages) + 1, from_agent, to_agent, message_type, payload, correlation_id)
        self.messages.append(message)
        return message

    def inbox(self, agent: str, *, after: int = 0) -> list[BusMessage]:
        """Messages to ``agent`` (or ``*``) with ``seq`` greater than the cursor ``after``."""
        return [m for m in self.messages[after:] if m.to_agent in (agent, "*")]

    # -- shared context ---------------------------------------------------------------------
    def publish(self, key: str, value: Any, *, owner: str) -> None:
        """Share ``value`` under ``key``; only the key's first owner may replace it."""
        if not key:
            raise InvalidRequest("a shared-context key cannot be empty")
        held = self._context.get(key)
        if held is not None and held[0] != owner:
            raise PermissionDenied(f"{owner} cannot overwrite {key!r}, which belongs to {held[0]}")
        self._context[key] = (owner, value)

    def shared(self, key: str) -> Any:
        held = self._context.get(key)
        return None if held is None else held[1]
