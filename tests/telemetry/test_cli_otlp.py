"""`run --otel` and `trace export --otlp` as a user runs them, against a local OTLP/HTTP receiver."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

DOCS = Path(__file__).resolve().parents[2] / "docs"


class Receiver:
    """Keeps what OTLP/HTTP exporters post to /v1/traces and /v1/metrics."""

    def __init__(self) -> None:
        self.traces: list[ExportTraceServiceRequest] = []
        self.metrics: list[ExportMetricsServiceRequest] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path == "/v1/traces":
                    receiver.traces.append(ExportTraceServiceRequest.FromString(body))
                elif self.path == "/v1/metrics":
                    receiver.metrics.append(ExportMetricsServiceRequest.FromString(body))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"

    def spans(self) -> list[Any]:
        return [s for req in self.traces for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]

    def metric_names(self) -> set[str]:
        return {
            m.name for req in self.metrics for rm in req.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
        }


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    thread = threading.Thread(target=found.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        found.server.shutdown()
        found.server.server_close()
        thread.join(timeout=10)


def attrs(span: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        value = kv.value
        out[kv.key] = getattr(value, value.WhichOneof("value"))
    return out


def key(span: Any) -> tuple[Any, ...]:
    return (
        span.name,
        span.kind,
        span.trace_id,
        span.span_id,
        span.parent_span_id,
        span.start_time_unix_nano,
        span.end_time_unix_nano,
        sorted(attrs(span).items()),
    )


def test_run_otel_then_export_sends_the_same_spans(
    seamline_cmd: list[str], cli_env: dict[str, str], receiver: Receiver, tmp_path: Path
) -> None:
    env = cli_env | {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}
    env.pop("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", None)
    store = tmp_path / "s.db"
    done = subprocess.run(
        [
            *seamline_cmd,
            "run",
            "--otel",
            "--store",
            str(store),
            "--workspace",
            str(DOCS),
            "--pipeline",
            "answer-review",
            "How do I add a provider?",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    live = receiver.spans()
    names = [s.name for s in live]
    assert names.count("invoke_workflow answer-review") == 1
    assert names.count("invoke_agent writer") == 1 and names.count("invoke_agent reviewer") == 1
    assert names.count("chat extractive") >= 1 and any(n.startswith("execute_tool ") for n in names)
    assert {"gen_ai.client.token.usage", "gen_ai.client.operation.duration"} <= receiver.metric_names()
    run_id = next(attrs(s)["seamline.run_id"] for s in live if s.name == "invoke_workflow answer-review")

    receiver.traces.clear()
    export = subprocess.run(
        [*seamline_cmd, "trace", "export", "--otlp", "--store", str(store), run_id],
        env=env | {"OTEL_METRICS_EXPORTER": "none"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert export.returncode == 0, export.stderr
    assert f"sent {len(live)} span(s)" in export.stderr
    assert sorted(map(key, receiver.spans())) == sorted(map(key, live))


def test_export_without_a_collector_is_not_an_error_for_the_run(
    seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path
) -> None:
    # Nothing listens on this port: the spans are lost, the run is not.
    env = cli_env | {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_EXPORTER_OTLP_TIMEOUT": "2"}
    done = subprocess.run(
        [*seamline_cmd, "run", "--json", "--workspace", str(DOCS), "events"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert '"type":"complete"' in done.stdout
    # One line says so, instead of the SDK's retry messages.
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("seamline: telemetry: could not send ")
    assert lines[0].endswith("(to http://127.0.0.1:9)")


def test_without_the_extra_otel_is_a_one_line_error(cli_env: dict[str, str]) -> None:
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"  # as if the otel extra were not installed
        "from seamline.cli.main import main\n"
        "sys.argv = ['seamline', 'run', '--otel', '--workspace', sys.argv[1], 'events']\n"
        "sys.exit(main())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(DOCS)], env=cli_env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    from seamline.extras import install_hint  # the hint for this install (a clone here), as every hint

    assert done.stderr.strip().splitlines() == [
        f"seamline: invalid_request error: OpenTelemetry export needs the otel extra: {install_hint('otel')}"
    ]


def test_run_session_otel_sends_the_continued_turn_as_spans_of_that_conversation(
    seamline_cmd: list[str], cli_env: dict[str, str], receiver: Receiver, tmp_path: Path
) -> None:
    store = tmp_path / "s.db"
    quiet = {k: v for k, v in cli_env.items() if not k.startswith("OTEL_")}
    otel = quiet | {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_METRICS_EXPORTER": "none"}
    first = subprocess.run(
        [*seamline_cmd, "run", "--otel", "--json", "--store", str(store), "--workspace", str(DOCS), "events"],
        env=otel,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert first.returncode == 0, first.stderr
    session_id = first.stdout.split('"session_id":"', 1)[1].split('"', 1)[0]
    first_spans = receiver.spans()
    assert [s.name for s in first_spans].count("invoke_agent offline") == 1
    receiver.traces.clear()
    again = subprocess.run(
        [*seamline_cmd, "run", "--otel", "--session", session_id, "--store", str(store), "providers"],
        env=otel,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    spans = receiver.spans()
    turns = [s for s in spans if s.name == "invoke_agent offline"]
    assert len(turns) == 1
    assert attrs(turns[0])["gen_ai.conversation.id"] == session_id  # the continued conversation
    assert any(s.name.startswith("chat ") for s in spans)
    # A trace and span ids of its own: the first turn's spans are not overwritten.
    assert {s.trace_id for s in spans}.isdisjoint({s.trace_id for s in first_spans})
    assert {s.span_id for s in spans}.isdisjoint({s.span_id for s in first_spans})


def test_export_with_the_collector_down_says_so_once_and_fails(
    seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path
) -> None:
    store = tmp_path / "s.db"
    quiet = {k: v for k, v in cli_env.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [*seamline_cmd, "run", "--store", str(store), "--workspace", str(DOCS), "--pipeline", "answer-review", "hi"],
        env=quiet, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    run_id = done.stderr.split("· run ", 1)[1].split()[0]
    down = quiet | {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_EXPORTER_OTLP_TIMEOUT": "1"}
    export = subprocess.run(
        [*seamline_cmd, "trace", "export", "--otlp", "--store", str(store), run_id],
        env=down, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert export.returncode == 1
    lines = export.stderr.strip().splitlines()
    assert len(lines) == 1, export.stderr
    assert lines[0].startswith("seamline: transport error: could not send ")
    assert lines[0].endswith(f"span(s) of {run_id} (to http://127.0.0.1:9)")
