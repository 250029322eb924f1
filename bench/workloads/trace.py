"""Trace throughput: records appended per second (durably), verified per second, and the
time to replay a 100,000-record trace (10,000 in quick mode).

The trace is a well-formed run of the ``single`` pipeline whose one agent turn holds N
event records (tool calls, results and usage, as a long agent turn would), so verify
checks the chain, the lifecycle grammar and completeness over every record. Appends are
made durable with one ``fsync`` per batch of 1,000 records. Each figure checks its result.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from seamline.pipeline.builtin import SINGLE
from seamline.trace.records import SCHEMA_VERSION
from seamline.trace.replay import replay
from seamline.trace.schema import (
    EventData,
    EventObserved,
    HeaderData,
    PhaseEndData,
    PhaseStartData,
    PromptData,
    RecordedOutput,
    RecordedUsage,
    RoleEndData,
    RoleStartData,
    RunEndData,
    RunObserved,
    RunStartData,
    RunUsage,
    TransitionData,
)
from seamline.trace.verify import verify_trace
from seamline.trace.writer import TraceWriter

BATCH = 1000


def _events(n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(n):
        k = i % 3
        if k == 0:
            event = {
                "type": "tool_call",
                "call_id": f"c{i}",
                "name": "read_file",
                "arguments": {"path": f"f{i}.md"},
                "source": "host",
            }
        elif k == 1:
            event = {
                "type": "tool_result",
                "call_id": f"c{i - 1}",
                "output": "1\tsome line of text",
                "is_error": False,
                "name": "read_file",
            }
        else:
            event = {
                "type": "usage",
                "input_tokens": 120,
                "output_tokens": 8,
                "cache_read_tokens": 0,
                "cache_write_tokens": 0,
                "cost_usd": 0.0,
                "priced": True,
                "model": "m",
            }
        out.append(event)
    return out


def _write(path: Path, n: int) -> float:
    where = {"phase": "answer", "role": "agent", "round": 1, "attempt": 1}
    events = _events(n - 10)  # ten lifecycle records around the turn's events
    tokens = {"input_tokens": 0, "output_tokens": 0}
    for e in events:
        if e["type"] == "usage":
            tokens["input_tokens"] += e["input_tokens"]
            tokens["output_tokens"] += e["output_tokens"]
    usage = RecordedUsage(**tokens, cache_read_tokens=0, cache_write_tokens=0, cost_usd=0.0, priced=True)
    observed = EventObserved(session_id="s")
    started = time.perf_counter()
    w = TraceWriter(path)
    w.append(
        HeaderData(
            schema_version=SCHEMA_VERSION,
            pipeline="single",
            definition=SINGLE.to_data(),
            definition_hash=SINGLE.definition_hash(),
            task="bench",
            prompt_hash="0" * 64,
            config={},
            config_hash="0" * 64,
            providers={},
            seamline_version="bench",
        ),
        RunObserved(run_id="bench"),
    )
    w.append(RunStartData(pipeline="single", first_phase="answer"))
    w.append(PhaseStartData(phase="answer", round=1, roles=["agent"]))
    w.append(RoleStartData(**where))
    w.append(PromptData(**where, prompt="bench", prompt_hash="0" * 64, provider={}))
    for i, event in enumerate(events, 1):
        w.append(EventData(**where, event=event), observed)
        if i % BATCH == 0:
            w.flush()
    w.append(
        EventData(
            **where, event={"type": "complete", "outcome": "completed", "stop_reason": "end_turn", "text": "done"}
        )
    )
    w.append(RoleEndData(**where, status="ok", output=_output("done"), usage=usage))
    w.append(PhaseEndData(phase="answer", round=1, status="ok"))
    w.append(TransitionData(from_="answer", to="done", reason="next"))
    total = RunUsage(by_role={"agent": usage}, by_phase={"answer": usage}, total=usage)
    w.append(RunEndData(outcome="completed", stop_reason="completed", text="done", usage=total))
    w.close()
    elapsed = time.perf_counter() - started
    assert w.seq == n, (w.seq, n)
    return elapsed


def _output(text: str) -> RecordedOutput:
    return RecordedOutput(text=text, verdict=None, confidence=None, feedback=None, skip=None, data={})


def run(*, quick: bool = False) -> dict[str, Any]:
    n = 10_000 if quick else 100_000
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.jsonl"
        write_s = _write(path, n)
        records = sum(1 for _ in path.open("rb"))
        started, cpu = time.perf_counter(), time.process_time()
        verification = verify_trace(path)
        verify_s, verify_cpu = time.perf_counter() - started, time.process_time() - cpu
        assert verification.ok, verification.problems[:3]
        assert len(verification.typed_records) == records
        started, cpu = time.perf_counter(), time.process_time()
        result = replay(path)
        replay_s, replay_cpu = time.perf_counter() - started, time.process_time() - cpu
        assert result.text == "done" and result.outcome == "completed" and not result.mismatches
        size = path.stat().st_size
    return {
        "records": records,
        "bytes_per_record": round(size / records),
        "append_records_per_s": round(records / write_s),
        "verify_records_per_s": round(records / verify_s),
        "verify_records_per_cpu_s": round(records / verify_cpu),
        "replay_s": round(replay_s, 3),
        "replay_cpu_s": round(replay_cpu, 3),
        "replay_records_per_s": round(records / replay_s),
        "fsync_batch": BATCH,
    }
