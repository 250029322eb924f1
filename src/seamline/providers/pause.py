"""Budgets that pause: what a turn that reached its budget with ``on_budget="pause"``
leaves behind (the session's :class:`BudgetPause`, the record's ``paused`` status and
metadata), the ``budget`` error that says why, and the checks of a raise.

The loop stops such a turn before its next model request (a request boundary); the
conversation as it stands is the session's (and the store's), so
:meth:`~seamline.providers.base.ProviderSession.continue_paused` goes on from there and no
finished model request or tool call runs again.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol, cast

from seamline.errors import InvalidRequest, RunNotPaused
from seamline.events import Error
from seamline.sessions.portable_store import SessionStore
from seamline.usage import UsageTotals

__all__ = [
    "BudgetPause",
    "OnBudget",
    "checked_raise",
    "forget_pause",
    "own_turns_refusal",
    "pause_gate",
    "pause_notice",
    "stored_pause",
]

OnBudget = Literal["fail", "pause"]
"""What a turn's spent budget does: fail the turn, or pause it to go on once raised."""


@dataclass(frozen=True, slots=True)
class BudgetPause:
    """Why a turn paused: the run's budget (``cap_usd``) and what it had spent then."""

    cap_usd: float
    spent_usd: float


class _Paused(Protocol):
    @property
    def store(self) -> SessionStore | None: ...
    @property
    def session_id(self) -> str: ...


def pause_gate(
    shared: Callable[[], bool] | None, totals: UsageTotals, spent_before: float, cap_usd: float | None
) -> Callable[[], bool]:
    """What the loop asks before each model request of a pausing turn: the ``shared``
    budget's gate (a pipeline's), else whether what the run spent (``totals`` of this turn,
    ``spent_before`` it) has reached ``cap_usd``."""
    if shared is not None:
        return shared
    cap = cap_usd or 0.0
    return lambda: spent_before + totals.cost_usd >= cap


def forget_pause(session: _Paused) -> None:
    """A new prompt left the paused turn behind: the record forgets the pause too."""
    if session.store is not None:
        session.store.update_metadata(session.session_id, {"paused": None})


def pause_notice(session: _Paused, cap_usd: float, spent_usd: float) -> tuple[BudgetPause, Error]:
    """The pause (kept in the store's metadata, ``paused``) and the ``budget`` error that
    says which budget, what was spent and how to go on (retryable: a raise continues it)."""
    store, session_id = session.store, session.session_id
    if store is not None:
        store.update_metadata(session_id, {"paused": {"budget": "run", "budget_usd": cap_usd, "spent_usd": spent_usd}})
    message = (
        f"paused: the run's budget of {cap_usd:.6f} USD is reached (spent {spent_usd:.6f} USD); "
        f"raise it to go on (seamline runs raise {session_id} --budget-usd AMOUNT)"
    )
    return BudgetPause(cap_usd=cap_usd, spent_usd=spent_usd), Error(kind="budget", message=message, retryable=True)


def stored_pause(store: SessionStore | None, session_id: str) -> BudgetPause | None:
    """The pause a stored session's record holds (``status`` paused), else None."""
    if store is None:
        return None
    record = store.require(session_id)
    data: object = record.metadata.get("paused")
    if record.status != "paused" or not isinstance(data, Mapping):
        return None
    kept = cast(Mapping[str, object], data)
    cap, spent = kept.get("budget_usd"), kept.get("spent_usd")
    if not isinstance(cap, int | float) or not isinstance(spent, int | float):
        return None
    return BudgetPause(cap_usd=float(cap), spent_usd=float(spent))


def checked_raise(pause: BudgetPause | None, session: _Paused, budget_usd: float) -> BudgetPause:
    """The pause a raise to ``budget_usd`` ends: refused (nothing changed) when the session
    is not paused, or the new budget is not more than what it spent. Once allowed, the
    record forgets the pause and keeps the new budget."""
    store, session_id = session.store, session.session_id
    if pause is None:
        status = store.require(session_id).status if store is not None else "not paused"
        raise RunNotPaused(f"run {session_id} is not paused at its budget (status: {status}); nothing to raise")
    if not math.isfinite(budget_usd) or budget_usd <= pause.spent_usd:
        raise InvalidRequest(
            f"the new budget must be more than the {pause.spent_usd:.6f} USD run {session_id} has spent "
            f"(got {budget_usd})"
        )
    if store is not None:
        store.update_metadata(session_id, {"paused": None})
        store.set_run_options(session_id, {"budget_usd": budget_usd})
    return pause


def own_turns_refusal(provider_name: str) -> InvalidRequest:
    """``pause`` asked of a backend that runs its own turns (an agent CLI): seamline cannot
    stop it between two of its model requests and go on from there."""
    return InvalidRequest(
        f"on_budget='pause' needs seamline's loop to make the model requests; {provider_name} "
        "runs its own turns (use on_budget='fail')"
    )
