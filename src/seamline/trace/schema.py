"""The record kinds: one msgspec Struct per kind, tagged by ``kind``, with typed ``d`` and ``o``.

The writer takes a ``d`` part (its class names the kind) and an ``o`` part; the verifier,
replay, re-drive and the telemetry export decode a body into one :data:`TraceRecord` and
``match`` on its type, the way the event vocabulary in :mod:`seamline.events` is read.

The bytes on disk do not change with the types: a body is still
``{"seq":N,"kind":K,"at":T,"d":{...},"o":{...}}`` with ``d`` and ``o`` encoded with
sorted keys (:func:`seamline.trace.records.canonical`). So that a decoded ``d`` encodes
back to exactly the bytes written (the fingerprint is recomputed from it):

- a field written only sometimes is ``UNSET`` when absent, never ``None`` (``None`` is
  written as ``null``, ``UNSET`` is left out);
- a number that may be a float is :data:`Number` (``int | float``), so ``1`` stays ``1``
  and ``1.0`` stays ``1.0``;
- unknown fields are refused, so nothing is dropped silently.

Open-ended payloads stay plain JSON objects: the recorded definition (checked by
:func:`seamline.definitions.definition_from_data`), the run config, provider and role
identities (their options differ per backend), a role's free ``data``, and the recorded
event: its deterministic fields only (:func:`seamline.trace.fingerprint.split_event` moves
the ids to ``o``), which no event Struct accepts without them.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final, Literal, TypeAlias

import msgspec
from msgspec import UNSET, UnsetType

from seamline.events import ErrorKind, Outcome
from seamline.usage import UsageTotals

__all__ = [
    "LIFECYCLE_KINDS",
    "RECORD_KINDS",
    "RECORD_TYPES",
    "DecisionData",
    "DecisionRecord",
    "DecisionStatus",
    "EventData",
    "EventObserved",
    "EventRecord",
    "GuardData",
    "GuardRecord",
    "HeaderData",
    "HeaderRecord",
    "Number",
    "Observed",
    "PhaseEndData",
    "PhaseEndRecord",
    "PhaseStartData",
    "PhaseStartRecord",
    "PhaseStatus",
    "PlainRecord",
    "PromptData",
    "PromptRecord",
    "RecordData",
    "RecordedDecision",
    "RecordedFailure",
    "RecordedOutput",
    "RecordedUsage",
    "RetryData",
    "RetryRecord",
    "RoleEndData",
    "RoleEndRecord",
    "RoleScopedData",
    "RoleStartData",
    "RoleStartRecord",
    "RunEndData",
    "RunEndRecord",
    "RunObserved",
    "RunStartData",
    "RunStartRecord",
    "RunUsage",
    "SkipData",
    "SkipRecord",
    "TraceRecord",
    "TransitionData",
    "TransitionRecord",
]

#: A JSON number as written: an ``int`` stays an ``int``, a ``float`` a ``float``.
Number: TypeAlias = int | float
PhaseStatus: TypeAlias = Literal["ok", "failed", "stopped"]
#: ``seamline.pipeline.convergence.DecisionStatus`` (the pipeline ranks above the trace)
DecisionStatus: TypeAlias = Literal["continue", "converged", "oscillating", "exhausted", "vetoed", "failed"]


class _Part(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True, gc=False):
    """Base of every ``d`` and ``o`` part and of what they hold."""


class _Data(_Part, frozen=True, kw_only=True):
    """Base of the ``d`` parts; ``kind`` names the record kind the part belongs to."""

    kind: ClassVar[str]


# -- what the d parts hold -----------------------------------------------------------------


class RecordedUsage(_Part, frozen=True, kw_only=True):
    """Tokens and cost of a role's attempt, or summed: ``UsageTotals.data()``."""

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_usd: Number
    priced: bool

    @classmethod
    def of(cls, totals: UsageTotals) -> RecordedUsage:
        return msgspec.convert(totals.data(), cls)


class RunUsage(_Part, frozen=True, kw_only=True):
    """Usage at the run's end: by role, by phase and in total."""

    by_role: dict[str, RecordedUsage]
    by_phase: dict[str, RecordedUsage]
    total: RecordedUsage


class RecordedOutput(_Part, frozen=True, kw_only=True):
    """A role's output as recorded: the fields of ``seamline.pipeline.roles.RoleOutput``."""

    text: str
    verdict: str | None
    confidence: Number | None
    feedback: str | None
    skip: str | None
    data: dict[str, Any]


class RecordedFailure(_Part, frozen=True, kw_only=True):
    """A role's failure as recorded: the fields of ``seamline.pipeline.roles.RoleFailure``."""

    kind: ErrorKind
    message: str
    retryable: bool


class RecordedDecision(_Part, frozen=True, kw_only=True):
    """A convergence decision: the fields of ``seamline.pipeline.convergence.ConvergenceDecision``
    (in the order they are written, so its plain form reads as the file does)."""

    confidences: list[Number | None]
    iteration: int
    reason: str
    status: DecisionStatus
    strategy: str
    verdicts: list[str]
    window_hash: str


# -- the d parts ---------------------------------------------------------------------------


class HeaderData(_Data, frozen=True, kw_only=True):
    kind: ClassVar[str] = "header"
    schema_version: int
    pipeline: str
    definition: dict[str, Any]
    definition_hash: str
    task: str
    prompt_hash: str
    config: dict[str, Any]
    config_hash: str
    providers: dict[str, dict[str, Any]]
    seamline_version: str
    roles: dict[str, dict[str, Any]] | UnsetType = UNSET


class RunStartData(_Data, frozen=True, kw_only=True):
    kind: ClassVar[str] = "run_start"
    pipeline: str
    first_phase: str


class PhaseStartData(_Data, frozen=True, kw_only=True):
    kind: ClassVar[str] = "phase_start"
    phase: str
    round: int
    roles: list[str]


class PhaseEndData(_Data, frozen=True, kw_only=True):
    kind: ClassVar[str] = "phase_end"
    phase: str
    round: int
    status: PhaseStatus


class RoleScopedData(_Data, frozen=True, kw_only=True):
    """Where a role acts: the phase, the role, the round and the attempt."""

    phase: str
    role: str
    round: int
    attempt: int


class RoleStartData(RoleScopedData, frozen=True, kw_only=True):
    kind: ClassVar[str] = "role_start"


class RoleEndData(RoleScopedData, frozen=True, kw_only=True):
    """``output`` when ``status`` is ``ok``, ``failure`` when it is ``failed``."""

    kind: ClassVar[str] = "role_end"
    status: Literal["ok", "failed"]
    usage: RecordedUsage
    output: RecordedOutput | UnsetType = UNSET
    failure: RecordedFailure | UnsetType = UNSET


class PromptData(RoleScopedData, frozen=True, kw_only=True):
    kind: ClassVar[str] = "prompt"
    prompt: str
    prompt_hash: str
    provider: dict[str, Any]


class EventData(RoleScopedData, frozen=True, kw_only=True):
    """One provider event's deterministic fields (``type`` among them)."""

    kind: ClassVar[str] = "event"
    event: dict[str, Any]


class RetryData(RoleScopedData, frozen=True, kw_only=True):
    """The failed attempt (``attempt``) and its failure kind."""

    kind: ClassVar[str] = "retry"
    reason: str


class GuardData(RoleScopedData, frozen=True, kw_only=True):
    """Where a team cap was passed; ``at_seq``: the usage event that passed it."""

    kind: ClassVar[str] = "guard"
    limit: str
    spent: Number
    cap: Number
    at_seq: int


class DecisionData(_Data, frozen=True, kw_only=True):
    kind: ClassVar[str] = "decision"
    phase: str
    round: int
    decision: RecordedDecision


class SkipData(_Data, frozen=True, kw_only=True):
    kind: ClassVar[str] = "skip"
    phase: str
    reason: str


class TransitionData(_Data, frozen=True, kw_only=True):
    """``reason``: ``next``, or the stop reason (with its ``detail``) of a run that stops."""

    kind: ClassVar[str] = "transition"
    from_: str = msgspec.field(name="from")
    to: str
    reason: str
    detail: str | UnsetType = UNSET


class RunEndData(_Data, frozen=True, kw_only=True):
    kind: ClassVar[str] = "run_end"
    outcome: Outcome
    stop_reason: str
    text: str
    usage: RunUsage
    detail: str | UnsetType = UNSET


RecordData: TypeAlias = (
    HeaderData
    | RunStartData
    | PhaseStartData
    | PhaseEndData
    | RoleStartData
    | RoleEndData
    | PromptData
    | EventData
    | RetryData
    | GuardData
    | DecisionData
    | SkipData
    | TransitionData
    | RunEndData
)

# -- the o parts ---------------------------------------------------------------------------


class RunObserved(_Part, frozen=True, kw_only=True):
    """The ``o`` of every record but an event's: the run id, where a record names it."""

    run_id: str | UnsetType = UNSET


class EventObserved(_Part, frozen=True, kw_only=True):
    """The ``o`` of an event record: the event's observational fields (``null`` kept as
    written: an id the event had but did not know)."""

    session_id: str | UnsetType | None = UNSET
    provider_session_id: str | UnsetType | None = UNSET
    usage_id: str | UnsetType | None = UNSET
    request_id: str | UnsetType | None = UNSET


Observed: TypeAlias = RunObserved | EventObserved

# -- the records ---------------------------------------------------------------------------


class _Record(msgspec.Struct, tag_field="kind", kw_only=True, frozen=True, forbid_unknown_fields=True, gc=False):
    """Base of every record; ``kind`` is the tag."""

    seq: int
    at: float

    @property
    def kind(self) -> str:
        """The record's kind, as on disk."""
        return str(self.__struct_config__.tag)


class _RunRecord(_Record, frozen=True, kw_only=True):
    """A record observed at the run's level (every kind but ``event``)."""

    o: RunObserved


class HeaderRecord(_RunRecord, tag="header", frozen=True, kw_only=True):
    d: HeaderData


class RunStartRecord(_RunRecord, tag="run_start", frozen=True, kw_only=True):
    d: RunStartData


class PhaseStartRecord(_RunRecord, tag="phase_start", frozen=True, kw_only=True):
    d: PhaseStartData


class PhaseEndRecord(_RunRecord, tag="phase_end", frozen=True, kw_only=True):
    d: PhaseEndData


class RoleStartRecord(_RunRecord, tag="role_start", frozen=True, kw_only=True):
    d: RoleStartData


class RoleEndRecord(_RunRecord, tag="role_end", frozen=True, kw_only=True):
    d: RoleEndData


class PromptRecord(_RunRecord, tag="prompt", frozen=True, kw_only=True):
    d: PromptData


class EventRecord(_Record, tag="event", frozen=True, kw_only=True):
    d: EventData
    o: EventObserved


class RetryRecord(_RunRecord, tag="retry", frozen=True, kw_only=True):
    d: RetryData


class GuardRecord(_RunRecord, tag="guard", frozen=True, kw_only=True):
    d: GuardData


class DecisionRecord(_RunRecord, tag="decision", frozen=True, kw_only=True):
    d: DecisionData


class SkipRecord(_RunRecord, tag="skip", frozen=True, kw_only=True):
    d: SkipData


class TransitionRecord(_RunRecord, tag="transition", frozen=True, kw_only=True):
    d: TransitionData


class RunEndRecord(_RunRecord, tag="run_end", frozen=True, kw_only=True):
    d: RunEndData


TraceRecord: TypeAlias = (
    HeaderRecord
    | RunStartRecord
    | PhaseStartRecord
    | PhaseEndRecord
    | RoleStartRecord
    | RoleEndRecord
    | PromptRecord
    | EventRecord
    | RetryRecord
    | GuardRecord
    | DecisionRecord
    | SkipRecord
    | TransitionRecord
    | RunEndRecord
)

RECORD_TYPES: Final[tuple[type[_Record], ...]] = (
    HeaderRecord,
    RunStartRecord,
    PhaseStartRecord,
    PhaseEndRecord,
    RoleStartRecord,
    RoleEndRecord,
    PromptRecord,
    EventRecord,
    RetryRecord,
    GuardRecord,
    DecisionRecord,
    SkipRecord,
    TransitionRecord,
    RunEndRecord,
)
RECORD_KINDS: Final = frozenset(str(t.__struct_config__.tag) for t in RECORD_TYPES)
# Lifecycle kinds the grammar orders; the others are evidence inside a role's turn.
LIFECYCLE_KINDS: Final = frozenset(
    {"header", "run_start", "phase_start", "phase_end", "role_start", "role_end", "transition", "run_end"}
)


class PlainRecord(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A record as plain JSON values: any kind, ``d`` and ``o`` as objects.

    What a body that is not a well-formed :data:`TraceRecord` still decodes to (an unknown
    kind, a missing or mistyped field), so the chain is checked past it, and the plain view
    of a verified trace (:attr:`seamline.trace.verify.Verification.records`)."""

    seq: int
    kind: str
    at: float
    d: dict[str, Any]
    o: dict[str, Any]

    @classmethod
    def of(cls, record: TraceRecord | PlainRecord) -> PlainRecord:
        """The plain view of a record: ``d`` and ``o`` as decoded from the file (keys sorted)."""
        if isinstance(record, PlainRecord):
            return record
        return cls(
            seq=record.seq,
            kind=record.kind,
            at=record.at,
            d=_plain.decode(_sorted.encode(record.d)),
            o=_plain.decode(_sorted.encode(record.o)),
        )


_sorted: Final = msgspec.json.Encoder(order="sorted")
_plain: Final = msgspec.json.Decoder(dict[str, Any])
