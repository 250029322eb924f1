"""How the controller reaches its agents: the :class:`Agents` protocol, and from a trace.

The controller knows no provider: live agents (:class:`seamline.live.LiveAgents`, a
provider session per role attempt) are wired above this room. :class:`RecordedAgents`
serves the events a trace recorded for the same attempt and never touches a provider: it
is what a re-drive runs on.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from seamline.events import Complete, Error, Event, Session

__all__ = ["AgentKey", "Agents", "RecordedAgents", "prompt_hash"]


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
