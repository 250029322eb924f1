"""How the loop calls its observers: grouped per callback, first intervention wins."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from seamline.errors import PermissionDenied
from seamline.loop.observers import Intervention, Observer

__all__ = ["ObserverGroups", "notify"]


def _overrides(observers: Sequence[Observer], name: str) -> tuple[Observer, ...]:
    base = getattr(Observer, name)
    return tuple(o for o in observers if getattr(type(o), name, base) is not base)


_NONE: tuple[Observer, ...] = ()


class ObserverGroups:
    """Observers grouped per callback, so a run without observers pays nothing."""

    __slots__ = ("attempt", "cancelled", "delta", "end", "response", "start", "tool_call", "tool_result", "turn_end")

    start: tuple[Observer, ...]
    attempt: tuple[Observer, ...]
    delta: tuple[Observer, ...]
    response: tuple[Observer, ...]
    tool_call: tuple[Observer, ...]
    tool_result: tuple[Observer, ...]
    turn_end: tuple[Observer, ...]
    end: tuple[Observer, ...]
    cancelled: tuple[Observer, ...]

    def __init__(self, observers: Sequence[Observer]) -> None:
        if not observers:  # the common case: nothing to look up
            # One shared empty tuple, not nine lists a run: the garbage collector scans every
            # container a live run holds (at 10,000 runs in flight, most of the CPU).
            self.start = self.attempt = self.delta = self.response = self.tool_call = _NONE
            self.tool_result = self.turn_end = self.end = self.cancelled = _NONE
            return
        self.start = _overrides(observers, "on_loop_start")
        self.attempt = _overrides(observers, "on_model_attempt")
        self.delta = _overrides(observers, "on_delta")
        self.response = _overrides(observers, "on_response")
        self.tool_call = _overrides(observers, "on_tool_call")
        self.tool_result = _overrides(observers, "on_tool_result")
        self.turn_end = _overrides(observers, "on_turn_end")
        self.end = _overrides(observers, "on_loop_end")
        self.cancelled = _overrides(observers, "on_loop_cancelled")


async def notify(observers: Sequence[Observer], name: str, *args: Any) -> Intervention | None:
    """Call ``name`` on each observer; first intervention wins. Authorizers fail closed."""
    chosen: Intervention | None = None
    for obs in observers:
        try:
            result = await getattr(obs, name)(*args)
        except Exception as exc:  # noqa: BLE001 - observer code is foreign; classify it
            if obs.authorizes:
                raise PermissionDenied(f"authorizing observer {type(obs).__name__}.{name} failed: {exc}") from None
            continue
        if chosen is None and isinstance(result, Intervention):
            chosen = result
    return chosen
