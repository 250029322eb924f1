"""A real OTLP consumer: Arize Phoenix (installed by scripts/system/70-phoenix.sh) ingests a
pipeline run sent with ``run --otel``; its REST API then shows the span tree, the token
counts and the tool spans."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from seamline.telemetry.live import spans_of_trace
from seamline.telemetry.spans import span_id_of, trace_id_of

ROOT = Path(__file__).resolve().parents[2]
PHOENIX = ROOT / ".tools" / "phoenix" / "bin" / "phoenix"
DOCS = ROOT / "docs"
STARTUP_S = 240  # it migrates its database and builds its app: ~40 s on a busy 2-core machine

pytestmark = pytest.mark.real


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture
def phoenix(tmp_path: Path) -> Iterator[str]:
    assert PHOENIX.is_file(), "Phoenix is missing: run bash scripts/system/70-phoenix.sh"
    port, grpc_port = free_port(), free_port()
    work = tmp_path / "phoenix"
    work.mkdir()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(work),
        "PHOENIX_WORKING_DIR": str(work),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc_port),
        # Nothing leaves the machine: no usage telemetry, no external web resources, no assistant.
        "PHOENIX_TELEMETRY_ENABLED": "false",
        "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
        "PHOENIX_DISABLE_AGENT_ASSISTANT": "true",
        "DO_NOT_TRACK": "1",
    }
    log = (work / "phoenix.log").open("wb")
    process = subprocess.Popen(
        [str(PHOENIX), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            assert process.poll() is None, f"Phoenix exited: {(work / 'phoenix.log').read_text()[-2000:]}"
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=2) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            assert time.monotonic() < deadline, "Phoenix did not answer /healthz in time"
            time.sleep(0.5)  # polling a readiness endpoint, not waiting for a result
        yield base
    finally:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        except ProcessLookupError:
            pass
        log.close()


def test_phoenix_shows_a_pipeline_run(
    phoenix: str, seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path
) -> None:
    env = cli_env | {"OTEL_EXPORTER_OTLP_ENDPOINT": phoenix, "OTEL_METRICS_EXPORTER": "none"}
    done = subprocess.run(
        [
            *seamline_cmd,
            "run",
            "--otel",
            "--store",
            str(tmp_path / "s.db"),
            "--workspace",
            str(DOCS),
            "--pipeline",
            "answer-review",
            "How do I add a provider?",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    assert "telemetry" not in done.stderr  # every span was accepted
    (trace,) = (tmp_path / "traces").glob("*.jsonl")
    expected = len(spans_of_trace(trace))
    # Phoenix ingests in the background: poll its API until every span sent is there.
    deadline = time.monotonic() + 60
    while True:
        spans = get_json(f"{phoenix}/v1/projects/default/spans?limit=1000")["data"]
        if len(spans) >= expected or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(spans) == expected
    names = Counter(s["name"] for s in spans)
    assert names["invoke_workflow answer-review"] == 1
    assert names["invoke_agent writer"] == 1 and names["invoke_agent reviewer"] == 1
    assert names["chat extractive"] >= 1
    tools = [s for s in spans if s["name"].startswith("execute_tool ")]
    assert tools and all(s["attributes"]["gen_ai.tool.call.id"] for s in tools)
    # Phoenix reads the kinds from openinference.span.kind (UNKNOWN without it).
    kinds = Counter((s["name"].split(" ")[0], s["span_kind"]) for s in spans)
    assert set(kinds) == {
        ("invoke_workflow", "CHAIN"),
        ("invoke_agent", "AGENT"),
        ("chat", "LLM"),
        ("execute_tool", "TOOL"),
    }
    assert (
        kinds[("invoke_workflow", "CHAIN")] == 1 and kinds[("invoke_agent", "AGENT")] == 2
    )  # the writer's and the reviewer's turns

    # The tree: one root, roles under it, model and tool calls under the writer's turn.
    by_id = {s["context"]["span_id"]: s for s in spans}
    (root,) = [s for s in spans if not s["parent_id"]]
    run_id = root["attributes"]["seamline.run_id"]
    assert root["context"]["trace_id"] == f"{trace_id_of(run_id):032x}"
    assert root["context"]["span_id"] == f"{span_id_of(run_id, 1):016x}"
    assert root["attributes"]["gen_ai.operation.name"] == "invoke_workflow"
    turns = [s for s in spans if s["name"].startswith("invoke_agent ") and s is not root]
    assert all(s["parent_id"] == root["context"]["span_id"] for s in turns)
    writer = next(s for s in turns if s["name"] == "invoke_agent writer")
    for span in spans:
        if span["name"].startswith(("chat ", "execute_tool ")):
            assert by_id[span["parent_id"]] is writer

    # Token counts as sent: the chats add up to the writer's turn and to the run.
    chats = [s for s in spans if s["name"].startswith("chat ")]
    chat_input = sum(s["attributes"]["gen_ai.usage.input_tokens"] for s in chats)
    assert chat_input > 0
    assert writer["attributes"]["gen_ai.usage.input_tokens"] == chat_input
    assert root["attributes"]["gen_ai.usage.input_tokens"] == chat_input
    assert writer["attributes"]["gen_ai.conversation.id"]
