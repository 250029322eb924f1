"""What the store hands out: plain, immutable records."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final, Literal

__all__ = [
    "METADATA_MAX_BYTES",
    "METADATA_MAX_DEPTH",
    "Direction",
    "FileTouch",
    "RawRow",
    "SessionRecord",
    "SessionStatus",
    "Totals",
    "TranscriptEntry",
    "UsageRow",
    "json_depth",
    "metadata_problem",
    "session_title",
]

METADATA_MAX_DEPTH: Final = 32
METADATA_MAX_BYTES: Final = 64 * 1024

SessionStatus = Literal["open", "completed", "failed", "aborted", "interrupted", "budget", "paused", "not_started"]
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


def json_depth(value: Any) -> int:
    """How deep lists and objects nest in ``value`` (a scalar is 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def metadata_problem(metadata: Any) -> str | None:
    """Why session metadata cannot be stored (too deep, too big, not JSON), or None."""
    depth = json_depth(metadata)
    if depth > METADATA_MAX_DEPTH:
        return f"metadata nests {depth} deep; at most {METADATA_MAX_DEPTH}"
    try:
        size = len(json.dumps(metadata))
    except (TypeError, ValueError) as exc:
        return f"metadata is not JSON: {exc}"
    if size > METADATA_MAX_BYTES:
        return f"metadata is {size} bytes encoded; at most {METADATA_MAX_BYTES}"
    return None


def session_title(prompt: str | None, *, width: int = 48) -> str:
    """A session's title: the first non-blank line of its first prompt, cut to ``width``
    (``store.first_prompt(id)`` gives the prompt)."""
    line = next((ln.strip() for ln in (prompt or "").splitlines() if ln.strip()), "")
    return line if len(line) <= width else line[: width - 1] + "…"
