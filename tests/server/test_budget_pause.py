"""Budgets that pause over HTTP on a real ``seamline serve`` app (uvicorn on 127.0.0.1), with
a declared agent on the fake OpenAI server: a run that reaches its budget is ``paused`` (the
summary says which budget, the cap, what was spent); ``POST /v1/runs/RUN/budget`` goes on with
it and the fake sees as many model requests as an unpaused run; a run that is not paused is a
409 and a budget not above what was spent a 400."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx2
import pytest

from seamline.events import Usage
from seamline.providers.registry import create_provider
from seamline.server.agents_file import AgentsFileError, load_agents
from seamline.usage import priced_usage
from tests.fakes.openai_api import FakeOpenAI
from tests.server.harness import serve, sse_frames
from tests.server.test_agui_client import verify

USAGE = {"input_tokens": 1000, "output_tokens": 100}
SCRIPT: list[dict[str, Any]] = [
    {"tool_calls": [{"name": "read_file", "arguments": {"path": name}}], "usage": USAGE}
    for name in ("a.txt", "b.txt", "c.txt")
] + [{"text": "read them all", "usage": USAGE}]


def one_request() -> float:
    rates = create_provider("openai", model="gpt-4o").rates("gpt-4o")
    cost = priced_usage(Usage(**USAGE), model="gpt-4o", rates=rates).cost_usd
    assert cost is not None
    return cost


def until_complete(client: httpx2.Client, run_id: str, after: int = 0) -> tuple[int, dict[str, Any]]:
    """Follow the run's events after ``after`` to its next ``complete``: (its id, it)."""
    params = {"format": "seamline", "after": str(after)}
    with client.stream("GET", f"/v1/runs/{run_id}/events", params=params) as response:
        for frame in sse_frames(response.iter_lines()):
            event = json.loads(frame["data"])
            if event["type"] == "complete":
                return int(frame["id"]), event
    raise AssertionError(f"run {run_id}'s stream ended without a complete")


@pytest.fixture
def agents_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("SEAMLINE_BLOCK_REAL_PROVIDERS", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-serve-pause")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    ws = tmp_path / "ws"
    ws.mkdir()
    for name in ("a.txt", "b.txt", "c.txt"):
        (ws / name).write_text(f"contents of {name}\n")
    return tmp_path / "agents.toml"


def declare(path: Path, fake: FakeOpenAI, on_budget: str, budget_usd: float) -> None:
    path.write_text(
        f"""
[agents.reader]
provider = "openai"
model = "gpt-4o"
options = {{ base_url = "{fake.base_url}", max_retries = "1" }}
budget_usd = {budget_usd}
on_budget = "{on_budget}"
yes = true
"""
    )


def start(client: httpx2.Client, **run: Any) -> str:
    session = client.post("/v1/sessions", json={"agent": "reader"})
    assert session.status_code == 201, session.text
    reply = client.post(f"/v1/sessions/{session.json()['id']}/runs", json={"prompt": "read the files", **run})
    assert reply.status_code == 201, reply.text
    return str(reply.json()["id"])


def test_a_paused_run_goes_on_when_its_budget_is_raised_over_http(tmp_path: Path, agents_file: Path) -> None:
    with FakeOpenAI(SCRIPT) as fake:  # the same script without a pause: its count of requests
        declare(agents_file, fake, "fail", 100.0)
        agents = load_agents(agents_file, default_workspace=tmp_path / "ws")
        with serve(tmp_path, agents=agents) as served, served.client() as client:
            run_id = start(client)
            _, final = until_complete(client, run_id)
            assert final["outcome"] == "completed"
        unpaused = len(fake.model_requests())
    assert unpaused == 4

    with FakeOpenAI(SCRIPT) as fake:
        declare(agents_file, fake, "pause", 2 * one_request())
        agents = load_agents(agents_file, default_workspace=tmp_path / "ws")
        with serve(tmp_path, agents=agents) as served, served.client() as client:
            run_id = start(client)  # the agent's budget (two requests' worth) and on_budget
            seen, paused = until_complete(client, run_id)
            assert paused["outcome"] == "budget" and paused["stop_reason"] == "paused"
            summary = client.get(f"/v1/runs/{run_id}").json()
            assert summary["status"] == "paused"
            assert summary["paused"]["budget"] == "run"
            assert summary["paused"]["budget_usd"] == pytest.approx(2 * one_request())
            assert summary["paused"]["spent_usd"] == pytest.approx(2 * one_request())
            assert len(fake.model_requests()) == 2

            low = client.post(f"/v1/runs/{run_id}/budget", json={"budget_usd": one_request()})
            assert low.status_code == 400 and "has spent" in low.json()["error"]["message"]
            raised = client.post(f"/v1/runs/{run_id}/budget", json={"budget_usd": 10 * one_request()})
            assert raised.status_code == 202, raised.text
            _, final = until_complete(client, run_id, after=seen)
            assert final["outcome"] == "completed" and final["text"] == "read them all"
            done = client.get(f"/v1/runs/{run_id}").json()
            assert done["status"] == "completed" and done["paused"] is None
            sent = fake.model_requests()
            assert len(sent) == unpaused  # nothing that finished ran again
            third = sent[2].body["messages"]  # the turn goes on: one prompt, each tool result once
            assert [m["role"] for m in third].count("user") == 1
            assert [m["content"].split("\t")[-1] for m in third if m["role"] == "tool"] == [
                "contents of a.txt",
                "contents of b.txt",
            ]

            # On AG-UI (the real client's verifyEvents): the pause ends an AG-UI run, the raise
            # goes on in a new one that names it as its parent.
            with client.stream("GET", f"/v1/runs/{run_id}/events") as response:
                agui = [json.loads(frame["data"]) for frame in sse_frames(response.iter_lines())]
            starts = [e for e in agui if e["type"] == "RUN_STARTED"]
            assert len(starts) == 2 and starts[1]["parentRunId"] == starts[0]["runId"]
            assert verify(agui) == {"ok": True, "error": None}

            again = client.post(f"/v1/runs/{run_id}/budget", json={"budget_usd": 1.0})
            assert again.status_code == 409
            assert again.json()["error"]["kind"] == "not_paused"
            assert "is not paused at its budget (status: completed)" in again.json()["error"]["message"]
            assert len(fake.model_requests()) == unpaused


READ_A = {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}], "usage": USAGE}
# Round 1: read, answer without a citation (the reviewer asks again); round 2: read, cite.
PIPELINE_SCRIPT: list[dict[str, Any]] = [
    READ_A,
    {"text": "It says alpha.", "usage": USAGE},
    READ_A,
    {"text": "It says alpha.\nSources: a.txt:1-1", "usage": USAGE},
]


def start_pipeline(client: httpx2.Client, **run: Any) -> str:
    body = {"prompt": "what is in a.txt?", "agent": "reader", **run}
    reply = client.post("/v1/pipelines/answer-review/runs", json=body)
    assert reply.status_code == 201, reply.text
    return str(reply.json()["id"])


def until_end(client: httpx2.Client, run_id: str, after: int = 0) -> dict[str, Any]:
    """Follow the run's events after ``after`` to the end of the run: its last ``complete``."""
    params = {"format": "seamline", "after": str(after)}
    with client.stream("GET", f"/v1/runs/{run_id}/events", params=params) as response:
        events = [json.loads(frame["data"]) for frame in sse_frames(response.iter_lines())]
    completes = [e for e in events if e["type"] == "complete"]
    assert completes, f"run {run_id} ended without a complete"
    return completes[-1]


def until_paused(client: httpx2.Client, run_id: str) -> tuple[int, dict[str, Any]]:
    """Follow the run's events to the one that says the whole pipeline paused."""
    with client.stream("GET", f"/v1/runs/{run_id}/events", params={"format": "seamline"}) as response:
        for frame in sse_frames(response.iter_lines()):
            event = json.loads(frame["data"])
            if event["type"] == "raw" and event["source"] == "budget":
                return int(frame["id"]), event["payload"]["paused"]
            assert event["type"] != "raw" or "outcome" not in event["payload"], "the run ended unpaused"
    raise AssertionError("the pipeline ended without pausing")


def test_a_pipelines_shared_budget_pauses_every_role_and_a_raise_goes_on(tmp_path: Path, agents_file: Path) -> None:
    with FakeOpenAI(PIPELINE_SCRIPT) as fake:
        declare(agents_file, fake, "fail", 100.0)
        agents = load_agents(agents_file, default_workspace=tmp_path / "ws")
        with serve(tmp_path, agents=agents) as served, served.client() as client:
            run_id = start_pipeline(client)
            final = until_end(client, run_id)
            assert final["outcome"] == "completed", final
        unpaused = len(fake.model_requests())
    assert unpaused == 4

    budget = 1.5 * one_request()  # passed inside the first round: round 2's writer pauses
    with FakeOpenAI(PIPELINE_SCRIPT) as fake:
        declare(agents_file, fake, "fail", 100.0)  # the client asks for less, and to pause
        agents = load_agents(agents_file, default_workspace=tmp_path / "ws")
        with serve(tmp_path, agents=agents) as served, served.client() as client:
            run_id = start_pipeline(client, budget_usd=budget, on_budget="pause")
            seen, paused = until_paused(client, run_id)
            assert paused["budget"] == "pipeline" and paused["budget_usd"] == pytest.approx(budget)
            assert paused["spent_usd"] == pytest.approx(2 * one_request())
            summary = client.get(f"/v1/runs/{run_id}").json()
            assert summary["status"] == "paused" and summary["paused"] == paused
            assert len(fake.model_requests()) == 2

            raised = client.post(f"/v1/runs/{run_id}/budget", json={"budget_usd": 10 * one_request()})
            assert raised.status_code == 202, raised.text
            final = until_end(client, run_id, after=seen)
            assert final["outcome"] == "completed" and final["stop_reason"] == "converged", final
            sent = fake.model_requests()
            assert len(sent) == unpaused  # no finished request ran again
            # The paused writer went on from its conversation: its prompt was not sent twice.
            assert [m["role"] for m in sent[2].body["messages"]].count("user") == 1
            assert client.get(f"/v1/runs/{run_id}").json()["status"] == "completed"
            verified = client.get(f"/v1/traces/{run_id}/verify")
            assert verified.status_code == 200 and verified.json()["ok"] is True, verified.text
            again = client.post(f"/v1/runs/{run_id}/budget", json={"budget_usd": 20 * one_request()})
            assert again.status_code == 409


@pytest.mark.parametrize(
    ("provider", "on_budget", "why"),
    [("openai", "later", '"fail" or "pause"'), ("claude-code", "pause", "runs its own turns")],
)
def test_the_agents_file_checks_on_budget(tmp_path: Path, provider: str, on_budget: str, why: str) -> None:
    path = tmp_path / "agents.toml"
    path.write_text(f'[agents.a]\nprovider = "{provider}"\non_budget = "{on_budget}"\n')
    with pytest.raises(AgentsFileError, match=f"agents.a.on_budget: .*{re.escape(why)}"):
        load_agents(path, default_workspace=tmp_path)


def test_a_paused_run_is_cancelled_or_left_behind_by_a_new_prompt(tmp_path: Path, agents_file: Path) -> None:
    with FakeOpenAI(SCRIPT[:3] * 3) as fake:  # tool calls only: each run pauses after two requests
        declare(agents_file, fake, "pause", 2 * one_request())
        agents = load_agents(agents_file, default_workspace=tmp_path / "ws")
        with serve(tmp_path, agents=agents) as served, served.client() as client:
            cancelled = start(client)
            assert until_complete(client, cancelled)[1]["stop_reason"] == "paused"
            assert client.get(f"/v1/runs/{cancelled}").json()["status"] == "paused"
            assert client.post(f"/v1/runs/{cancelled}/cancel").status_code == 202
            assert client.get(f"/v1/runs/{cancelled}").json()["status"] == "aborted"
            assert client.post(f"/v1/runs/{cancelled}/budget", json={"budget_usd": 1.0}).status_code == 409

            left = start(client)
            assert until_complete(client, left)[1]["stop_reason"] == "paused"
            session_id = client.get(f"/v1/runs/{left}").json()["session_id"]
            newer = client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "something else"})
            assert newer.status_code == 201, newer.text
            summary = client.get(f"/v1/runs/{left}").json()
            assert summary["status"] == "budget" and summary["stop_reason"] == "paused"
            assert client.post(f"/v1/runs/{left}/budget", json={"budget_usd": 1.0}).status_code == 409
