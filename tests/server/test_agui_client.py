"""The official AG-UI client against ``seamline serve``: ``@ag-ui/client``'s ``HttpAgent``,
unmodified and without an adapter, runs a tool-calling agent through ``POST /v1/agui`` and
answers its interrupt with ``resume``; the client's ``verifyEvents`` accepts every stream,
a pipeline with several subagents included. The client is the pinned npm package that
``scripts/system/47-agui-client.sh`` installs; ``agui_client_driver.cjs`` drives it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ag_ui")
pytest.importorskip("uvicorn")

from seamline.server.agents_file import AgentSpec
from tests.server.harness import TOOL_TURN, Served, serve, sse_frames

pytestmark = pytest.mark.real

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("agui_client_driver.cjs")


def agui_client_dir() -> Path:
    """The installed client; missing is a failure that names the set-up step, never a skip."""
    home = ROOT / ".tools" / "agui-client"
    if not (home / "node_modules" / "@ag-ui" / "client" / "package.json").is_file():
        pytest.fail("the AG-UI client is not installed; run: bash scripts/system/47-agui-client.sh")
    return home


def drive(request: dict[str, Any]) -> dict[str, Any]:
    """One request to the node driver; its process ends (or is killed) before this returns."""
    done = subprocess.run(
        ["node", str(DRIVER)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=120,
        env={"AGUI_CLIENT_DIR": str(agui_client_dir()), "PATH": "/usr/local/bin:/usr/bin:/bin"},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def verify(events: list[dict[str, Any]]) -> dict[str, Any]:
    return drive({"mode": "verify", "events": events})


def seamline(served: Served, name: str, script: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
    """``forwardedProps`` that open the thread's session on the scripted provider."""
    return {"seamline": {"provider": "scripted", "options": {"script": served.script(name, script)}, **more}}


def types(step: dict[str, Any]) -> list[str]:
    return [e["type"] for e in step["events"]]


def test_http_agent_runs_a_tool_turn_and_resumes_its_interrupt(tmp_path: Path) -> None:
    with serve(tmp_path) as served:
        props = seamline(served, "turn", [*TOOL_TURN, {"text": "Second answer."}])
        answer = drive(
            {
                "mode": "run",
                "url": f"{served.base}/v1/agui",
                "threadId": "thread-1",
                "steps": [
                    {"message": "write hello.txt", "runId": "run-a", "forwardedProps": props},
                    {"resume": "allow", "runId": "run-b"},
                    {"message": "and again", "runId": "run-c", "forwardedProps": props},
                ],
            }
        )
        first, resumed, again = answer["steps"]
        for step in answer["steps"]:
            assert step["error"] is None and step["verified"] == {"ok": True, "error": None}, step
        # The first POST: the text, the tool call, then the interrupt ends the AG-UI run.
        assert types(first)[0] == "RUN_STARTED" and types(first)[-1] == "RUN_FINISHED"
        assert first["events"][0]["threadId"] == "thread-1" and first["events"][0]["runId"] == "run-a"
        assert first["events"][-1]["runId"] == "run-a" and first["events"][-1]["outcome"]["type"] == "interrupt"
        (interrupt,) = first["interrupts"]
        assert interrupt["toolCallId"] == "call-w" and interrupt["reason"] == "tool_approval"
        # The resume: the rest of the same seamline run under the new run id.
        assert resumed["events"][0]["runId"] == "run-b" and resumed["events"][0]["parentRunId"] == "run-a"
        decision = next(e for e in resumed["events"] if e.get("name") == "seamline.permission_decision")
        assert decision["value"]["decision"] == "allow"  # the resume was the answer
        assert "TOOL_CALL_RESULT" in types(resumed)
        assert resumed["events"][-1]["outcome"]["type"] == "success" and resumed["result"] == "Wrote hello.txt."
        assert resumed["interrupts"] == []
        assert (served.workspace / "hello.txt").read_text() == "hi\n"
        # A later message on the thread is a new run on the same session.
        assert again["result"] == "Second answer." and again["events"][-1]["runId"] == "run-c"
        threads = [s for s in served.store.list_sessions() if s.metadata.get("agui_thread_id") == "thread-1"]
        assert len(threads) == 1
        prompts = [e.content for e in served.store.transcript(threads[0].id) if e.kind == "user"]
        assert prompts == ["write hello.txt", "and again"]
        # The client's own view of the conversation.
        messages = answer["messages"]
        assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "user", "assistant"]
        assert [c["id"] for c in messages[1]["toolCalls"]] == ["call-w"]
        assert messages[1]["content"] == "Let me write it." and messages[3]["content"] == "Wrote hello.txt."


def test_http_agent_files_each_steps_tool_call_under_its_own_message(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.txt").write_text("alpha\n")
    script = [
        {"text": "Let me look.", "tool_calls": [{"id": "c1", "name": "list_files", "arguments": {}}]},
        {"tool_calls": [{"id": "c2", "name": "read_file", "arguments": {"path": "a.txt"}}]},  # no text
        {"text": "It says alpha."},
    ]
    with serve(tmp_path) as served:
        answer = drive(
            {
                "mode": "run",
                "url": f"{served.base}/v1/agui",
                "threadId": "thread-2",
                "steps": [{"message": "what is in a.txt?", "forwardedProps": seamline(served, "steps", script)}],
            }
        )
        (step,) = answer["steps"]
        assert step["error"] is None and step["verified"]["ok"], step
        assert step["result"] == "It says alpha."
        holders = {c["id"]: m["id"] for m in answer["messages"] for c in m.get("toolCalls") or []}
        assert set(holders) == {"c1", "c2"}
        assert holders["c1"] != holders["c2"]  # the second step's call is not filed under the first text
        first = next(m for m in answer["messages"] if m["id"] == holders["c1"])
        assert first["content"] == "Let me look."


def test_http_agent_files_one_steps_tool_calls_under_one_message(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.txt").write_text("alpha\n")
    both = [
        {"id": "c1", "name": "list_files", "arguments": {}},
        {"id": "c2", "name": "read_file", "arguments": {"path": "a.txt"}},
    ]
    script = [{"tool_calls": both}, {"text": "It says alpha."}]  # two calls in one step, no text before them
    with serve(tmp_path) as served:
        answer = drive(
            {
                "mode": "run",
                "url": f"{served.base}/v1/agui",
                "threadId": "thread-6",
                "steps": [{"message": "what is in a.txt?", "forwardedProps": seamline(served, "one", script)}],
            }
        )
        (step,) = answer["steps"]
        assert step["error"] is None and step["verified"]["ok"], step
        assert step["result"] == "It says alpha."
        holding = [m for m in answer["messages"] if m.get("toolCalls")]
        assert [[c["id"] for c in m["toolCalls"]] for m in holding] == [["c1", "c2"]]
        assert [m["role"] for m in answer["messages"]] == ["user", "assistant", "tool", "tool", "assistant"]


def test_verify_events_accepts_a_pipeline_with_several_subagents(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.txt").write_text("alpha\n")
    read = {"text": "Reading.", "tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"path": "a.txt"}}]}
    quiet = {"tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"path": "a.txt"}}]}  # no text first
    script = [read, {"text": "It says alpha."}, quiet, {"text": "Still alpha."}, read, {"text": "Alpha."}]
    with serve(tmp_path) as served, served.client() as client:
        reply = client.post(
            "/v1/pipelines/answer-review/runs",
            json={
                "prompt": "what is in a.txt?",
                "provider": "scripted",
                "options": {"script": served.script("p", script)},
            },
        )
        assert reply.status_code == 201, reply.text
        run_id = reply.json()["id"]
        with client.stream("GET", f"/v1/runs/{run_id}/events", params={"interrupts": "true"}) as response:
            events = [json.loads(f["data"]) for f in sse_frames(response.iter_lines())]
    started = [e["subagentRunId"] for e in events if e["type"] == "SUBAGENT_STARTED"]
    assert len(started) == 3, [e["type"] for e in events]  # the writer, three rounds
    assert verify(events) == {"ok": True, "error": None}
    calls = [e for e in events if e["type"] == "TOOL_CALL_START"]
    assert len(calls) == 3 and len({c["toolCallId"] for c in calls}) == 3


def test_http_agent_runs_a_pipeline(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.txt").write_text("alpha\n")
    read = {"text": "Reading.", "tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"path": "a.txt"}}]}
    script = [read, {"text": "It says alpha.\nSources: a.txt:1-1"}]  # the citation reviewer approves it
    with serve(tmp_path) as served:
        props = seamline(served, "p", script, pipeline="answer-review")
        answer = drive(
            {
                "mode": "run",
                "url": f"{served.base}/v1/agui",
                "threadId": "thread-p",
                "steps": [{"message": "what is in a.txt?", "runId": "run-p", "forwardedProps": props}],
            }
        )
        (step,) = answer["steps"]
        assert step["error"] is None and step["verified"] == {"ok": True, "error": None}, step
        events = step["events"]
        assert events[0]["type"] == "RUN_STARTED" and events[0]["metadata"]["seamline.pipeline"] == "answer-review"
        assert events[0]["threadId"] == "thread-p" and events[0]["runId"] == "run-p"
        started = [e for e in events if e["type"] == "SUBAGENT_STARTED"]
        assert [e["name"] for e in started] == ["write"]  # the writer's agent; the reviewer is no agent
        calls = [e for e in events if e["type"] == "TOOL_CALL_START"]
        assert [(c["toolCallName"], c["subagentRunId"]) for c in calls] == [("read_file", started[0]["subagentRunId"])]
        assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"]["type"] == "success"
        assert events[-1]["runId"] == "run-p" and step["result"] == "It says alpha.\nSources: a.txt:1-1"
        with served.client() as client:
            (run,) = client.get("/v1/runs").json()["runs"]
            assert run["pipeline"] == "answer-review" and run["status"] == "completed"
            assert run["prompt"] == "what is in a.txt?"
            assert client.get(f"/v1/traces/{run['id']}/verify").json()["ok"] is True
        assert not [s for s in served.store.list_sessions() if s.metadata.get("agui_thread_id")]  # no thread session


def test_a_declared_agent_runs_a_pipeline_over_agui_and_bad_ones_are_refused(tmp_path: Path) -> None:
    script = tmp_path / "helper.json"
    script.write_text(json.dumps([{"text": "The answer is 42."}]))
    agents = {"helper": AgentSpec(name="helper", provider="scripted", options={"script": str(script)})}
    body = {
        "threadId": "thread-q",
        "runId": "run-q",
        "messages": [{"id": "u", "role": "user", "content": "six times seven?"}],
        "forwardedProps": {"seamline": {"pipeline": "single"}},
    }
    with serve(tmp_path, agents=agents) as served, served.client() as client:
        with client.stream("POST", "/v1/agents/helper/agui", json=body) as response:
            assert response.status_code == 200, response.read()
            run_id = response.headers["x-seamline-run-id"]
            assert response.headers["x-seamline-session-id"] == ""  # a pipeline run has no one session
            events = [json.loads(f["data"]) for f in sse_frames(response.iter_lines())]
        assert [e["name"] for e in events if e["type"] == "SUBAGENT_STARTED"] == ["answer"]
        assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["result"] == "The answer is 42."
        assert client.get(f"/v1/runs/{run_id}").json()["pipeline"] == "single"
        # Read on with Last-Event-ID, as any AG-UI POST.
        again = client.post("/v1/agents/helper/agui", json=body, headers={"Last-Event-ID": "0"})
        assert [json.loads(f["data"]) for f in sse_frames(again.text.splitlines())] == events
        unknown = {**body, "runId": "r2", "forwardedProps": {"seamline": {"pipeline": "nope"}}}
        missing = client.post("/v1/agents/helper/agui", json=unknown)
        assert missing.status_code == 404 and "nope" in missing.json()["error"]["message"]
        more = {**body, "runId": "r3", "forwardedProps": {"seamline": {"pipeline": "single", "provider": "offline"}}}
        assert client.post("/v1/agents/helper/agui", json=more).status_code == 400  # the operator's choice


def _post(
    client: Any, body: dict[str, Any], *, last: str | None = None, stop: int | None = None
) -> list[dict[str, str]]:
    headers = {"Accept": "text/event-stream", **({"Last-Event-ID": last} if last is not None else {})}
    frames: list[dict[str, str]] = []
    with client.stream("POST", "/v1/agui", json=body, headers=headers) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["x-seamline-run-id"]
        for frame in sse_frames(response.iter_lines()):
            frames.append(frame)
            if stop is not None and len(frames) == stop:
                break
    return frames


def test_last_event_id_reads_a_dropped_post_on(tmp_path: Path) -> None:
    script = [{"text": "One two three.", "stream": True}, {"text": "x"}]
    with serve(tmp_path) as served, served.client() as client:
        body = {
            "threadId": "thread-3",
            "runId": "run-1",
            "messages": [{"id": "u1", "role": "user", "content": "count"}],
            "tools": [],
            "context": [],
            "state": {},
            "forwardedProps": seamline(served, "count", script),
        }
        head = _post(client, body, stop=2)  # a client that drops after two frames
        rest = _post(client, body, last=head[-1]["id"])
        whole = _post(client, body, last="0")
        assert [f["id"] for f in head + rest] == [f["id"] for f in whole]
        assert [f["data"] for f in head + rest] == [f["data"] for f in whole]
        assert json.loads(whole[-1]["data"])["type"] == "RUN_FINISHED"
        after_first = _post(client, body, last="1")  # N alone: all of event N was read
        assert [f["id"] for f in after_first] == [f["id"] for f in whole if not f["id"].startswith("1.")]
        assert verify([json.loads(f["data"]) for f in whole]) == {"ok": True, "error": None}
        assert len(served.store.list_sessions()) == 1  # reading on started nothing new


def test_bad_agui_requests_are_classified(tmp_path: Path) -> None:
    base = {"threadId": "t", "runId": "r", "tools": [], "context": [], "state": {}, "forwardedProps": {}}
    with serve(tmp_path) as served, served.client() as client:

        def error(path: str, body: Any, status: int, **kwargs: Any) -> str:
            reply = client.post(path, json=body, **kwargs)
            assert reply.status_code == status, reply.text
            message: str = reply.json()["error"]["message"]
            return message

        assert "RunAgentInput" in error("/v1/agui", {"threadId": 3}, 400)
        assert "user message" in error("/v1/agui", {**base, "messages": []}, 400)
        assert "no run waiting" in error(
            "/v1/agui", {**base, "messages": [], "resume": [{"interruptId": "p", "status": "resolved"}]}, 400
        )
        bad_props = {
            **base,
            "messages": [{"id": "u", "role": "user", "content": "hi"}],
            "forwardedProps": {"seamline": {"x": 1}},
        }
        assert "forwardedProps.seamline" in error("/v1/agui", bad_props, 400)
        assert "Last-Event-ID" in error("/v1/agui", bad_props, 400, headers={"Last-Event-ID": "x.y"})
        assert "no agent 'helper'" in error("/v1/agents/helper/agui", base, 404)
        assert client.get("/v1/agui").status_code == 405


def test_a_thread_finds_its_session_again_after_a_restart(tmp_path: Path) -> None:
    def body(served: Served, run_id: str, text: str) -> dict[str, Any]:
        props = seamline(served, run_id, [{"text": text}])
        messages = [{"id": run_id, "role": "user", "content": f"say {text}"}]
        return {"threadId": "thread-4", "runId": run_id, "messages": messages, "forwardedProps": props}

    sessions = []
    for run_id, text in (("run-1", "one"), ("run-2", "two")):  # two server processes, one store
        with serve(tmp_path) as served, served.client() as client:
            with client.stream("POST", "/v1/agui", json=body(served, run_id, text)) as response:
                assert response.status_code == 200, response.read()
                sessions.append(response.headers["x-seamline-session-id"])
                last = json.loads(list(sse_frames(response.iter_lines()))[-1]["data"])
            assert last["type"] == "RUN_FINISHED" and last["result"] == text
    assert sessions[0] == sessions[1]


def test_a_resume_is_taken_whole_and_a_waiting_thread_is_busy(tmp_path: Path) -> None:
    with serve(tmp_path) as served, served.client() as client:
        first = {
            "threadId": "thread-5",
            "runId": "run-1",
            "messages": [{"id": "u1", "role": "user", "content": "write hello.txt"}],
            "forwardedProps": seamline(served, "turn", TOOL_TURN),
        }
        frames = _post(client, first)  # ends at the interrupt
        ended = json.loads(frames[-1]["data"])
        assert ended["outcome"]["type"] == "interrupt"
        (interrupt,) = ended["outcome"]["interrupts"]
        run_id = client.get("/v1/runs").json()["runs"][0]["id"]

        def resume(*entries: dict[str, Any]) -> Any:
            return client.post("/v1/agui", json={**first, "runId": "run-2", "resume": list(entries)})

        allow = {"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow"}}
        unknown = resume(allow, {"interruptId": "nope", "status": "cancelled"})
        assert unknown.status_code == 404 and "nope" in unknown.json()["error"]["message"]
        bad = resume({**allow, "payload": {"decision": "maybe"}})
        assert bad.status_code == 400 and "decision" in bad.json()["error"]["message"]
        busy = client.post("/v1/agui", json={**first, "runId": "run-3"})
        assert busy.status_code == 409 and "resume" in busy.json()["error"]["message"]
        # Nothing was answered by the refused resumes: the run still waits.
        waiting = client.get(f"/v1/runs/{run_id}").json()
        assert [p["request_id"] for p in waiting["pending_permissions"]] == [interrupt["id"]]
        rest = [json.loads(f["data"]) for f in _post(client, {**first, "runId": "run-2", "resume": [allow]})]
        assert rest[0]["runId"] == "run-2" and rest[-1]["outcome"]["type"] == "success"


def test_verify_events_accepts_a_run_stream_with_a_permission_answered_over_http(tmp_path: Path) -> None:
    with serve(tmp_path) as served, served.client() as client:
        path = served.script("turn", TOOL_TURN)
        session_id = client.post("/v1/sessions", json={"provider": "scripted", "options": {"script": path}}).json()[
            "id"
        ]
        run_id = client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "write hello.txt"}).json()["id"]
        events: list[dict[str, Any]] = []
        with client.stream("GET", f"/v1/runs/{run_id}/events") as response:
            for frame in sse_frames(response.iter_lines()):
                events.append(json.loads(frame["data"]))
                if events[-1].get("name") == "seamline.permission_request":
                    client.post(events[-1]["value"]["respond"], json={"decision": "allow"})
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"]["type"] == "success"
    assert verify(events) == {"ok": True, "error": None}


def test_http_agent_on_a_yes_thread_gets_no_interrupt(tmp_path: Path) -> None:
    # With yes, the write is allowed unasked: the run's permission_request is decided at
    # once, so it is no interrupt (one would name a request nothing waits on).
    # A client may not ask for yes itself: the operator declares an agent that has it.
    script = tmp_path / "turn.json"
    script.write_text(json.dumps(TOOL_TURN))
    agents = {"trusted": AgentSpec(name="trusted", provider="scripted", yes=True, options={"script": str(script)})}
    with serve(tmp_path, agents=agents) as served:
        answer = drive(
            {
                "mode": "run",
                "url": f"{served.base}/v1/agents/trusted/agui",
                "threadId": "thread-6",
                "steps": [{"message": "write hello.txt", "forwardedProps": {}}],
            }
        )
        (step,) = answer["steps"]
        assert step["error"] is None and step["verified"]["ok"], step
        assert step["interrupts"] == [] and step["result"] == "Wrote hello.txt."
        assert types(step).count("RUN_STARTED") == 1
        assert (served.workspace / "hello.txt").read_text() == "hi\n"


def test_runs_the_server_forgot_are_forgotten_by_their_threads(tmp_path: Path) -> None:
    with serve(tmp_path, keep_finished=1) as served, served.client() as client:

        def body(thread: str) -> dict[str, Any]:
            props = seamline(served, thread, [{"text": thread}])
            return {
                "threadId": thread,
                "runId": "r",
                "messages": [{"id": "u", "role": "user", "content": "hi"}],
                "forwardedProps": props,
            }

        _post(client, body("a"))
        assert _post(client, body("a"), last="0")  # still held: it can be read again
        _post(client, body("b"))  # the server keeps one finished run: a's is forgotten
        gone = client.post("/v1/agui", json=body("a"), headers={"Last-Event-ID": "0"})
        assert gone.status_code == 404 and "no run 'r'" in gone.json()["error"]["message"]
        assert _post(client, body("b"), last="0")


def test_a_declared_agent_serves_its_own_agui_url(tmp_path: Path) -> None:
    script = tmp_path / "helper.json"
    script.write_text(json.dumps([{"text": "From the operator's agent."}]))
    agents = {"helper": AgentSpec(name="helper", provider="scripted", options={"script": str(script)})}
    body = {
        "threadId": "thread-a",
        "runId": "run-a",
        "messages": [{"id": "u", "role": "user", "content": "hello"}],
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
    }
    with serve(tmp_path, agents=agents) as served, served.client() as client:
        with client.stream("POST", "/v1/agents/helper/agui", json=body) as response:
            assert response.status_code == 200, response.read()
            session_id = response.headers["x-seamline-session-id"]
            last = json.loads(list(sse_frames(response.iter_lines()))[-1]["data"])
        assert last["type"] == "RUN_FINISHED" and last["result"] == "From the operator's agent."
        record = client.get(f"/v1/sessions/{session_id}").json()
        assert record["provider"] == "scripted" and record["metadata"]["agent"] == "helper"
        unknown = client.post("/v1/agents/nope/agui", json=body)
        assert unknown.status_code == 404 and "nope" in unknown.json()["error"]["message"]
        props = {**body, "forwardedProps": {"seamline": {"provider": "offline"}}}
        assert client.post("/v1/agents/helper/agui", json=props).status_code == 400  # the operator's choice
