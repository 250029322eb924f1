"""Spans while a run goes on, and the same spans afterwards from its trace.

- :func:`tap_pipeline` wraps a pipeline run's event stream: after each event it reads
  the records the controller's trace writer has made durable and turns them into spans,
  so live spans are built from exactly the records ``trace export --otlp`` reads later.
- :func:`tap_turn` wraps a plain turn's event stream (no trace is kept for it): each
  event becomes a record with the next ``seq`` and the time it was seen.
- :func:`spans_of_trace` rebuilds the spans of a trace file.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from seamline.events import Event, TextDelta, encode_event
from seamline.telemetry.spans import SpanBuilder, SpanRecord, capture_content_from_env
from seamline.trace.records import TraceRecord, decode_body, split_line

if TYPE_CHECKING:
    from seamline.pipeline.controller import PipelineController
    from seamline.telemetry.otel import OtelSink
    from seamline.trace.writer import TraceWriter

__all__ = ["spans_of_records", "spans_of_trace", "tap_pipeline", "tap_turn"]

_to_plain = msgspec.json.Decoder()


def _records(data: bytes) -> Iterator[TraceRecord]:
    for line in data.splitlines():
        parts = split_line(line)
        if parts is None:
            continue
        try:
            yield decode_body(parts[1])
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue


def spans_of_records(records: Iterable[TraceRecord], *, capture_content: bool | None = None) -> list[SpanRecord]:
    """Every span of a run, from its records."""
    builder = SpanBuilder(capture_content=capture_content_from_env() if capture_content is None else capture_content)
    spans: list[SpanRecord] = []
    for record in records:
        spans += builder.add_record(record)
    return spans + builder.finish()


def spans_of_trace(path: str | Path, *, capture_content: bool | None = None) -> list[SpanRecord]:
    """Every span of the run whose trace is at ``path``."""
    return spans_of_records(_records(Path(path).read_bytes()), capture_content=capture_content)


class _TraceFollower:
    """Reads the records a :class:`TraceWriter` has flushed, once each."""

    def __init__(self, writer: TraceWriter) -> None:
        self._writer = writer
        self._offset = 0  # bytes of the file, or lines in memory, already read
        self._partial = b""
        self._read = 0  # records handed out so far

    def new_records(self) -> list[TraceRecord]:
        if self._read >= self._writer.seq:
            return []  # nothing appended since the last look: no file access
        found = self._new_records()
        self._read += len(found)
        return found

    def _new_records(self) -> list[TraceRecord]:
        lines = self._writer.lines
        if lines is not None:
            fresh, self._offset = lines[self._offset :], len(lines)
            return list(_records(b"".join(fresh)))
        path = self._writer.path
        if path is None or not path.is_file():
            return []
        with open(path, "rb") as handle:
            handle.seek(self._offset)
            data = handle.read()
        self._offset += len(data)
        data, self._partial = self._partial + data, b""
        if data and not data.endswith(b"\n"):
            data, _, self._partial = data.rpartition(b"\n")
        return list(_records(data))


async def tap_pipeline(
    controller: PipelineController, events: AsyncIterator[Event], sink: OtelSink
) -> AsyncIterator[Event]:
    """Pass ``events`` on unchanged; send the run's spans to ``sink`` as its records reach disk."""
    follower = _TraceFollower(controller.writer)
    builder = SpanBuilder(run_id=controller.run_id, capture_content=capture_content_from_env())
    try:
        async for event in events:
            yield event
            if type(event) is not TextDelta:  # deltas are never recorded; skip the look
                for record in follower.new_records():
                    sink.emit(builder.add_record(record))
    finally:
        for record in follower.new_records():
            sink.emit(builder.add_record(record))
        sink.emit(builder.finish())
        sink.close()


async def tap_turn(
    events: AsyncIterator[Event], sink: OtelSink, *, prompt: str, run_id: str | None = None
) -> AsyncIterator[Event]:
    """Pass ``events`` on unchanged; send the turn's spans to ``sink`` as they end.

    The spans' ids derive from ``run_id``, by default the turn's session id: a later turn
    of the same session (``run --session``) needs an id of its own, or its spans would
    take the ids of the first turn's."""
    builder = SpanBuilder(run_id=run_id, capture_content=capture_content_from_env())
    seq = 0
    builder.add(seq, "prompt", time.time(), {"prompt": prompt}, {})
    try:
        async for event in events:
            yield event
            if type(event) is TextDelta:
                continue
            seq += 1
            plain = _to_plain.decode(encode_event(event))
            o = {"session_id": plain.pop("session_id")} if "session_id" in plain else {}
            sink.emit(builder.add(seq, "event", time.time(), {"event": plain}, o))
    finally:
        sink.emit(builder.finish())
        sink.close()
