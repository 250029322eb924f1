"""An A2A agent built with the official SDK as one role of a pipeline: its role binding
names ``provider: a2a`` with the agent's URL; the other role runs on the run's own
(scripted) provider. A task the agent fails ends the run failed, with the classified cause."""

from __future__ import annotations

from pathlib import Path

import pytest

from seamline.events import Session, Text
from seamline.pipeline import definition_from_data
from tests.pipeline.support import make_workspace, run_pipeline, scripted_writer
from tests.providers.a2a_agent_support import A2AAgentServer

pytestmark = pytest.mark.usefixtures("a2a_real_allowed")


def two_roles(url: str, remote_prompt: str = "Draft: {task}") -> dict[str, object]:
    return {
        "name": "remote-then-local",
        "phases": [
            {"name": "draft", "role": "remote", "next": "polish"},
            {"name": "polish", "role": "local", "next": "done"},
        ],
        "transitions": {"draft": ["polish"], "polish": ["done"]},
        "roles": {
            "remote": {"kind": "agent", "provider": "a2a", "options": {"url": url}, "prompt": remote_prompt},
            "local": {"kind": "agent", "prompt": "Polish: {task}"},
        },
    }


def test_an_a2a_agent_is_one_role_of_a_pipeline(a2a_server: A2AAgentServer, tmp_path: Path) -> None:
    definition = definition_from_data(two_roles(a2a_server.url))
    controller, events = run_pipeline(
        definition,
        "name three birds",
        workspace=make_workspace(tmp_path),
        provider=scripted_writer([{"text": "Polished."}]),
    )
    assert controller.report.outcome == "completed", controller.report.detail
    assert [t for _, _, t in a2a_server.log.turns] == ["Draft: name three birds"]
    remote = [e for e in events if isinstance(e, Session) and e.provider == "a2a"]
    assert remote and remote[-1].provider_session_id == a2a_server.log.turns[0][0]
    assert "heard: Draft: name three birds | before: -" in [e.text for e in events if isinstance(e, Text)]
    assert controller.report.text == "Polished."
    assert controller.report.transitions[:2] == [("draft", "polish"), ("polish", "done")]


def test_a_task_the_agent_fails_fails_the_run_with_its_cause(a2a_server: A2AAgentServer, tmp_path: Path) -> None:
    definition = definition_from_data(two_roles(a2a_server.url, remote_prompt="fail {task}"))
    controller, _ = run_pipeline(
        definition, "now", workspace=make_workspace(tmp_path), provider=scripted_writer([{"text": "never"}])
    )
    assert controller.report.outcome == "failed"
    assert "the tool broke" in controller.report.detail
    assert [t for _, _, t in a2a_server.log.turns] == ["fail now"]  # not retried: a failed task is not retryable
