"""seamline runs as A2A tasks, without a server: the state of each run status, the task's
history and answer, and a pipeline's roles whose ends are not the run's (also for a reader
that starts in the middle)."""

from __future__ import annotations

import pytest

from seamline.events import Complete, Raw, Session, Text
from seamline.server.a2a_tasks import TaskTranslator, state_of, task_of
from seamline.server.a2a_wire import ArtifactUpdate, Message, TaskStatusUpdate
from seamline.server.runs import Run


@pytest.mark.parametrize(
    ("status", "state"),
    [
        ("queued", "TASK_STATE_SUBMITTED"),
        ("running", "TASK_STATE_WORKING"),
        ("completed", "TASK_STATE_COMPLETED"),
        ("failed", "TASK_STATE_FAILED"),
        ("budget", "TASK_STATE_FAILED"),
        ("aborted", "TASK_STATE_CANCELED"),
    ],
)
def test_each_run_status_is_a_task_state(status: str, state: str) -> None:
    run = Run(id="r", session_id="s", prompt="p")
    run.status = status  # type: ignore[assignment]
    assert state_of(run) == state


def test_the_answer_is_an_artifact_only_once_the_run_is_over() -> None:
    run = Run(id="r", session_id="s", prompt="what?")
    run.status = "running"
    run.append(Complete(outcome="completed", stop_reason="end_turn", text="this."))
    assert task_of(run, "c").artifacts == []
    run.finish("completed", "end_turn")
    task = task_of(run, "c")
    assert [(a.name, [p.text for p in a.parts]) for a in task.artifacts] == [("answer", ["this."])]
    assert [p.text for m in task.history for p in m.parts] == ["what?"]
    assert task_of(run, "c", history_length=0).history == []
    budget = Run(id="b", session_id="s", prompt="p")
    budget.finish("budget", "budget")
    message = task_of(budget, "c").status.message
    assert isinstance(message, Message) and "budget" in (message.parts[0].text or "")


def _pipeline_run() -> Run:
    run = Run(id="r", session_id=None, prompt="p", pipeline="review", first_phase="write")
    run.status = "running"
    return run


def test_a_roles_complete_is_not_the_pipeline_runs() -> None:
    run = _pipeline_run()
    translator = TaskTranslator(run, "c")
    kinds: list[str] = []
    events = [
        Session(session_id="w", provider="scripted", model=None),
        Text(text="draft"),
        Complete(outcome="completed", stop_reason="end_turn", text="draft"),
        Raw(source="controller", payload={"what": "transition", "target": "review"}),
        Complete(outcome="completed", stop_reason="converged", text="final"),
    ]
    for number, event in enumerate(events, 1):
        for out in translator.feed(event, number):
            if isinstance(out.status_update, TaskStatusUpdate):
                kinds.append(out.status_update.status.state)
            else:
                assert isinstance(out.artifact_update, ArtifactUpdate)
                kinds.append("artifact")
        if number < len(events):
            assert not translator.finished, number
    assert translator.finished
    assert kinds[-2:] == ["artifact", "TASK_STATE_COMPLETED"]
    assert kinds.count("TASK_STATE_WORKING") == 4  # role started, text, role complete, transition


def test_a_reader_that_starts_inside_a_role_counts_it() -> None:
    run = _pipeline_run()
    for event in (Session(session_id="w", provider="scripted", model=None), Text(text="draft")):
        run.append(event)
    translator = TaskTranslator.reading_from(run, "c", len(run.events))
    translator.feed(Complete(outcome="completed", stop_reason="end_turn", text="draft"), 3)
    assert not translator.finished  # the role's end
    translator.feed(Complete(outcome="completed", stop_reason="converged", text="final"), 4)
    assert translator.finished
