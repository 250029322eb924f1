"""The CLI's OpenTelemetry hooks: ``run --otel`` and ``trace export --otlp RUN``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from seamline.errors import InvalidRequest, TransportFailure
from seamline.extras import install_hint

if TYPE_CHECKING:
    from seamline.events import Event
    from seamline.pipeline.controller import PipelineController
    from seamline.telemetry.otel import OtelSink

__all__ = ["add_otel_flag", "export_trace", "otel_events", "otel_sink", "otel_wanted", "turn_run_id"]

ENDPOINT_ENV: Final = "OTEL_EXPORTER_OTLP_ENDPOINT"


def add_otel_flag(parser: Any) -> None:
    parser.add_argument(
        "--otel",
        action="store_true",
        help=f"send OpenTelemetry GenAI spans and metrics over OTLP/HTTP (to ${ENDPOINT_ENV}, default "
        "http://localhost:4318); on by itself when that variable is set (see docs/otel.md)",
    )


def otel_wanted(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "otel", False) or os.environ.get(ENDPOINT_ENV))


def _endpoint() -> str:
    return os.environ.get(ENDPOINT_ENV) or "http://localhost:4318"


def otel_sink(*, quiet: bool = False) -> OtelSink:
    """The OTLP sink ``--otel`` sends to, or a classified error without the extra.
    ``quiet``: no notice line when spans are lost (the caller reports it)."""
    try:
        from seamline.telemetry.otel import OtelSink
    except ImportError:
        raise InvalidRequest(f"OpenTelemetry export needs the otel extra: {install_hint('otel')}") from None
    if quiet:
        return OtelSink.otlp()
    endpoint = _endpoint()
    return OtelSink.otlp(notice=lambda line: print(f"seamline: telemetry: {line} (to {endpoint})", file=sys.stderr))


def otel_events(
    args: argparse.Namespace,
    events: AsyncIterator[Event],
    *,
    prompt: str = "",
    controller: PipelineController | None = None,
    run_id: str | None = None,
) -> AsyncIterator[Event]:
    """``events`` as they are, or with their spans sent when ``--otel`` (or the env) asks.

    ``run_id`` names a plain turn's spans (default: its session id; see :func:`turn_run_id`)."""
    if not otel_wanted(args):
        return events
    from seamline.telemetry.live import tap_pipeline, tap_turn

    sink = otel_sink()
    if controller is not None:
        return tap_pipeline(controller, events, sink)
    return tap_turn(events, sink, prompt=prompt, run_id=run_id)


def turn_run_id(session_id: str, turn: int) -> str | None:
    """What names the spans of turn ``turn`` of a session: the session id for its first
    turn (as a plain ``run``), ``SESSION.tN`` for a later one (``run --session``), so each
    turn keeps a trace and span ids of its own."""
    return None if turn <= 1 else f"{session_id}.t{turn}"


def export_trace(path: Path) -> int:
    """``trace export --otlp``: rebuild the run's spans from its trace and send them; returns
    the count, or raises a :class:`TransportFailure` when any could not be sent."""
    from seamline.telemetry.live import spans_of_trace

    sink = otel_sink(quiet=True)
    spans = spans_of_trace(path)
    try:
        sink.emit(spans)
    finally:
        failed = sink.close()
    if failed:
        raise TransportFailure(
            f"could not send {failed} of {len(spans)} span(s) of {path.name.removesuffix('.jsonl')} (to {_endpoint()})"
        )
    return len(spans)
