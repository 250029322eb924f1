"""The bench's own machinery: hollow runs fail their checks, slow targets become timeouts,
and the table reads the same way for every figure. No timing is asserted here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


harness = _load("_bench_harness", BENCH / "peers" / "harness.py")
launch = _load("_bench_launch", BENCH / "peers" / "launch.py")
report = _load("_bench_report", BENCH / "report.py")


def _good() -> object:
    return harness.RunOutcome(answer="done", model_calls=6, tool_outputs=["K0", "K1", "K2", "K3", "K4"])


def test_check_run_accepts_the_scripted_work() -> None:
    harness.check_run(_good())


@pytest.mark.parametrize(
    "outcome",
    [
        {"answer": "", "model_calls": 6, "tool_outputs": ["K0", "K1", "K2", "K3", "K4"]},
        {"answer": "done", "model_calls": 5, "tool_outputs": ["K0", "K1", "K2", "K3", "K4"]},
        {"answer": "done", "model_calls": 6, "tool_outputs": ["K0", "K1", "K2", "K3"]},
        {"answer": "done", "model_calls": 6, "tool_outputs": ["K0", "K1", "K2", "K4", "K3"]},
    ],
)
def test_check_run_rejects_a_run_that_skipped_work(outcome: dict[str, object]) -> None:
    with pytest.raises(harness.CheckFailed):
        harness.check_run(harness.RunOutcome(**outcome))


def test_check_stream_rejects_merged_or_lost_deltas() -> None:
    chunks = harness.stream_chunks(50)
    harness.check_stream(list(chunks), chunks)
    merged = [chunks[0] + chunks[1], *chunks[2:]]
    with pytest.raises(harness.CheckFailed):
        harness.check_stream(merged, chunks)
    with pytest.raises(harness.CheckFailed):
        harness.check_stream(chunks[:-1], chunks)


def test_w1_fails_on_a_target_that_does_less_than_the_script() -> None:
    async def tool_run(latency: float) -> object:
        return harness.RunOutcome(answer="done", model_calls=1, tool_outputs=[])

    lazy = ModuleType("lazy")
    lazy.tool_run = tool_run  # type: ignore[attr-defined]
    with pytest.raises(harness.CheckFailed):
        harness.w1(lazy, runs=2, reps=1)


@pytest.mark.parametrize("target", ["floor", "seamline", "seamline_nostore"])
def test_run_peer_measures_and_checks_floor_and_seamline(target: str) -> None:
    w1 = launch.run_target(target, "w1", options=["--runs", "3", "--reps", "1"], timeout=120)
    assert w1["status"] == "ok", w1
    assert w1["us_per_model_call"] > 0 and len(w1["samples"]) == 1
    w3 = launch.run_target(target, "w3", options=["--deltas", "300", "--reps", "1"], timeout=120)
    assert w3["status"] == "ok", w3
    assert w3["deltas"] == 300 and w3["deltas_per_s"] > 0
    w2 = launch.run_target(target, "w2", options=["--runs", "20", "--latency", "0.001"], timeout=120)
    assert w2["status"] == "ok", w2
    assert w2["runs"] == 20 and w2["model_calls_per_s"] > 0 and w2["kb_per_run"] >= 0


def test_a_target_past_its_limit_is_recorded_as_a_timeout() -> None:
    # 10,000 runs cannot finish in a tenth of a second; the child is killed, not left behind
    result = launch.run_target("floor", "w1", options=["--runs", "10000", "--reps", "9"], timeout=0.1)
    assert result["status"] == "timeout" and result["timeout_s"] == 0.1


def test_a_crashing_target_is_an_error_with_its_message() -> None:
    result = launch.run_target("floor", "w1", options=["--runs", "not-a-number"], timeout=60)
    assert result["status"] == "error" and "invalid int value" in result["detail"]


def _table_report() -> dict[str, object]:
    values = {
        "floor": {"status": "ok", "us": 2.0, "rate": 1000.0},
        "seamline": {"status": "ok", "us": 100.0, "rate": 500.0},
        "langgraph": {"status": "timeout", "timeout_s": 45.0},
    }
    lower = launch.metric("a", "cost", unit="µs", better="lower", values=values, field="us", goal="≤ 50 µs")
    higher = launch.metric("b", "rate", unit="/s", better="higher", values=values, field="rate")
    return {"results": {"w": {"metrics": [lower, higher]}, "other": {"x": 1}}}


def test_table_shows_cost_against_the_floor_the_same_way_for_both_directions() -> None:
    table = report.render_table(_table_report())
    rows = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| ")}
    assert "| 100 (50.0×) |" in rows["cost"]  # 100 µs against the floor's 2 µs
    assert "| 500 (2.0×) |" in rows["rate"]  # half the floor's rate is twice its cost
    assert "timeout over 45 s" in rows["cost"]
    assert "`other`: x=1" in table


def test_update_readme_replaces_only_the_marked_block(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{report.START}\nold table\n{report.END}\noutro\n", encoding="utf-8")
    report.update_readme({**_table_report(), "machine": {"python": "3.11.7", "cpus": 2}}, readme)
    text = readme.read_text(encoding="utf-8")
    assert text.startswith("intro\n") and text.endswith("\noutro\n")
    assert "old table" not in text and "100 (50.0×)" in text and "Python 3.11.7" in text


def test_quick_mode_without_the_peer_environment_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(launch, "PEER_PYTHON", tmp_path / "missing" / "python")
    targets, note = launch.targets()
    assert targets == ["floor", "seamline", "seamline_nostore", "seamline_agent", "seamline_agent_nostore"]
    assert note is not None and "bench/setup-peers.sh" in note


def _metric(goal: str, unit: str, seamline: float, floor: float = 1.0, better: str = "lower") -> dict[str, object]:
    cells = {"floor": {"status": "ok", "value": floor}, "seamline": {"status": "ok", "value": seamline}}
    return {"label": "x", "unit": unit, "better": better, "goal": goal, "cells": cells}


@pytest.mark.parametrize(
    ("metric", "met"),
    [
        (_metric("≤ 50 µs", "µs", 97.1), False),
        (_metric("≤ 50 µs", "µs", 12.0), True),
        (_metric("≥ ⅓ of floor", "calls/s", 5_505, floor=76_311, better="higher"), False),
        (_metric("≥ ⅓ of floor", "calls/s", 8_961, floor=18_784, better="higher"), True),
        (_metric("< 100 ms", "ms", 26.7), True),
        (_metric("≥ 500,000/s", "deltas/s", 2_213_419, better="higher"), True),
        (_metric("≤ 3× floor", "ms", 77.3, floor=59.2), True),
        (_metric("≤ 3× floor", "ms", 190.0, floor=59.2), False),
        (_metric("", "ms", 1.0), None),
    ],
)
def test_goals_are_checked_against_seamlines_figure(metric: dict[str, object], met: bool | None) -> None:
    assert report.goal_met(metric) is met


def test_the_table_says_missed_beside_a_missed_goal() -> None:
    results = {"w1": {"metrics": [_metric("≤ 50 µs", "µs", 97.1)]}, "w3": {"metrics": [_metric("≤ 50 µs", "µs", 3.0)]}}
    rows = report.render_table({"results": results}).splitlines()[2:4]
    assert "missed" in rows[0] and "missed" not in rows[1]
