"""The spawn guard: limits on a team's nesting, parallelism, task count, tokens and cost.

The guard counts spend live from ``usage`` events as they stream, across every task of
the team, so a run stops at its cap while a turn is still in flight rather than after.
With ``on_budget="pause"`` the cost cap stops nothing: each role's turn pauses before its
next model request once the team's spend reaches it (:meth:`SpawnGuard.reached`), and
waits (:meth:`SpawnGuard.wait_raised`) until :meth:`SpawnGuard.raise_cap` lets the whole
team go on.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from typing import Literal

from seamline.errors import BudgetExceeded, InvalidRequest
from seamline.events import Usage

__all__ = ["GuardStop", "SpawnGuard"]


@dataclass(frozen=True, slots=True)
class GuardStop:
    """Why the guard stopped the team: ``cost`` or ``tokens``, with the figures."""

    limit: str
    spent: float
    cap: float

    @property
    def message(self) -> str:
        unit = " USD" if self.limit == "cost" else " tokens"
        return f"team {self.limit} {self.spent:g}{unit} passed the cap of {self.cap:g}{unit}"


@dataclass
class SpawnGuard:
    """Admission and spend control for one team (one pipeline run).

    >>> guard = SpawnGuard(max_cost_usd=0.01)
    >>> guard.charge(Usage(input_tokens=10, cost_usd=0.02, priced=True)).limit
    'cost'
    """

    max_depth: int = 2
    max_parallel: int = 4
    max_tasks: int | None = None
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    tasks: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    unpriced: int = 0
    stopped: GuardStop | None = None
    on_budget: Literal["fail", "pause"] = "fail"
    paused_roles: int = 0  # role turns waiting at the cost cap for a raise
    _slots: asyncio.Semaphore | None = field(default=None, repr=False)
    _raised: asyncio.Event | None = field(default=None, repr=False)

    def admit(self, *, depth: int) -> None:
        """Count one more task at ``depth``; refuse past the nesting or task limits."""
        if depth > self.max_depth:
            raise InvalidRequest(f"spawn refused: depth {depth} passes the nesting limit of {self.max_depth}")
        if self.max_tasks is not None and self.tasks >= self.max_tasks:
            raise BudgetExceeded(f"spawn refused: the team already ran its {self.max_tasks} task(s)")
        if self.stopped is not None:
            raise BudgetExceeded(f"spawn refused: {self.stopped.message}")
        self.tasks += 1

    def slot(self) -> asyncio.Semaphore:
        """The semaphore that bounds parallel tasks (created in the running loop)."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(max(1, self.max_parallel))
        return self._slots

    def charge(self, usage: Usage) -> GuardStop | None:
        """Add one usage figure; returns the stop once a cap is passed (and keeps it)."""
        self.tokens += usage.input_tokens + usage.output_tokens
        if usage.cost_usd is not None and usage.priced:
            self.cost_usd += usage.cost_usd
        else:
            self.unpriced += 1
        if self.stopped is None:
            if self.max_cost_usd is not None and self.cost_usd > self.max_cost_usd and self.on_budget == "fail":
                self.stopped = GuardStop("cost", round(self.cost_usd, 9), self.max_cost_usd)
            elif self.max_tokens is not None and self.tokens > self.max_tokens:
                self.stopped = GuardStop("tokens", self.tokens, self.max_tokens)
        return self.stopped

    def reached(self) -> bool:
        """Whether the team's spend has reached its cost cap (asked before a model request)."""
        return self.max_cost_usd is not None and self.cost_usd >= self.max_cost_usd

    async def wait_raised(self) -> None:
        """Wait, as one more paused role, until :meth:`raise_cap` lets the team go on."""
        if self._raised is None:
            self._raised = asyncio.Event()
        raised = self._raised
        self.paused_roles += 1
        try:
            await raised.wait()
        finally:
            self.paused_roles -= 1

    def raise_cap(self, cap_usd: float) -> None:
        """Raise the team's cost cap to ``cap_usd`` (more than it spent) and wake every
        role paused at the old one."""
        if not math.isfinite(cap_usd) or cap_usd <= self.cost_usd:
            raise InvalidRequest(f"budget_usd must be more than the {self.cost_usd:.6f} USD the pipeline has spent")
        self.max_cost_usd = cap_usd
        raised, self._raised = self._raised, None
        if raised is not None:
            raised.set()

    def remaining_usd(self) -> float | None:
        """What is left of the cost cap, for the per-turn budget of the next turn."""
        if self.max_cost_usd is None:
            return None
        return max(self.max_cost_usd - self.cost_usd, 0.0)
