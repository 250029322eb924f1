"""Verifying a trace: the hash chain, the lifecycle grammar, completeness, replayability.

Every problem names the record (``seq``, and the file line) and the reason. The grammar
is read against the definition the trace itself recorded, so an old trace is judged by
the rules it ran under.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import msgspec

from seamline.definitions import definition_from_data
from seamline.errors import InvalidRequest
from seamline.trace.fingerprint import fingerprint_of
from seamline.trace.records import (
    GENESIS,
    RECORD_KINDS,
    SCHEMA_VERSION,
    TraceLine,
    TraceRecord,
    chain_hash,
    decode_body,
    split_line,
)

__all__ = ["Problem", "Verification", "gc_paused", "read_lines", "verify_trace"]

_HEADER_FIELDS: Final = (
    "schema_version",
    "pipeline",
    "definition",
    "definition_hash",
    "task",
    "prompt_hash",
    "config",
    "config_hash",
    "providers",
    "seamline_version",
)
_ROLE_SCOPED: Final = frozenset({"prompt", "event", "retry", "guard"})


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
    records: list[TraceRecord] = field(default_factory=list)
    head_hash: str = GENESIS
    replayable: bool = False
    replay_reasons: list[str] = field(default_factory=list)
    #: what was read leniently or not checked (CRLF ends, a BOM, no anchor in a store)
    notes: list[str] = field(default_factory=list)
    #: whether the head was checked against the one the store kept (False: none kept)
    anchored: bool = False

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def header(self) -> dict[str, Any]:
        return self.records[0].d if self.records and self.records[0].kind == "header" else {}

    @property
    def run_id(self) -> str | None:
        if self.records and self.records[0].kind == "header":
            value = self.records[0].o.get("run_id")
            return str(value) if value is not None else None
        return None

    @property
    def fingerprint(self) -> str:
        return fingerprint_of(self.records)

    def summary(self) -> dict[str, Any]:
        end = self.records[-1].d if self.records and self.records[-1].kind == "run_end" else {}
        return {
            "run_id": self.run_id,
            "pipeline": self.header.get("pipeline"),
            "definition_hash": self.header.get("definition_hash"),
            "head_hash": self.head_hash,
            "fingerprint": self.fingerprint,
            "records": len(self.records),
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
        try:
            record = decode_body(body)
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError) as exc:
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
        lines.append(TraceLine(number, stated, body, record))
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
    result = Verification(problems=problems, records=[ln.record for ln in lines], head_hash=head, notes=notes)
    if not lines:
        result.problems.append(Problem("completeness", 1, None, "the trace is empty"))
        return result
    _identity(lines, result, run_id)
    if anchor is not None:
        result.anchored = True
        _anchor(lines, result, anchor)
    grammar = _Grammar(lines, result)
    try:
        with gc_paused():
            grammar.check()
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        # A record whose fields have the wrong shape (hand-made or damaged): name it.
        line = grammar.at
        result.problems.append(Problem("grammar", line.number, line.record.seq, f"malformed record fields: {exc!r}"))
    _replayability(lines, result)
    return result


class _Grammar:
    """One pass over the records: lifecycle order, allowed transitions, completeness."""

    def __init__(self, lines: list[TraceLine], result: Verification) -> None:
        self.lines = lines
        self.result = result
        self.phases: dict[str, dict[str, Any]] = {}
        self.transitions: dict[str, list[str]] = {}
        self.terminals: set[str] = set()
        self.skips: dict[str, list[str]] = {}
        self.first_phase: str | None = None
        self.at = lines[0]

    def fail(self, line: TraceLine, reason: str, check: str = "grammar") -> None:
        self.result.problems.append(Problem(check, line.number, line.record.seq, reason))

    def check(self) -> None:
        first = self.lines[0]
        if first.record.kind != "header":
            self.fail(first, "the first record is not the header", "completeness")
            return
        if not self._header(first):
            return
        current: str | None = None
        last_ended: str | None = None
        pending_to: str | None = None
        started = False
        open_roles: dict[tuple[str, int], TraceLine] = {}
        terminal_reached: list[str] = []
        ended = False
        agent_attempts: dict[tuple[str, str, int, int], set[str]] = {}
        usage_sum = 0
        for line in self.lines[1:]:
            self.at = line
            rec = line.record
            kind, d = rec.kind, rec.d
            if ended:
                self.fail(line, f"{kind} after run_end")
                continue
            if kind == "header":
                self.fail(line, "a second header")
            elif kind == "run_start":
                if started:
                    self.fail(line, "a second run_start")
                started = True
            elif not started:
                self.fail(line, f"{kind} before run_start")
                started = True
            if kind == "phase_start":
                phase = str(d.get("phase"))
                if current is not None:
                    self.fail(line, f"phase {phase} starts inside phase {current}")
                if phase not in self.phases:
                    self.fail(line, f"phase {phase!r} is not in the recorded definition")
                if last_ended is None and pending_to is None:
                    if phase != self.first_phase:
                        self.fail(line, f"the run starts in {phase}, not the first phase {self.first_phase}")
                elif pending_to != phase:
                    self.fail(line, f"phase {phase} starts without a transition to it")
                if terminal_reached:
                    self.fail(line, f"phase {phase} starts after the terminal {terminal_reached[-1]}")
                current, pending_to = phase, None
            elif kind == "role_start":
                role, phase = str(d.get("role")), str(d.get("phase"))
                if current is None or phase != current:
                    self.fail(line, f"role {role} starts outside its phase {phase}")
                elif role not in self._roles_of(phase):
                    self.fail(line, f"role {role} is not bound to phase {phase}")
                key = (role, int(d.get("attempt", 0)))
                if key in open_roles:
                    self.fail(line, f"role {role} attempt {key[1]} starts twice")
                open_roles[key] = line
            elif kind in _ROLE_SCOPED:
                role = str(d.get("role"))
                if (role, int(d.get("attempt", 0))) not in open_roles and kind != "retry":
                    self.fail(line, f"{kind} of role {role} outside that role's attempt")
                if kind in ("prompt", "event"):
                    akey = (str(d.get("phase")), role, int(d.get("round", 0)), int(d.get("attempt", 0)))
                    agent_attempts.setdefault(akey, set()).add(
                        "prompt" if kind == "prompt" else str(d.get("event", {}).get("type"))
                    )
            elif kind == "role_end":
                role = str(d.get("role"))
                key = (role, int(d.get("attempt", 0)))
                if open_roles.pop(key, None) is None:
                    self.fail(line, f"role {role} ends without having started")
                usage = d.get("usage", {})
                usage_sum += int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))
            elif kind == "phase_end":
                phase = str(d.get("phase"))
                if current != phase:
                    self.fail(line, f"phase {phase} ends but {current} is the open phase")
                for (role, attempt), start in open_roles.items():
                    self.fail(
                        line,
                        f"phase {phase} ends while role {role} attempt {attempt} (record {start.record.seq}) is open",
                    )
                open_roles.clear()
                current, last_ended = None, phase
            elif kind == "decision":
                phase = str(d.get("phase"))
                if current is not None or phase != last_ended or not self.phases.get(phase, {}).get("judge"):
                    self.fail(line, f"a decision outside the end of a judge phase ({phase})")
            elif kind == "skip":
                phase, reason = str(d.get("phase")), str(d.get("reason"))
                if reason not in self.skips.get(phase, []):
                    self.fail(line, f"phase {phase} skipped for an undeclared reason {reason!r}")
            elif kind == "transition":
                source, target = str(d.get("from")), str(d.get("to"))
                if current is not None:
                    self.fail(line, f"transition {source} -> {target} inside phase {current}")
                elif source != last_ended:
                    self.fail(line, f"transition from {source}, but the last phase to end was {last_ended}")
                if not self._allowed(source, target):
                    self.fail(line, f"transition {source} -> {target} is not allowed by the definition")
                if target in self.terminals:
                    terminal_reached.append(target)
                pending_to = target
            elif kind == "run_end":
                ended = True
                if current is not None:
                    self.fail(line, f"run_end while phase {current} is open")
                if len(terminal_reached) != 1:
                    self.fail(line, f"{len(terminal_reached)} terminal phase(s) reached; exactly one is required")
                total = d.get("usage", {}).get("total", {})
                recorded = int(total.get("input_tokens", 0)) + int(total.get("output_tokens", 0))
                if recorded != usage_sum:
                    self.fail(line, f"run usage {recorded} tokens != {usage_sum} summed over the roles", "completeness")
        last = self.lines[-1]
        if not ended:
            self.fail(last, "the trace ends without run_end (incomplete or truncated)", "completeness")
        for (phase, role, rnd, attempt), seen in agent_attempts.items():
            if "prompt" in seen and "complete" not in seen and ended:
                self.result.replay_reasons.append(f"missing response: {phase}/{role} round {rnd} attempt {attempt}")

    def _header(self, line: TraceLine) -> bool:
        d = line.record.d
        missing = [f for f in _HEADER_FIELDS if f not in d]
        if missing:
            self.fail(line, f"header lacks {', '.join(missing)}", "completeness")
            return False
        if d["schema_version"] != SCHEMA_VERSION:
            self.fail(line, f"trace schema {d['schema_version']} is not {SCHEMA_VERSION}", "completeness")
            return False
        try:
            definition = definition_from_data(d["definition"], origin="recorded definition")
        except InvalidRequest as exc:
            self.fail(line, exc.message, "completeness")
            return False
        if definition.definition_hash() != d["definition_hash"]:
            self.fail(line, "the definition hash does not match the recorded definition", "completeness")
        self.first_phase = definition.phases[0].name
        self.phases = {p.name: {"roles": p.bound_roles(), "judge": p.judge} for p in definition.phases}
        self.transitions = {k: list(v) for k, v in definition.transitions.items()}
        self.terminals = set(definition.terminal_phases)
        self.skips = {k: list(v) for k, v in definition.skip_reasons.items()}
        self._definition = definition
        return True

    def _roles_of(self, phase: str) -> Iterable[str]:
        return self.phases.get(phase, {}).get("roles", ())  # type: ignore[no-any-return]

    def _allowed(self, source: str, target: str) -> bool:
        return self._definition.allowed(source, target)


def _identity(lines: list[TraceLine], result: Verification, asked: str | None) -> None:
    """One run id throughout, and the one asked for."""
    first = lines[0]
    own = first.record.o.get("run_id") if first.record.kind == "header" else None
    if asked is not None and own != asked:
        result.problems.append(
            Problem("identity", first.number, first.record.seq, f"the trace is of run {own!r}, not of run {asked!r}")
        )
    for line in lines[1:]:
        named = line.record.o.get("run_id")
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


def _replayability(lines: list[TraceLine], result: Verification) -> None:
    header = result.header
    providers = header.get("providers", {})
    for role, identity in sorted(providers.items() if isinstance(providers, dict) else []):
        if not isinstance(identity, dict) or not identity.get("deterministic", False):
            identity = identity if isinstance(identity, dict) else {}
            why = identity.get("deterministic_why", "unknown")
            result.replay_reasons.append(
                f"role {role}: provider {identity.get('provider')} is non-deterministic ({why})"
            )
    if not result.ok:
        result.replay_reasons.append("the trace does not verify")
    result.replayable = not result.replay_reasons
