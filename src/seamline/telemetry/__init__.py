"""OpenTelemetry GenAI export: spans and metrics built from the event stream and the trace.

Needs the ``otel`` extra (``pip install 'seamline[otel]'``) only to send them:
:mod:`seamline.telemetry.spans` builds spans with no OpenTelemetry import, and the core
never imports this room. See ``docs/otel.md``.
"""

from seamline.telemetry.spans import SpanBuilder, SpanRecord, span_id_of, trace_id_of

__all__ = ["SpanBuilder", "SpanRecord", "span_id_of", "trace_id_of"]
