"""The engine-free steps of a durable run, in one process: advance, run a turn, again."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

from seamline.durable import RunLedger, RunSpec, advance, run_turn
from seamline.errors import InvalidRequest
from seamline.pipeline.builtin import ANSWER_REVIEW
from seamline.sessions.sqlite_store import open_store
from seamline.sessions.trace_heads import anchored_head
from seamline.trace.verify import verify_trace
from tests.durable.conftest import opened_ledger
from tests.durable.pipelines import USAGE, fan_out_pipeline


def _register(store: Path, spec: RunSpec) -> None:
    kept = open_store(store)
    try:
        RunLedger(kept).register(spec.run_id, msgspec.to_builtins(spec))
    finally:
        kept.close()


async def _drive(store: Path, run_id: str) -> tuple[dict[str, object], list[list[str]]]:
    rounds: list[list[str]] = []
    while True:
        step = await advance(str(store), run_id)
        if step["done"]:
            return step["report"], rounds  # type: ignore[return-value]
        rounds.append(step["needed"])  # type: ignore[arg-type]
        await asyncio.gather(*(run_turn(str(store), run_id, key) for key in step["needed"]))  # type: ignore[union-attr]


def test_a_pipeline_advances_turn_by_turn_and_its_trace_verifies(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("hello\nworld\n")
    store = tmp_path / "s.db"
    spec = RunSpec(
        run_id="r1", definition=ANSWER_REVIEW.to_data(), task="what is hello?", store=str(store),
        workspace=str(tmp_path), trace_file=str(tmp_path / "r1.jsonl"),
    )  # fmt: skip
    _register(store, spec)
    report, rounds = asyncio.run(_drive(store, "r1"))
    assert rounds == [["write/writer/1/1"]]  # the reviewer is not an agent: no turn of its own
    assert (report["outcome"], report["stop_reason"], report["exit_code"]) == ("completed", "converged", 0)
    checked = verify_trace((tmp_path / "r1.jsonl").read_bytes())
    assert checked.ok and checked.replayable, checked.problems
    # A retried last step returns the same report and writes nothing twice.
    again = asyncio.run(advance(str(store), "r1"))
    assert again == {"done": True, "report": report}
    with opened_ledger(store) as ledger:
        kinds = [k for _, k, _ in ledger.events_after("r1", 0)]
        # The run's start is out before the writer's turn runs, not only at the end.
        assert kinds[0] == "run" and kinds[1] == "write/writer/1/1"
        assert kinds.count("run") == 6  # run start, transition, decision, transition, run end, complete: once


def test_a_finished_turn_is_returned_as_recorded_and_never_runs_again(tmp_path: Path) -> None:
    definition = fan_out_pipeline(tmp_path, ["a", "b"])
    store = tmp_path / "s.db"
    data = msgspec.json.decode(definition.read_bytes())
    spec = RunSpec(run_id="r2", definition=data, task="go", store=str(store), workspace=str(tmp_path))
    _register(store, spec)
    step = asyncio.run(advance(str(store), "r2"))
    assert step == {"done": False, "needed": ["fan/a/1/1", "fan/b/1/1"]}
    first = asyncio.run(run_turn(str(store), "r2", "fan/a/1/1"))
    second = asyncio.run(run_turn(str(store), "r2", "fan/a/1/1"))
    assert first["reused"] is False and second["reused"] is True
    assert second["cost_usd"] == first["cost_usd"] == pytest.approx(USAGE["cost_usd"])
    with opened_ledger(store) as ledger:
        assert ledger.turns("r2")["fan/a/1/1"]["starts"] == 1
        assert ledger.spent_usd("r2") == pytest.approx(USAGE["cost_usd"])
    with pytest.raises(InvalidRequest, match="never asked for the turn"):
        asyncio.run(run_turn(str(store), "r2", "fan/zz/1/1"))


def test_the_budget_is_shared_through_the_store_whichever_worker_spends_it(tmp_path: Path) -> None:
    definition = fan_out_pipeline(tmp_path, ["a", "b", "c"])
    store = tmp_path / "s.db"
    data = msgspec.json.decode(definition.read_bytes())
    spec = RunSpec(
        run_id="r3", definition=data, task="go", store=str(store), workspace=str(tmp_path), budget_usd=0.0015,
        trace_file=str(tmp_path / "r3.jsonl"),
    )  # fmt: skip
    _register(store, spec)
    step = asyncio.run(advance(str(store), "r3"))
    # One turn after another, as separate workers would: each sees what the others spent.
    outcomes = [asyncio.run(run_turn(str(store), "r3", key))["outcome"] for key in step["needed"]]
    assert outcomes == ["completed", "budget", "budget"]
    report = asyncio.run(advance(str(store), "r3"))["report"]
    assert (report["outcome"], report["stop_reason"], report["exit_code"]) == ("budget", "budget", 3)
    assert verify_trace((tmp_path / "r3.jsonl").read_bytes()).ok


def test_a_provider_that_fails_to_start_is_a_failed_turn_on_record_not_a_crash(tmp_path: Path) -> None:
    definition = fan_out_pipeline(tmp_path, ["a"])
    (tmp_path / "a.json").unlink()  # the role's script is gone: the provider cannot start
    store = tmp_path / "s.db"
    data = msgspec.json.decode(definition.read_bytes())
    spec = RunSpec(
        run_id="r4", definition=data, task="go", store=str(store), workspace=str(tmp_path),
        trace_file=str(tmp_path / "r4.jsonl"),
    )  # fmt: skip
    _register(store, spec)
    step = asyncio.run(advance(str(store), "r4"))
    summary = asyncio.run(run_turn(str(store), "r4", step["needed"][0]))
    assert summary["outcome"] == "failed"  # recorded, so a retried activity does not loop on it
    report = asyncio.run(advance(str(store), "r4"))["report"]
    assert (report["outcome"], report["stop_reason"], report["exit_code"]) == ("failed", "failed", 1)
    with opened_ledger(store) as ledger:
        errors = [e for _, k, e in ledger.events_after("r4", 0) if b'"type":"error"' in e]
        assert errors and b"cannot read script" in errors[0]


def test_a_store_whose_durable_tables_predate_the_worker_column_is_migrated(tmp_path: Path) -> None:
    import sqlite3

    from seamline.durable.ledger import RunLedger
    from seamline.sessions.schema import migration_sql
    from seamline.sessions.sqlite_store import open_store

    path = tmp_path / "v5.db"
    conn = sqlite3.connect(path)
    for number in range(1, 6):
        for statement in migration_sql(number, "sqlite"):
            conn.execute(statement)
    # The tables as the ledger made them on first use before the column existed.
    conn.execute(
        "CREATE TABLE durable_turns (run_id TEXT NOT NULL, turn_key TEXT NOT NULL, prompt TEXT NOT NULL, "
        "budget_usd REAL, status TEXT NOT NULL, starts INTEGER NOT NULL DEFAULT 0, events TEXT, cost_usd REAL, "
        "input_tokens INTEGER, output_tokens INTEGER, updated_at REAL NOT NULL, PRIMARY KEY (run_id, turn_key))"
    )
    conn.execute(
        "INSERT INTO durable_turns (run_id, turn_key, prompt, status, updated_at) VALUES ('r', 'k', 'p', 'needed', 1)"
    )
    conn.execute("PRAGMA application_id = 1397050700")
    conn.execute("PRAGMA user_version = 5")
    conn.commit()
    conn.close()
    store = open_store(path)
    try:
        ledger = RunLedger(store)
        assert ledger.turns("r") == {
            "k": {"status": "needed", "starts": 0, "worker": None, "cost_usd": None, "input_tokens": None,
                  "output_tokens": None}
        }  # fmt: skip
        assert ledger.start("r", "k", "123@host") == 1
        assert ledger.turns("r")["k"]["worker"] == "123@host"
    finally:
        store.close()


def test_a_final_pass_that_overlapped_one_already_recorded_leaves_its_trace_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker that missed its heartbeats is still in its final pass while the retry has
    # ended the run elsewhere: that late pass found no report when it began, and must not
    # replace the recorded trace (its record times differ) nor move the anchored head.
    definition = fan_out_pipeline(tmp_path, ["a"])
    store = tmp_path / "s.db"
    data = msgspec.json.decode(definition.read_bytes())
    trace = tmp_path / "r6.jsonl"
    spec = RunSpec(
        run_id="r6", definition=data, task="go", store=str(store), workspace=str(tmp_path), trace_file=str(trace)
    )
    _register(store, spec)
    report, _rounds = asyncio.run(_drive(store, "r6"))
    recorded = trace.read_bytes()
    real_report = RunLedger.report
    looks: list[str] = []

    def report_unseen_at_first(self: RunLedger, run_id: str) -> dict[str, object] | None:
        looks.append(run_id)
        return None if len(looks) == 1 else real_report(self, run_id)  # the pass's opening look ran before the end

    monkeypatch.setattr(RunLedger, "report", report_unseen_at_first)
    late = asyncio.run(advance(str(store), "r6"))
    monkeypatch.undo()
    assert late == {"done": True, "report": report}
    assert trace.read_bytes() == recorded
    kept = open_store(store)
    try:
        head = anchored_head(kept, "r6")
    finally:
        kept.close()
    assert head is not None and head.head_hash == report["head_hash"]
    assert verify_trace(recorded).ok
