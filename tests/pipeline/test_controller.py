"""The controller on scripted writers: revisions, veto, exhaustion, oscillation, retries,
failures, invalid transitions and skip reasons, all recorded and verified."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from seamline.events import Complete, Raw
from seamline.pipeline import RoleOutput, definition_from_data, resolve_pipeline
from seamline.pipeline.roles import Role, register_role_kind
from seamline.trace.verify import verify_trace

from .support import (
    FABRICATED,
    GOOD_ANSWER,
    NO_SOURCES,
    make_workspace,
    read_then_answer,
    run_pipeline,
    scripted_writer,
)

REVIEW = resolve_pipeline("answer-review")


def kinds(data: bytes) -> list[str]:
    return [r.kind for r in verify_trace(data).records]


def test_revision_then_approval_keeps_the_first_attempt(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    writer = scripted_writer([{"text": NO_SOURCES}, *read_then_answer(GOOD_ANSWER)])
    controller, events = run_pipeline(REVIEW, "What is a provider?", workspace=ws, providers={"writer": writer})
    final = events[-1]
    assert isinstance(final, Complete)
    assert (final.outcome, final.stop_reason) == ("completed", "converged")
    assert final.text == GOOD_ANSWER and controller.report.exit_code == 0
    assert [d.status for d in controller.report.decisions] == ["continue", "converged"]
    verification = verify_trace(controller.writer.data())
    assert verification.ok, verification.problems
    ends = [r.d for r in verification.records if r.kind == "role_end" and r.d["role"] == "writer"]
    assert [e["output"]["text"] for e in ends] == [NO_SOURCES, GOOD_ANSWER]  # the original attempt stays
    prompts = [r.d["prompt"] for r in verification.records if r.kind == "prompt"]
    assert prompts[0] == "What is a provider?" and "Reviewer feedback: The answer cites no sources" in prompts[1]


def test_fabricated_source_is_vetoed(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    writer = scripted_writer(read_then_answer(FABRICATED))
    controller, events = run_pipeline(REVIEW, "What is a provider?", workspace=ws, providers={"writer": writer})
    final = events[-1]
    assert isinstance(final, Complete) and (final.outcome, final.stop_reason) == ("aborted", "vetoed")
    assert controller.report.exit_code == 6
    assert controller.report.transitions[-1] == ("review", "aborted")
    assert verify_trace(controller.writer.data()).ok


def test_no_approval_in_three_rounds_is_exhausted(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    writer = scripted_writer([{"text": f"draft {i}\n"} for i in range(3)])
    controller, events = run_pipeline(REVIEW, "q", workspace=ws, providers={"writer": writer})
    assert events[-1] == Complete(outcome="failed", stop_reason="exhausted", text="draft 2\n")
    assert controller.report.exit_code == 5
    assert verify_trace(controller.writer.data()).ok


def test_a_repeated_rejected_answer_is_oscillation(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    writer = scripted_writer([{"text": "same\n"}, {"text": "same\n"}])
    controller, events = run_pipeline(REVIEW, "q", workspace=ws, providers={"writer": writer})
    final = events[-1]
    assert isinstance(final, Complete) and final.stop_reason == "oscillating" and final.outcome == "failed"
    assert controller.report.exit_code == 4


def test_retryable_failure_is_retried_within_bounds(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    flaky = {"error": {"kind": "transport", "message": "connection reset", "retryable": True}}
    writer = scripted_writer([flaky, *read_then_answer(GOOD_ANSWER)])
    controller, _events = run_pipeline(REVIEW, "q", workspace=ws, providers={"writer": writer})
    assert controller.report.stop_reason == "converged"
    records = verify_trace(controller.writer.data()).records
    retries = [r.d for r in records if r.kind == "retry"]
    assert retries == [{"phase": "write", "role": "writer", "round": 1, "attempt": 1, "reason": "transport"}]


def test_failure_past_retries_fails_the_run(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    flaky = {"error": {"kind": "transport", "message": "connection reset", "retryable": True}}
    writer = scripted_writer([flaky, flaky])
    controller, events = run_pipeline(REVIEW, "q", workspace=ws, providers={"writer": writer})
    final = events[-1]
    assert isinstance(final, Complete) and (final.outcome, final.stop_reason) == ("failed", "failed")
    assert controller.report.exit_code == 1
    verification = verify_trace(controller.writer.data())
    assert verification.ok and verification.records[-1].d["detail"].startswith("writer failed (transport)")


class _Skipper(Role):
    kind = "skipper"

    def decide(self, ctx: Any) -> RoleOutput:
        return RoleOutput(text="nothing to check", skip=self.binding.options.get("reason", "empty"))


def _skip_definition(declared: list[str]) -> Any:
    return definition_from_data(
        {
            "name": "skippy",
            "phases": [
                {"name": "triage", "role": "triager", "next": "review"},
                {"name": "review", "role": "reviewer", "next": "publish"},
                {"name": "publish", "role": "publisher", "next": "done"},
            ],
            "transitions": {"triage": ["review", "publish"], "review": ["publish"], "publish": ["done"]},
            "skip_reasons": {"review": declared},
            "roles": {
                "triager": {"kind": "skipper", "options": {"reason": "empty"}},
                "reviewer": {"kind": "skipper"},
                "publisher": {"kind": "skipper", "options": {"reason": "never"}},
            },
        }
    )


def test_declared_skip_is_recorded_and_undeclared_one_is_an_invalid_transition(tmp_path: Path) -> None:
    register_role_kind("skipper", _Skipper)
    ws = make_workspace(tmp_path)
    ok, _ = run_pipeline(_skip_definition(["empty"]), "q", workspace=ws)
    assert ok.report.transitions == [("triage", "publish"), ("publish", "done")]
    assert "skip" in kinds(ok.writer.data()) and verify_trace(ok.writer.data()).ok
    bad, events = run_pipeline(_skip_definition(["other"]), "q", workspace=ws)
    final = events[-1]
    assert isinstance(final, Complete) and (final.outcome, final.stop_reason) == ("aborted", "invalid_transition")
    assert bad.report.exit_code == 7 and verify_trace(bad.writer.data()).ok


def test_role_context_is_read_only(tmp_path: Path) -> None:
    seen: list[Any] = []

    class Peeker(Role):
        kind = "peeker"

        def decide(self, ctx: Any) -> RoleOutput:
            seen.append(ctx)
            with pytest.raises(AttributeError):
                ctx.phase = "done"  # frozen: a role cannot move the lifecycle through its context
            return RoleOutput(text="ok")

    register_role_kind("peeker", Peeker)
    definition = definition_from_data(
        {
            "name": "peek",
            "phases": [{"name": "look", "role": "p"}],
            "transitions": {"look": ["done"]},
            "roles": {"p": {"kind": "peeker"}},
        }
    )
    controller, _ = run_pipeline(definition, "q", workspace=make_workspace(tmp_path))
    assert controller.report.outcome == "completed" and len(seen) == 1


def test_controller_events_carry_the_run_id(tmp_path: Path) -> None:
    controller, events = run_pipeline(REVIEW, "How do I add a provider?", workspace=make_workspace(tmp_path))
    raws = [e for e in events if isinstance(e, Raw)]
    assert raws[0].source == "run" and raws[0].payload["run_id"] == controller.run_id
    assert all(r.payload["run_id"] == controller.run_id for r in raws)
    assert raws[-1].payload["fingerprint"] == controller.report.fingerprint


def test_a_crashing_role_is_a_recorded_failure(tmp_path: Path) -> None:
    class Crasher(Role):
        kind = "crasher"

        def decide(self, ctx: Any) -> RoleOutput:
            raise RuntimeError("role bug")

    register_role_kind("crasher", Crasher)
    definition = definition_from_data(
        {
            "name": "crash",
            "phases": [{"name": "only", "role": "c"}],
            "transitions": {"only": ["done"]},
            "roles": {"c": {"kind": "crasher"}},
        }
    )
    controller, events = run_pipeline(definition, "q", workspace=make_workspace(tmp_path))
    assert events[-1] == Complete(outcome="failed", stop_reason="failed", text="")
    verification = verify_trace(controller.writer.data())
    assert verification.ok, verification.problems
    end = next(r.d for r in verification.records if r.kind == "role_end")
    assert end["failure"] == {"kind": "provider", "message": "RuntimeError: role bug", "retryable": False}


def test_cancel_ends_the_run_aborted_with_a_complete_trace(tmp_path: Path) -> None:
    import asyncio

    from seamline.live import open_run
    from seamline.pipeline.builtin import stream_pipeline

    slow = [{"tool_calls": [{"name": "list_dir", "arguments": {}}], "delay": 0.05}] * 20
    writer = scripted_writer(slow)
    controller = open_run(REVIEW, providers={"writer": writer}, workspace=make_workspace(tmp_path), in_memory=True)

    async def drive() -> list[Any]:
        seen = []
        async for event in stream_pipeline(controller, "q"):
            seen.append(event)
            if event.type == "tool_result" and len(seen) < 10:
                await controller.cancel()
        return seen

    events = asyncio.run(drive())
    assert events[-1] == Complete(outcome="aborted", stop_reason="cancelled", text="")
    assert controller.report.exit_code == 130 and writer.position < 20
    assert verify_trace(controller.writer.data()).ok


def test_a_role_cannot_overwrite_another_roles_evidence(tmp_path: Path) -> None:
    seen: list[dict[str, RoleOutput]] = []

    class Vandal(Role):
        kind = "vandal"

        def decide(self, ctx: Any) -> RoleOutput:
            seen.append(dict(ctx.evidence))
            ctx.evidence["first"] = RoleOutput(text="forged")  # a copy: the controller's evidence is untouched
            return RoleOutput(text=f"{self.name} saw {sorted(ctx.evidence)}")

    register_role_kind("vandal", Vandal)
    definition = definition_from_data(
        {
            "name": "vandals",
            "phases": [{"name": "one", "role": "first"}, {"name": "two", "roles": ["second", "third"]}],
            "transitions": {"one": ["two"], "two": ["done"]},
            "roles": {"first": {"kind": "vandal"}, "second": {"kind": "vandal"}, "third": {"kind": "vandal"}},
        }
    )
    controller, _ = run_pipeline(definition, "q", workspace=make_workspace(tmp_path))
    assert controller.report.outcome == "completed"
    assert [s["first"].text for s in seen[1:]] == ["first saw ['first']", "first saw ['first']"]
