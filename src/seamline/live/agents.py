"""Pipeline agents on live providers: one provider session per role attempt, through the
public seam (``provider.open`` then ``session.send``), approved by the store's rules."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from seamline.events import Event
from seamline.pipeline.agents import AgentKey
from seamline.providers.base import Provider, ProviderSession
from seamline.sessions.portable_store import SessionStore
from seamline.sessions.rules import permission_service
from seamline.tools.base import Toolset
from seamline.tools.permissions import PermissionService

__all__ = ["LiveAgents", "provider_identity"]


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
        try:
            async for event in session.send(
                prompt, max_steps=self.max_steps, budget_usd=budget_usd, params=self.params
            ):
                yield event
        finally:
            self._open.pop(key.as_tuple(), None)
            await provider.close(session)

    async def abort_all(self) -> None:
        for provider, session in list(self._open.values()):
            await provider.abort(session)
