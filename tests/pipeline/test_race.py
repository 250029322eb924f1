"""The race pipeline: its definition, the ranking, the roles, and a whole race in process
(scripted racers in worktrees of a temporary repository, a reviewer each) whose trace
verifies and re-drives to the same ranking without running anything."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from seamline.errors import InvalidRequest
from seamline.live.race import Racer, open_race
from seamline.pipeline import stream_pipeline
from seamline.pipeline.race import (
    CheckResult,
    RaceCheck,
    RaceRanker,
    RaceReviewer,
    race_definition,
    rank_entries,
    ranking_in,
)
from seamline.pipeline.redrive import redrive
from seamline.pipeline.roles import AgentResponse, RoleContext, RoleFailure, RoleOutput
from seamline.sessions.sqlite_store import open_store
from seamline.testing import scripted
from seamline.tools.workspace import Workspace, workspace_tools
from seamline.trace.verify import verify_trace
from seamline.worktrees import create
from tests.worktrees.git_repo import environ_with, git_home, make_repo


def _entry(racer: str, **given: Any) -> dict[str, Any]:
    return {"racer": racer, "passed": True, "cost_usd": 0.0, "elapsed_s": 0.0, "insertions": 0, "deletions": 0, **given}


def test_ranking_puts_passed_first_then_cost_time_and_diff_size() -> None:
    entries = [
        _entry("failed-cheap", passed=False, cost_usd=0.0),
        _entry("unknown-cost", cost_usd=None),
        _entry("dear", cost_usd=0.5),
        _entry("cheap-slow", cost_usd=0.1, elapsed_s=9.0),
        _entry("cheap-fast-big", cost_usd=0.1, elapsed_s=1.0, insertions=50),
        _entry("cheap-fast-small", cost_usd=0.1, elapsed_s=1.0, insertions=2, deletions=1),
    ]
    ranked = rank_entries(entries)
    assert [e["racer"] for e in ranked] == [
        "cheap-fast-small",
        "cheap-fast-big",
        "cheap-slow",
        "dear",
        "unknown-cost",
        "failed-cheap",
    ]
    assert [e["rank"] for e in ranked] == [1, 2, 3, 4, 5, 6]


def test_a_rejected_run_ranks_after_an_approved_one() -> None:
    ranked = rank_entries([_entry("a", review="reject"), _entry("b", cost_usd=1.0, review="approve")])
    assert [e["racer"] for e in ranked] == ["b", "a"]


def _ctx(evidence: dict[str, RoleOutput]) -> RoleContext:
    return RoleContext(task="t", phase="rank", role="ranker", round=1, attempt=1, evidence=evidence)


def _check(racer: str, *, passed: bool, cost: float) -> RoleOutput:
    result = CheckResult(racer=racer, outcome="completed", passed=passed, cost_usd=cost, exit_code=0 if passed else 1)
    return RaceCheck("check-" + racer, race_definition(["a", "b"]).roles["check-r1"]).interpret(
        _ctx({}), AgentResponse(text=result.encode(), outcome="completed", stop_reason="end_turn")
    )  # type: ignore[return-value]


def test_the_ranker_names_the_winner_or_vetoes() -> None:
    definition = race_definition(["x", "y"], check="true")
    ranker = RaceRanker("ranker", definition.roles["ranker"])
    won = ranker.decide(
        _ctx({"check-r1": _check("r1", passed=True, cost=0.2), "check-r2": _check("r2", passed=True, cost=0.1)})
    )
    assert isinstance(won, RoleOutput) and won.verdict == "approve" and won.data["winner"] == "r2"
    assert [e["label"] for e in won.data["ranking"]] == ["y", "x"]
    lost = ranker.decide(
        _ctx({"check-r1": _check("r1", passed=False, cost=0.0), "check-r2": _check("r2", passed=False, cost=0.0)})
    )
    assert isinstance(lost, RoleOutput) and lost.verdict == "veto" and lost.data["winner"] is None
    missing = ranker.decide(_ctx({"check-r1": _check("r1", passed=True, cost=0.0)}))
    assert isinstance(missing, RoleFailure) and "r2" in missing.message


def test_the_definition_has_a_phase_of_racers_a_check_each_and_a_judge() -> None:
    plain = race_definition(["a", "b", "c"], check="make test")
    assert [(p.name, p.bound_roles()) for p in plain.phases] == [
        ("race", ("r1", "r2", "r3")),
        ("check", ("check-r1", "check-r2", "check-r3")),
        ("rank", ("ranker",)),
    ]
    assert plain.phase("rank").judge and plain.roles["check-r2"].options["command"] == "make test"
    reviewed = race_definition(["a", "b"], reviewer=True, budget_usd=1.5)
    assert [p.name for p in reviewed.phases] == ["race", "check", "review", "rank"]
    assert reviewed.team.max_cost_usd == 1.5 and reviewed.definition_hash() != plain.definition_hash()
    with pytest.raises(InvalidRequest, match="at least two racers"):
        race_definition(["alone"])


def test_the_reviewer_reads_its_last_line() -> None:
    reviewer = RaceReviewer("review-r1", race_definition(["a", "b"], reviewer=True).roles["review-r1"])
    ctx = _ctx({"check-r1": RoleOutput(data={"passed": True, "diff": "+new line"})})
    assert "+new line" in reviewer.prompt(ctx) and "check passed" in reviewer.prompt(ctx)

    def verdict(text: str) -> str | None:
        out = reviewer.interpret(ctx, AgentResponse(text=text, outcome="completed", stop_reason="end_turn"))
        assert isinstance(out, RoleOutput)
        return out.verdict

    assert verdict("Looks right.\n**APPROVE**") == "approve"
    assert verdict("APPROVE would be wrong here.\nREJECT") == "reject"
    assert verdict("no verdict at all") == "reject"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key, value in git_home(tmp_path / "home").items():
        monkeypatch.setenv(key, value)
    return make_repo(tmp_path / "repo", environ_with({}))


def _writer(path: str, cost: float) -> list[dict[str, Any]]:
    call = {"name": "write_file", "arguments": {"path": path, "content": "x\n"}}
    return [
        {"tool_calls": [call], "usage": {"input_tokens": 1, "output_tokens": 1, "cost_usd": cost}},
        {"text": "done"},
    ]


def test_a_race_in_process_with_reviewers_verifies_and_redrives(repo: Path, tmp_path: Path) -> None:
    store = open_store(tmp_path / "store.db")
    try:
        racers = []
        for path, cost in (("good.txt", 0.001), ("good.txt", 0.002), ("bad.txt", 0.0)):
            tree = create(repo, run_id=f"{len(racers) + 1:02d}" + "0" * 30, store=store.location)
            tools = workspace_tools(Workspace(tree.workspace))
            racers.append(Racer(label="scripted", provider=scripted(_writer(path, cost)), tree=tree, tools=tools))
        # r1 is the cheapest run that passes, but its reviewer rejects it.
        reviewers = [scripted([{"text": verdict}]) for verdict in ("REJECT", "APPROVE", "APPROVE")]
        controller, agents = open_race(
            racers,
            store=store,
            check="test -f good.txt",
            reviewers=reviewers,
            yes=True,
            trace_file=tmp_path / "race.jsonl",
        )

        async def drive() -> None:
            async for _ in stream_pipeline(controller, "write the good file"):
                pass

        asyncio.run(drive())
        agents.release()
    finally:
        store.close()
    assert (controller.report.outcome, controller.report.stop_reason) == ("completed", "converged")
    verified = verify_trace(tmp_path / "race.jsonl")
    assert verified.ok, verified.problems
    ranked = ranking_in(verified.records)
    assert ranked is not None and ranked["winner"] == "r2"
    assert [(e["racer"], e["passed"], e.get("review")) for e in ranked["ranking"]] == [
        ("r2", True, "approve"),
        ("r1", True, "reject"),
        ("r3", False, "approve"),
    ]
    shown = reviewers[0].last_call
    assert shown is not None and "+++ b/good.txt" in str(shown.messages[-1].content)
    again = redrive(tmp_path / "race.jsonl")
    assert again.same, again.differences


def test_a_racer_that_opens_after_the_race_was_stopped_stops_too(repo: Path, tmp_path: Path) -> None:
    from seamline.events import Complete
    from seamline.pipeline.agents import AgentKey

    store = open_store(tmp_path / "store.db")
    try:
        racers = []
        for n in range(2):
            tree = create(repo, run_id=f"{n + 1:02d}" + "0" * 30, store=store.location)
            slow = [{**_writer(f"late{n}.txt", 0.0)[0], "delay": 5}, {"text": "done"}]
            racers.append(
                Racer(
                    label="scripted",
                    provider=scripted(slow),
                    tree=tree,
                    tools=workspace_tools(Workspace(tree.workspace)),
                )
            )
        _, agents = open_race(racers, store=store, yes=True, trace_file=tmp_path / "race.jsonl")

        async def late_turn() -> list[Complete]:
            await agents.abort_all()  # the budget was spent before r1 had even opened its session
            events = agents.turn(AgentKey("race", "r1", 1, 1), "go", budget_usd=None)
            return [event async for event in events if isinstance(event, Complete)]

        ended = asyncio.run(late_turn())
        agents.release()
    finally:
        store.close()
    assert [c.outcome for c in ended] == ["aborted"]
    assert not (Path(racers[0].tree.workspace) / "late0.txt").exists()
    assert not Path(racers[1].tree.path).exists()  # r2 never opened: its worktree is released
