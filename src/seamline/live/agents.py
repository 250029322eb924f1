"""Pipeline agents on live providers: one provider session per role attempt, through the
public seam (``provider.open`` then ``session.send``), approved by the store's rules."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from seamline.events import Complete, Error, Event, Raw
from seamline.pipeline.agents import AgentKey
from seamline.pipeline.guard import SpawnGuard
from seamline.providers.base import Provider, ProviderSession
from seamline.sessions.portable_store import SessionStore
from seamline.sessions.rules import permission_service
from seamline.tools.base import Toolset
from seamline.tools.permissions import PermissionService

__all__ = ["LiveAgents", "paused_of", "pipeline_paused", "provider_identity"]


def provider_identity(provider: Provider, params: Mapping[str, Any]) -> dict[str, Any]:
    """Stable identity and parameters of a provider, secret-free (options are names the
    user chose on the command line; keys and tokens travel in the environment)."""
    cls = type(provider)
    temperature = params.get("temperature")
    if not provider.real:
        deterministic, why = True, "embedded provider"
    elif temperature == 0:
        deterministic, why = True, "temperature 0"
    else:
        deterministic = False
        why = "no temperature given" if temperature is None else f"temperature {temperature}"
    return {
        "provider": provider.name,
        "model": provider.model,
        "implementation": f"{cls.__module__}:{cls.__qualname__}",
        "options": {k: v for k, v in sorted(provider.option_values.items()) if "key" not in k.lower()},
        "params": dict(params),
        "real": provider.real,
        "deterministic": deterministic,
        "deterministic_why": why,
    }


@dataclass
class LiveAgents:
    """Runs turns on real provider sessions through the public seam."""

    default: Provider
    providers: Mapping[str, Provider] = field(default_factory=dict)
    workspace: str | os.PathLike[str] | None = None
    store: SessionStore | None = None
    tools: Toolset | None = None
    yes: bool = False
    max_steps: int = 50
    params: Mapping[str, Any] = field(default_factory=dict)
    run_id: str = ""
    approval: PermissionService | None = None  # default: the store's rules, hard denials, ``yes``
    guard: SpawnGuard | None = None  # the team's; with on_budget="pause" its cap pauses each turn
    _open: dict[tuple[str, str, int, int], tuple[Provider, ProviderSession]] = field(default_factory=dict)

    def provider_for(self, role: str) -> Provider:
        return self.providers.get(role, self.default)

    def identity(self, role: str) -> dict[str, Any]:
        return provider_identity(self.provider_for(role), self.params)

    async def turn(self, key: AgentKey, prompt: str, *, budget_usd: float | None) -> AsyncIterator[Event]:
        provider = self.provider_for(key.role)
        session = await provider.open(
            workspace=self.workspace,
            store=self.store,
            tools=self.tools,
            approval=self.approval or permission_service(store=self.store, workspace=self.workspace, yes=self.yes),
            metadata={"run_id": self.run_id, "phase": key.phase, "role": key.role, "round": key.round},
        )
        self._open[key.as_tuple()] = (provider, session)
        guard = self.guard if self.guard is not None and self.guard.on_budget == "pause" else None
        if guard is not None:  # the team's budget pauses this turn, and a raise lets it go on
            session.on_budget, session.budget_gate = "pause", guard.reached
        try:
            events = session.send(prompt, max_steps=self.max_steps, budget_usd=budget_usd, params=self.params)
            while True:
                paused: Complete | None = None
                async for event in events:
                    if guard is not None and _paused(event):
                        paused = event if isinstance(event, Complete) else None
                        continue  # the team's pause is said once, by the controller
                    yield event
                if paused is None or guard is None:
                    return
                if guard.paused_roles == 0:  # the first role to stop says it for the team
                    yield pipeline_paused(guard)
                await guard.wait_raised()
                cap = guard.max_cost_usd or 0.0
                events = session.continue_paused(budget_usd=cap, max_steps=self.max_steps, params=self.params)
        finally:
            self._open.pop(key.as_tuple(), None)
            await provider.close(session)

    async def abort_all(self) -> None:
        for provider, session in list(self._open.values()):
            await provider.abort(session)


def _paused(event: Event) -> bool:
    """A role turn's own word that it paused at the budget (its notice, its ``complete``)."""
    if isinstance(event, Complete):
        return event.outcome == "budget" and event.stop_reason == "paused"
    return isinstance(event, Error) and event.kind == "budget" and event.message.startswith("paused:")


def pipeline_paused(guard: SpawnGuard) -> Raw:
    """The event that says the team paused at its budget: which, the cap, what was spent
    (``raw`` from source ``budget``; a surface shows the run ``paused`` until a raise)."""
    cap = guard.max_cost_usd or 0.0
    return Raw(
        source="budget", payload={"paused": {"budget": "pipeline", "budget_usd": cap, "spent_usd": guard.cost_usd}}
    )


def paused_of(event: Raw) -> dict[str, Any] | None:
    """What a :func:`pipeline_paused` event says of the pause, else None."""
    payload: object = event.payload
    if not isinstance(payload, dict):
        return None
    paused: object = cast("dict[str, object]", payload).get("paused")
    return cast("dict[str, Any]", paused) if isinstance(paused, dict) else None
