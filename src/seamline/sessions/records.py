"""What the store hands out: plain, immutable records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "Direction",
    "FileTouch",
    "RawRow",
    "SessionRecord",
    "SessionStatus",
    "Totals",
    "TranscriptEntry",
    "UsageRow",
]

SessionStatus = Literal["open", "completed", "failed", "aborted", "interrupted", "budget", "not_started"]
Direction = Literal["in", "out"]


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """One session: our id is canonical; the provider's id is stored beside it."""

    id: str
    provider: str
    model: str | None
    provider_session_id: str | None
    parent_id: str | None
    workspace: str | None
    mode: str
    status: str
    metadata: dict[str, Any]
    created_at: float
    updated_at: float
    run_options: dict[str, Any] = field(default_factory=dict)
    """What the session was started with (provider options without secrets, sandbox,
    budget, allowlist, system prompt); resume and fork reuse it."""


@dataclass(frozen=True, slots=True)
class RawRow:
    """One row of the append-only raw log, as the provider sent it."""

    seq: int
    session_id: str
    turn: int
    direction: str
    source: str
    payload: str
    created_at: float = field(default=0.0)


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One usage figure of the cost ledger, written as it streamed."""

    session_id: str
    turn: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_usd: float | None
    priced: bool
    model: str | None


@dataclass(frozen=True, slots=True)
class Totals:
    """Sums over sessions. ``cost_usd`` adds only priced figures; ``unpriced`` counts the
    figures whose cost is unknown, so a total with ``unpriced > 0`` is a lower bound."""

    sessions: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0
    priced: int = 0
    unpriced: int = 0

    @property
    def cost_known(self) -> bool:
        return self.unpriced == 0

    def describe_cost(self) -> str:
        if self.priced == 0 and self.unpriced:
            return "unknown"
        if self.unpriced:
            return f"at least ${self.cost_usd:.4f} ({self.unpriced} unpriced)"
        return f"${self.cost_usd:.4f}"


@dataclass(frozen=True, slots=True)
class TranscriptEntry:
    """One message of the canonical transcript, derived from the raw log.

    ``index`` numbers the session's messages from 0; ``kind`` is ``user``, ``assistant``,
    ``tool_call``, ``tool_result`` or ``note``. ``raw_seq`` points at the raw row it came
    from; ``parser`` and ``parser_version`` say what derived it.
    """

    index: int
    turn: int
    kind: str
    role: str
    content: str
    call_id: str | None
    data: dict[str, Any]
    raw_seq: int
    parser: str
    parser_version: int


@dataclass(frozen=True, slots=True)
class FileTouch:
    """A file a session touched, with every kind of touch seen (read, edited, created, deleted)."""

    path: str
    kinds: tuple[str, ...]
    call_ids: tuple[str, ...]
