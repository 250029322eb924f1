"""Shared pieces of the telemetry tests: an in-memory sink and span lookups."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from seamline.telemetry.otel import OtelSink


class MemorySink(OtelSink):
    """An :class:`OtelSink` that keeps spans and metrics in memory (and survives close)."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.reader = InMemoryMetricReader()
        super().__init__(self.exporter, metric_reader=self.reader, batch=False)
        self.metrics: Any = None

    def close(self) -> int:
        self.metrics = self.reader.get_metrics_data()
        return super().close()

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())


def by_name(spans: list[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


def shape(span: ReadableSpan) -> tuple[Any, ...]:
    """What must agree between live and exported spans: name, kind, ids, parent, times, attributes."""
    parent = span.parent.span_id if span.parent is not None else None
    assert span.context is not None
    return (
        span.name,
        span.kind,
        span.context.trace_id,
        span.context.span_id,
        parent,
        span.start_time,
        span.end_time,
        dict(span.attributes or {}),
        span.status.status_code,
    )
