"""OtelSink.close flushes spans and metrics at once: a collector that never answers costs
one export timeout, not one per signal."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from seamline.telemetry.otel import OtelSink
from seamline.telemetry.spans import SpanBuilder

_WAIT_S = 10.0  # only the broken (one after the other) case waits this long


class _Meeting:
    """Each exporter waits, within its own export, for the other one to be exporting too."""

    def __init__(self) -> None:
        self.spans = threading.Event()
        self.metrics = threading.Event()
        self.spans_met = False
        self.metrics_met = False


class _Spans(SpanExporter):
    def __init__(self, meeting: _Meeting) -> None:
        self.meeting = meeting

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.meeting.spans.set()
        self.meeting.spans_met = self.meeting.metrics.wait(_WAIT_S)
        return SpanExportResult.FAILURE  # as a collector that never answers


class _Metrics(MetricExporter):
    def __init__(self, meeting: _Meeting) -> None:
        super().__init__()
        self.meeting = meeting

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        self.meeting.metrics.set()
        self.meeting.metrics_met = self.meeting.spans.wait(_WAIT_S)
        return MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        return None


def test_close_flushes_spans_and_metrics_at_once_and_counts_the_lost_spans() -> None:
    meeting = _Meeting()
    reader = PeriodicExportingMetricReader(_Metrics(meeting), export_interval_millis=3_600_000)
    notices: list[str] = []
    sink = OtelSink(_Spans(meeting), metric_reader=reader, notice=notices.append)
    builder = SpanBuilder(run_id="r")
    sink.emit(builder.add(0, "event", 1.0, {"event": {"type": "session", "provider": "openai", "model": "m"}}, {}))
    sink.emit(builder.add(1, "event", 2.0, {"event": {"type": "usage", "input_tokens": 3, "output_tokens": 1}}, {}))
    sink.emit(builder.add(2, "event", 3.0, {"event": {"type": "complete", "outcome": "completed"}}, {}))
    assert sink.close() == 2
    assert meeting.spans_met and meeting.metrics_met  # both were exporting at the same time
    assert notices == ["could not send 2 span(s); the run itself is not affected"]
