"""Hand :class:`~seamline.telemetry.spans.SpanRecord` objects to the OpenTelemetry SDK.

The SDK mints ids through its ``IdGenerator``; :class:`_FixedIds` hands it the ids the
builder derived, so a span keeps the same trace and span id however often it is sent.
Metrics follow the GenAI conventions: ``gen_ai.client.token.usage`` (tokens, per
``gen_ai.token.type``) for every model call and ``gen_ai.client.operation.duration``
(seconds) for every model call and agent turn.

Exporting is best effort: a collector that is down never fails a run.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from opentelemetry import trace
from opentelemetry.metrics import Histogram
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from seamline.telemetry.spans import AttributeValue, SpanRecord

__all__ = ["OtelSink"]

_SCOPE: Final = "seamline"
_DEFAULT_TIMEOUT_S: Final = 3.0
_CLOSE_SLACK_S: Final = 1.0  # beyond the export timeout, what close waits for a flush that overruns it
_KINDS: Final = {"internal": SpanKind.INTERNAL, "client": SpanKind.CLIENT}
_TOKEN_BUCKETS: Final = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
_DURATION_BUCKETS: Final = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)


class _FixedIds(IdGenerator):
    """Returns the ids set just before each span starts."""

    def __init__(self) -> None:
        self.trace_id = 0
        self.span_id = 0

    def generate_span_id(self) -> int:
        return self.span_id

    def generate_trace_id(self) -> int:
        return self.trace_id


class _Noting(SpanExporter):
    """Passes spans on and remembers whether any batch failed."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.failed = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception:  # noqa: BLE001 - telemetry is best effort
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self.failed += len(spans)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def _quietly(flush: Callable[[], object]) -> None:
    try:
        flush()
    except Exception:
        logging.getLogger(__name__).debug("telemetry flush failed", exc_info=True)


class OtelSink:
    """Sends finished spans (and their metrics) through an OpenTelemetry SDK pipeline.

    ``span_exporter`` receives the spans; ``metric_reader`` (optional) collects the
    metrics. :meth:`otlp` builds the OTLP/HTTP pair from the standard ``OTEL_*`` variables.
    """

    def __init__(
        self,
        span_exporter: SpanExporter,
        *,
        metric_reader: MetricReader | None = None,
        batch: bool = True,
        notice: Callable[[str], None] | None = None,
        timeout_s: float = _DEFAULT_TIMEOUT_S,
    ) -> None:
        self._notice = notice
        self._timeout_s = timeout_s
        self._exporter = _Noting(span_exporter)
        resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "seamline")})
        self._ids = _FixedIds()
        self.tracer_provider = TracerProvider(resource=resource, id_generator=self._ids)
        processor = BatchSpanProcessor(self._exporter) if batch else SimpleSpanProcessor(self._exporter)
        self.tracer_provider.add_span_processor(processor)
        self._tracer = self.tracer_provider.get_tracer(_SCOPE)
        self.meter_provider: MeterProvider | None = None
        self._tokens: Histogram | None = None
        self._duration: Histogram | None = None
        if metric_reader is not None:
            self.meter_provider = MeterProvider(resource=resource, metric_readers=[metric_reader])
            meter = self.meter_provider.get_meter(_SCOPE)
            self._tokens = meter.create_histogram(
                "gen_ai.client.token.usage",
                unit="{token}",
                description="Number of input and output tokens used",
                explicit_bucket_boundaries_advisory=list(_TOKEN_BUCKETS),
            )
            self._duration = meter.create_histogram(
                "gen_ai.client.operation.duration",
                unit="s",
                description="GenAI operation duration",
                explicit_bucket_boundaries_advisory=list(_DURATION_BUCKETS),
            )

    @classmethod
    def otlp(cls, *, notice: Callable[[str], None] | None = None) -> OtelSink:
        """OTLP/HTTP to ``OTEL_EXPORTER_OTLP_ENDPOINT`` (default ``http://localhost:4318``).

        ``OTEL_METRICS_EXPORTER=none`` leaves metrics out (for collectors that take only
        traces). The SDK's own retry messages are silenced; ``notice`` hears one line when
        spans could not be sent.
        """
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        for name in ("opentelemetry.exporter", "opentelemetry.sdk"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
        # A collector that is down costs a run a few seconds, not the SDK's 10 s per signal.
        timeout = float(os.environ.get("OTEL_EXPORTER_OTLP_TIMEOUT") or _DEFAULT_TIMEOUT_S)
        reader: MetricReader | None = None
        if os.environ.get("OTEL_METRICS_EXPORTER", "").strip().lower() != "none":
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

            reader = PeriodicExportingMetricReader(
                OTLPMetricExporter(timeout=timeout), export_interval_millis=60_000, export_timeout_millis=timeout * 1000
            )
        return cls(OTLPSpanExporter(timeout=timeout), metric_reader=reader, notice=notice, timeout_s=timeout)

    def emit(self, spans: Iterable[SpanRecord]) -> None:
        """Start and end each span at its recorded times, with its derived ids."""
        for span in spans:
            try:
                self._emit(span)
            except Exception:
                logging.getLogger(__name__).debug("span %s not exported", span.name, exc_info=True)

    def _emit(self, record: SpanRecord) -> None:
        context = None
        if record.parent_id is not None:
            parent = SpanContext(
                record.trace_id, record.parent_id, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED)
            )
            context = trace.set_span_in_context(NonRecordingSpan(parent))
        self._ids.trace_id, self._ids.span_id = record.trace_id, record.span_id
        span = self._tracer.start_span(
            record.name,
            context=context,
            kind=_KINDS[record.kind],
            attributes=record.attributes,
            start_time=record.start_ns,
        )
        if record.error:
            span.set_status(Status(StatusCode.ERROR, str(record.attributes.get("error.type", ""))))
        span.end(end_time=record.end_ns)
        self._measure(record)

    def _measure(self, record: SpanRecord) -> None:
        if self._tokens is None or self._duration is None:
            return
        operation = record.attributes.get("gen_ai.operation.name")
        if operation not in ("chat", "invoke_agent"):
            return
        common: dict[str, AttributeValue] = {"gen_ai.operation.name": str(operation)}
        for key in ("gen_ai.provider.name", "gen_ai.request.model", "gen_ai.response.model", "error.type"):
            if key in record.attributes:
                common[key] = record.attributes[key]
        self._duration.record(max(record.end_ns - record.start_ns, 0) / 1e9, common)
        if operation != "chat" or record.error:
            return
        for token_type, key in (("input", "gen_ai.usage.input_tokens"), ("output", "gen_ai.usage.output_tokens")):
            value = record.attributes.get(key)
            if isinstance(value, int):
                self._tokens.record(value, {**common, "gen_ai.token.type": token_type})

    def close(self) -> int:
        """Flush what is pending and stop; safe to call twice. Returns how many spans could
        not be sent (``notice`` hears it too).

        Spans and metrics are flushed at once, each in its own thread, so a collector that
        is down (or accepts and never answers) costs one export timeout, not one per signal."""
        meter_provider, self.meter_provider = self.meter_provider, None
        flushes = [threading.Thread(target=_quietly, args=(self.tracer_provider.shutdown,), daemon=True)]
        if meter_provider is not None:
            flushes.append(threading.Thread(target=_quietly, args=(meter_provider.shutdown,), daemon=True))
        for flush in flushes:
            flush.start()
        deadline = time.monotonic() + self._timeout_s + _CLOSE_SLACK_S
        for flush in flushes:
            flush.join(max(deadline - time.monotonic(), 0.0))
        failed, self._exporter.failed = self._exporter.failed, 0
        if failed and self._notice is not None:
            self._notice(f"could not send {failed} span(s); the run itself is not affected")
        return failed
