"""Verifying a trace: the hash chain, the lifecycle grammar, completeness, replayability.

Every problem names the record (``seq``, and the file line) and the reason. The grammar
is read against the definition the trace itself recorded, so an old trace is judged by
the rules it ran under.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Final, assert_never

import msgspec

from seamline.definitions import PhaseSpec, PipelineDefinition, definition_from_data
from seamline.errors import InvalidRequest
from seamline.trace.fingerprint import fingerprint_of
from seamline.trace.records import (
    GENESIS,
    RECORD_KINDS,
    SCHEMA_VERSION,
    PlainRecord,
    TraceLine,
    TraceRecord,
    chain_hash,
    decode_body,
    decode_plain,
    split_line,
)
from seamline.trace.schema import (
    DecisionRecord,
    EventRecord,
    GuardRecord,
    HeaderData,
    HeaderRecord,
    PhaseEndRecord,
    PhaseStartRecord,
    PromptRecord,
    RetryRecord,
    RoleEndRecord,
    RoleScopedData,
    RoleStartRecord,
    RunEndRecord,
    RunObserved,
    RunStartRecord,
    SkipRecord,
    TransitionRecord,
)

__all__ = ["Problem", "Verification", "gc_paused", "read_lines", "verify_trace"]

# What a header must hold, in the order a problem lists what it lacks.
_HEADER_FIELDS: Final = tuple(f.encode_name for f in msgspec.structs.fields(HeaderData) if f.required)


@dataclass(frozen=True, slots=True)
class Problem:
    """One fault: which check found it, the record's seq (None if unreadable), the line."""

    check: str  # chain | grammar | completeness | identity | anchor
    line: int
    seq: int | None
    reason: str

    def __str__(self) -> str:
        where = f"record {self.seq}" if self.seq is not None else "unreadable record"
        return f"{where} (line {self.line}): {self.check}: {self.reason}"


@dataclass
class Verification:
    """The verdict on one trace."""

    problems: list[Problem] = field(default_factory=list)
    #: the well-formed records, typed, in file order (every record, when the trace verifies)
    typed_records: list[TraceRecord] = field(default_factory=list)
    head_hash: str = GENESIS
    replayable: bool = False
    replay_reasons: list[str] = field(default_factory=list)
    #: what was read leniently or not checked (CRLF ends, a BOM, no anchor in a store)
    notes: list[str] = field(default_factory=list)
    #: whether the head was checked against the one the store kept (False: none kept)
    anchored: bool = False
    #: every readable record in file order: typed, or plain where it is not well formed
    all_records: list[TraceRecord | PlainRecord] = field(default_factory=list, repr=False)

    @property
    def ok(self) -> bool:
        return not self.problems

    @cached_property
    def records(self) -> list[PlainRecord]:
        """Every readable record as plain values (``d`` and ``o`` as dicts), in file order."""
        return [PlainRecord.of(r) for r in self.all_records]

    @property
    def header_data(self) -> HeaderData | None:
        """The typed header, when the first record is a well-formed one."""
        first = self.all_records[0] if self.all_records else None
        return first.d if isinstance(first, HeaderRecord) else None

    @property
    def header(self) -> dict[str, Any]:
        """The header's ``d`` as plain values (``{}`` when the first record is no header)."""
        first = self.all_records[0] if self.all_records else None
        return PlainRecord.of(first).d if first is not None and first.kind == "header" else {}

    @property
    def run_id(self) -> str | None:
        first = self.all_records[0] if self.all_records else None
        if first is None or first.kind != "header":
            return None
        value = _named_run(first)
        return str(value) if value is not None else None

    @property
    def fingerprint(self) -> str:
        return fingerprint_of(self.all_records)

    def summary(self) -> dict[str, Any]:
        last = self.all_records[-1] if self.all_records else None
        end = PlainRecord.of(last).d if last is not None and last.kind == "run_end" else {}
        header = self.header
        return {
            "run_id": self.run_id,
            "pipeline": header.get("pipeline"),
            "definition_hash": header.get("definition_hash"),
            "head_hash": self.head_hash,
            "fingerprint": self.fingerprint,
            "records": len(self.all_records),
            "outcome": end.get("outcome"),
            "stop_reason": end.get("stop_reason"),
            "detail": end.get("detail"),
            "ok": self.ok,
            "problems": [str(p) for p in self.problems],
            "replayable": self.replayable,
            "replay_reasons": list(self.replay_reasons),
            "notes": list(self.notes),
            "anchored": self.anchored,
        }


def read_lines(
    source: str | os.PathLike[str] | bytes, notes: list[str] | None = None
) -> tuple[list[TraceLine], list[Problem], str]:
    """Check the chain line by line; returns the readable lines, the chain problems and
    the head hash (the last record's stated hash). What was read leniently (CRLF line
    ends, a UTF-8 BOM, blank lines at the end: none of them is part of a record's hashed
    bytes) is said in ``notes``."""
    if isinstance(source, bytes):
        data = source
    else:
        try:
            data = Path(source).read_bytes()
        except OSError as exc:
            raise InvalidRequest(f"cannot read trace {source}: {exc.strerror}") from None
    data = _lenient(data, notes if notes is not None else [])
    with gc_paused():
        return _read(data)


def _lenient(data: bytes, notes: list[str]) -> bytes:
    """The trace's bytes as the writer wrote them, from a copy an editor or a transfer
    touched. A record's bytes never hold a raw CR (JSON escapes it), so only line ends
    and what lies outside the records change."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
        notes.append("a UTF-8 byte order mark at the start, ignored")
    if b"\r\n" in data:
        data = data.replace(b"\r\n", b"\n")
        notes.append("CRLF line ends, read as LF")
    stripped = data.rstrip(b" \t\r\n")
    if data.endswith(b"\n") and len(stripped) < len(data) - 1:
        blank = data[len(stripped) :].count(b"\n") - 1
        data = stripped + b"\n"
        notes.append(f"{blank} blank line(s) at the end, ignored")
    return data


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic collector. Reading a trace builds many small containers and no
    cycles; without the pause a 100,000-record read rescans every record it made."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _read(data: bytes) -> tuple[list[TraceLine], list[Problem], str]:
    problems: list[Problem] = []
    lines: list[TraceLine] = []
    previous = GENESIS
    raw = data.split(b"\n")
    if raw and raw[-1] == b"":
        raw.pop()
    elif raw:
        problems.append(Problem("chain", len(raw), None, "the last line is cut short (truncated file)"))
    expected = 0
    for number, line in enumerate(raw, 1):
        parts = split_line(line)
        if parts is None:
            if not (number == len(raw) and problems and problems[-1].line == number):
                problems.append(Problem("chain", number, None, "not a trace record (malformed or truncated line)"))
            continue
        stated, body = parts
        record: TraceRecord | PlainRecord
        fault: str | None = None
        try:
            record = decode_body(body)
        except msgspec.ValidationError as exc:
            # Not a well-formed record: read it plain, so the chain is checked past it.
            fault = str(exc)
            try:
                record = decode_plain(body)
            except (msgspec.DecodeError, msgspec.ValidationError) as plain_exc:
                problems.append(Problem("chain", number, None, f"record body does not decode: {plain_exc}"))
                previous = stated
                continue
        except msgspec.DecodeError as exc:
            problems.append(Problem("chain", number, None, f"record body does not decode: {exc}"))
            previous = stated
            continue
        if chain_hash(previous, body) != stated:
            problems.append(
                Problem("chain", number, record.seq, "hash does not match the record's bytes and the hash before it")
            )
        if record.seq != expected:
            problems.append(
                Problem(
                    "chain",
                    number,
                    record.seq,
                    f"seq {record.seq} where {expected} was expected (record dropped or moved)",
                )
            )
        if record.kind not in RECORD_KINDS:
            problems.append(Problem("grammar", number, record.seq, f"unknown record kind {record.kind!r}"))
        expected = record.seq + 1  # resynchronise, so one fault is reported once
        previous = stated
        lines.append(TraceLine(number, stated, body, record, fault))
    return lines, problems, previous


def verify_trace(
    source: str | os.PathLike[str] | bytes,
    *,
    run_id: str | None = None,
    anchor: tuple[str, int] | None = None,
) -> Verification:
    """Verify a trace file (or its bytes): chain, grammar, completeness, replayability.

    ``run_id``: the run the trace was asked for; every record that names a run must name
    it. ``anchor``: the head hash and record count the session store kept for the run;
    the record it names must be in the chain with that hash, so a trace rewritten whole
    (even with a consistent chain of its own) fails.
    """
    notes: list[str] = []
    lines, problems, head = read_lines(source, notes)
    every = [ln.record for ln in lines]
    result = Verification(
        problems=problems,
        typed_records=[r for r in every if not isinstance(r, PlainRecord)],
        head_hash=head,
        notes=notes,
        all_records=every,
    )
    if not lines:
        result.problems.append(Problem("completeness", 1, None, "the trace is empty"))
        return result
    _identity(lines, result, run_id)
    if anchor is not None:
        result.anchored = True
        _anchor(lines, result, anchor)
    with gc_paused():
        _Grammar(lines, result).check()
    _replayability(result)
    return result


@dataclass(frozen=True, slots=True)
class _Rules:
    """The definition the trace recorded, as the grammar looks it up."""

    definition: PipelineDefinition
    phases: dict[str, PhaseSpec]
    terminals: frozenset[str]

    @classmethod
    def of(cls, definition: PipelineDefinition) -> _Rules:
        return cls(definition, {p.name: p for p in definition.phases}, frozenset(definition.terminal_phases))


class _Grammar:
    """One pass over the records: lifecycle order, allowed transitions, completeness."""

    def __init__(self, lines: list[TraceLine], result: Verification) -> None:
        self.lines = lines
        self.result = result
        self.current: str | None = None  # the open phase
        self.last_ended: str | None = None
        self.pending_to: str | None = None  # where the last transition leads
        self.started = False
        self.ended = False
        self.open_roles: dict[tuple[str, int], TraceLine] = {}
        self.terminal_reached: list[str] = []
        self.agent_attempts: dict[tuple[str, str, int, int], set[str]] = {}
        self.usage_sum = 0

    def fail(self, line: TraceLine, reason: str, check: str = "grammar") -> None:
        self.result.problems.append(Problem(check, line.number, line.record.seq, reason))

    def check(self) -> None:
        first = self.lines[0]
        if first.record.kind != "header":
            self.fail(first, "the first record is not the header", "completeness")
            return
        definition = self._header(first)
        if definition is None:
            return
        rules = _Rules.of(definition)
        for line in self.lines[1:]:
            if not self._in_order(line):
                continue
            record = line.record
            if isinstance(record, PlainRecord):
                if record.kind in RECORD_KINDS:  # an unknown kind was named when it was read
                    self.fail(line, f"malformed record fields: {line.fault}")
                    return  # its fields say nothing reliable; what follows would only echo it
                continue
            self._record(line, record, rules)
        self._end()

    def _in_order(self, line: TraceLine) -> bool:
        """A header, then ``run_start``, nothing after ``run_end``; False: skip the record."""
        kind = line.record.kind
        if self.ended:
            self.fail(line, f"{kind} after run_end")
            return False
        if kind == "header":
            self.fail(line, "a second header")
        elif kind == "run_start":
            if self.started:
                self.fail(line, "a second run_start")
            self.started = True
        elif not self.started:
            self.fail(line, f"{kind} before run_start")
            self.started = True
        return True

    def _record(self, line: TraceLine, record: TraceRecord, rules: _Rules) -> None:
        match record:
            case PhaseStartRecord(d=d):
                self._phase_start(line, d.phase, rules)
            case RoleStartRecord(d=d):
                if self.current is None or d.phase != self.current:
                    self.fail(line, f"role {d.role} starts outside its phase {d.phase}")
                elif d.role not in _bound(rules, d.phase):
                    self.fail(line, f"role {d.role} is not bound to phase {d.phase}")
                key = (d.role, d.attempt)
                if key in self.open_roles:
                    self.fail(line, f"role {d.role} attempt {d.attempt} starts twice")
                self.open_roles[key] = line
            case PromptRecord(d=d):
                self._in_attempt(line, d, "prompt")
            case EventRecord(d=d):
                self._in_attempt(line, d, str(d.event.get("type")))
            case RetryRecord(d=d) | GuardRecord(d=d):
                self._in_attempt(line, d, None)
            case RoleEndRecord(d=d):
                if self.open_roles.pop((d.role, d.attempt), None) is None:
                    self.fail(line, f"role {d.role} ends without having started")
                self.usage_sum += d.usage.input_tokens + d.usage.output_tokens
            case PhaseEndRecord(d=d):
                self._phase_end(line, d.phase)
            case DecisionRecord(d=d):
                spec = rules.phases.get(d.phase)
                if self.current is not None or d.phase != self.last_ended or spec is None or not spec.judge:
                    self.fail(line, f"a decision outside the end of a judge phase ({d.phase})")
            case SkipRecord(d=d):
                if d.reason not in rules.definition.skip_reasons.get(d.phase, ()):
                    self.fail(line, f"phase {d.phase} skipped for an undeclared reason {d.reason!r}")
            case TransitionRecord(d=d):
                self._transition(line, d.from_, d.to, rules)
            case RunEndRecord(d=d):
                self.ended = True
                if self.current is not None:
                    self.fail(line, f"run_end while phase {self.current} is open")
                if len(self.terminal_reached) != 1:
                    self.fail(line, f"{len(self.terminal_reached)} terminal phase(s) reached; exactly one is required")
                recorded = d.usage.total.input_tokens + d.usage.total.output_tokens
                if recorded != self.usage_sum:
                    self.fail(
                        line, f"run usage {recorded} tokens != {self.usage_sum} summed over the roles", "completeness"
                    )
            case HeaderRecord() | RunStartRecord():
                pass  # ordered by _in_order
            case _:
                assert_never(record)

    def _phase_start(self, line: TraceLine, phase: str, rules: _Rules) -> None:
        if self.current is not None:
            self.fail(line, f"phase {phase} starts inside phase {self.current}")
        if phase not in rules.phases:
            self.fail(line, f"phase {phase!r} is not in the recorded definition")
        if self.last_ended is None and self.pending_to is None:
            first_phase = rules.definition.phases[0].name
            if phase != first_phase:
                self.fail(line, f"the run starts in {phase}, not the first phase {first_phase}")
        elif self.pending_to != phase:
            self.fail(line, f"phase {phase} starts without a transition to it")
        if self.terminal_reached:
            self.fail(line, f"phase {phase} starts after the terminal {self.terminal_reached[-1]}")
        self.current, self.pending_to = phase, None

    def _in_attempt(self, line: TraceLine, d: RoleScopedData, mark: str | None) -> None:
        """A prompt, event, retry or guard: inside its role's attempt (a retry comes after it)."""
        kind = line.record.kind
        if (d.role, d.attempt) not in self.open_roles and kind != "retry":
            self.fail(line, f"{kind} of role {d.role} outside that role's attempt")
        if mark is not None:
            self.agent_attempts.setdefault((d.phase, d.role, d.round, d.attempt), set()).add(mark)

    def _phase_end(self, line: TraceLine, phase: str) -> None:
        if self.current != phase:
            self.fail(line, f"phase {phase} ends but {self.current} is the open phase")
        for (role, attempt), start in self.open_roles.items():
            self.fail(
                line, f"phase {phase} ends while role {role} attempt {attempt} (record {start.record.seq}) is open"
            )
        self.open_roles.clear()
        self.current, self.last_ended = None, phase

    def _transition(self, line: TraceLine, source: str, target: str, rules: _Rules) -> None:
        if self.current is not None:
            self.fail(line, f"transition {source} -> {target} inside phase {self.current}")
        elif source != self.last_ended:
            self.fail(line, f"transition from {source}, but the last phase to end was {self.last_ended}")
        if not rules.definition.allowed(source, target):
            self.fail(line, f"transition {source} -> {target} is not allowed by the definition")
        if target in rules.terminals:
            self.terminal_reached.append(target)
        self.pending_to = target

    def _end(self) -> None:
        if not self.ended:
            self.fail(self.lines[-1], "the trace ends without run_end (incomplete or truncated)", "completeness")
            return
        for (phase, role, rnd, attempt), seen in self.agent_attempts.items():
            if "prompt" in seen and "complete" not in seen:
                self.result.replay_reasons.append(f"missing response: {phase}/{role} round {rnd} attempt {attempt}")

    def _header(self, line: TraceLine) -> PipelineDefinition | None:
        """The recorded definition, when the header holds everything and hashes right."""
        record = line.record
        if not isinstance(record, HeaderRecord):
            assert isinstance(record, PlainRecord)  # a header that is not well formed
            missing = [f for f in _HEADER_FIELDS if f not in record.d]
            if missing:
                self.fail(line, f"header lacks {', '.join(missing)}", "completeness")
            elif record.d["schema_version"] != SCHEMA_VERSION:
                self.fail(line, f"trace schema {record.d['schema_version']} is not {SCHEMA_VERSION}", "completeness")
            else:
                self.fail(line, f"malformed record fields: {line.fault}", "completeness")
            return None
        d = record.d
        if d.schema_version != SCHEMA_VERSION:
            self.fail(line, f"trace schema {d.schema_version} is not {SCHEMA_VERSION}", "completeness")
            return None
        try:
            definition = definition_from_data(d.definition, origin="recorded definition")
        except InvalidRequest as exc:
            self.fail(line, exc.message, "completeness")
            return None
        if definition.definition_hash() != d.definition_hash:
            self.fail(line, "the definition hash does not match the recorded definition", "completeness")
        return definition


def _bound(rules: _Rules, phase: str) -> tuple[str, ...]:
    spec = rules.phases.get(phase)
    return spec.bound_roles() if spec is not None else ()


def _named_run(record: TraceRecord | PlainRecord) -> object:
    """The run id a record's ``o`` names, or None."""
    if isinstance(record, PlainRecord):
        return record.o.get("run_id")
    o = record.o
    return o.run_id if isinstance(o, RunObserved) and isinstance(o.run_id, str) else None


def _identity(lines: list[TraceLine], result: Verification, asked: str | None) -> None:
    """One run id throughout, and the one asked for."""
    first = lines[0]
    own = _named_run(first.record) if first.record.kind == "header" else None
    if asked is not None and own != asked:
        result.problems.append(
            Problem("identity", first.number, first.record.seq, f"the trace is of run {own!r}, not of run {asked!r}")
        )
    for line in lines[1:]:
        named = _named_run(line.record)
        if named is not None and named != own:
            result.problems.append(
                Problem("identity", line.number, line.record.seq, f"names run {named!r}; the header names {own!r}")
            )
            break


def _anchor(lines: list[TraceLine], result: Verification, anchor: tuple[str, int]) -> None:
    """The record the store anchored is in the chain, with the hash the store kept."""
    head_hash, records = anchor
    last = lines[-1]
    at = next((ln for ln in lines if ln.record.seq == records - 1), None)
    if at is None or at.hash != head_hash:
        found = "missing" if at is None else f"{at.hash[:16]}…"
        result.problems.append(
            Problem(
                "anchor",
                last.number,
                last.record.seq,
                f"the store keeps head {head_hash[:16]}… at record {records - 1}, the file has {found}: "
                "the trace was rewritten or cut",
            )
        )
    elif len(lines) > records:
        result.notes.append(f"{len(lines) - records} record(s) after the head the store kept (a run cut short?)")


def _replayability(result: Verification) -> None:
    header = result.header_data
    providers = header.providers if header is not None else {}
    for role, identity in sorted(providers.items()):
        if not identity.get("deterministic", False):
            why = identity.get("deterministic_why", "unknown")
            result.replay_reasons.append(
                f"role {role}: provider {identity.get('provider')} is non-deterministic ({why})"
            )
    if not result.ok:
        result.replay_reasons.append("the trace does not verify")
    result.replayable = not result.replay_reasons
