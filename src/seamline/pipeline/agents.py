"""How the controller reaches providers: live through the public seam, or from a trace.

:class:`LiveAgents` opens a provider session per role attempt (``provider.open`` then
``session.send``) and streams its events. :class:`RecordedAgents` serves the events a
trace recorded for the same attempt and never touches a provider: it is what a re-drive
runs on.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from seamline.events import Complete, Error, Event, Session
from seamline.providers.base import Provider, ProviderSession
from seamline.sessions.store import StoreCore
from seamline.tools.base import Toolset
from seamline.tools.permissions import PermissionService, permission_service

__all__ = ["AgentKey", "Agents", "LiveAgents", "RecordedAgents", "prompt_hash", "provider_identity"]


def prompt_hash(prompt: str) -> str:
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class AgentKey:
    """Which attempt a turn belongs to; the same key finds its response in a trace."""

    phase: str
    role: str
    round: int
    attempt: int

    def as_tuple(self) -> tuple[str, str, int, int]:
        return (self.phase, self.role, self.round, self.attempt)


class Agents(Protocol):
    """What the controller needs to run one agent turn."""

    def identity(self, role: str) -> dict[str, Any]: ...

    def turn(self, key: AgentKey, prompt: str, *, budget_usd: float | None) -> AsyncIterator[Event]: ...

    async def abort_all(self) -> None: ...


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
    store: StoreCore | None = None
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


_event_type: Any = Event


@dataclass
class RecordedAgents:
    """Serves the responses a trace recorded; calls no provider, ever.

    ``responses`` maps an attempt key to its recorded events (plain dicts, as in the
    trace) and its recorded prompt hash. A prompt that hashes differently now is noted
    as prompt drift; an attempt with nothing recorded ends ``failed`` / ``missing_response``.
    """

    responses: Mapping[tuple[str, str, int, int], list[dict[str, Any]]]
    prompts: Mapping[tuple[str, str, int, int], str]
    identities: Mapping[str, dict[str, Any]]
    prompt_drift: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def identity(self, role: str) -> dict[str, Any]:
        return dict(self.identities.get(role, {}))

    async def turn(self, key: AgentKey, prompt: str, *, budget_usd: float | None) -> AsyncIterator[Event]:
        k = key.as_tuple()
        recorded = self.prompts.get(k)
        if recorded is not None and recorded != prompt_hash(prompt):
            self.prompt_drift.append(f"{key.phase}/{key.role} round {key.round} attempt {key.attempt}")
        events = self.responses.get(k, [])
        for data in events:
            yield msgspec.convert(data, _event_type)
        if not events or events[-1].get("type") != "complete":
            # A turn without its recorded end cannot be re-driven; say so instead of guessing.
            self.missing.append(f"{key.phase}/{key.role} round {key.round} attempt {key.attempt}")
            if not events:
                yield Session(session_id="replay", provider="recorded", model=None)
            yield Error(kind="provider", message="no recorded response for this attempt")
            yield Complete(outcome="failed", stop_reason="missing_response")

    async def abort_all(self) -> None:
        return None
