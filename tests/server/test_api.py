"""The HTTP API v1 end to end: a tool-calling turn on the scripted provider streamed as
AG-UI (every event validated with the ag-ui-protocol models) and as seamline events,
a dropped stream resumed with Last-Event-ID, a permission answered over HTTP, cancel,
busy sessions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ag_ui")
pytest.importorskip("uvicorn")

from ag_ui.core import Event as AgUiEvent
from pydantic import TypeAdapter

from seamline.events import decode_event
from seamline.server.agents_file import AgentSpec
from tests.server.harness import TOOL_TURN, Served, serve, sse_frames

AGUI = TypeAdapter(AgUiEvent)
# The operator's agent that lets clients pass "yes" (and pick a script).
TRUSTED = {"trusted": AgentSpec(name="trusted", provider="scripted", yes=True, client_options=("script",))}


def _session(served: Served, client: Any, script: list[dict[str, Any]], **body: Any) -> str:
    path = served.script("script", script)
    reply = client.post("/v1/sessions", json={"provider": "scripted", "options": {"script": path}, **body})
    assert reply.status_code == 201, reply.text
    return str(reply.json()["id"])


def _run(client: Any, session_id: str, prompt: str = "write hello.txt", **body: Any) -> str:
    reply = client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": prompt, **body})
    assert reply.status_code == 201, reply.text
    return str(reply.json()["id"])


def _read(client: Any, run_id: str, *, fmt: str, last: str | None = None, stop: Any = None) -> list[dict[str, str]]:
    """Frames of the run's SSE stream, from after ``last``; closes the connection once
    ``stop(frame)`` is true (a client that drops mid-run)."""
    headers = {"Last-Event-ID": last} if last is not None else {}
    frames: list[dict[str, str]] = []
    with client.stream("GET", f"/v1/runs/{run_id}/events", params={"format": fmt}, headers=headers) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for frame in sse_frames(response.iter_lines()):
            frames.append(frame)
            if stop is not None and stop(frame):
                break
    return frames


def _wait_done(client: Any, run_id: str) -> dict[str, Any]:
    # The stream ends when the run does: read it to the end instead of polling.
    _read(client, run_id, fmt="seamline", last=str(10**6))
    run: dict[str, Any] = client.get(f"/v1/runs/{run_id}").json()
    return run


def test_tool_turn_as_agui_with_permission_and_resume(tmp_path: Path) -> None:
    with serve(tmp_path) as served, served.client() as client:
        session_id = _session(served, client, TOOL_TURN)
        run_id = _run(client, session_id)
        # First connection: read AG-UI until the permission request, then drop it.
        first = _read(
            client,
            run_id,
            fmt="agui",
            stop=lambda f: json.loads(f["data"]).get("name") == "seamline.permission_request",
        )
        asked = json.loads(first[-1]["data"])["value"]
        assert asked["tool"] == "write_file" and asked["call_id"] == "call-w"
        assert asked["respond"].endswith(f"/v1/runs/{run_id}/permissions/{asked['request_id']}")
        pending = client.get(f"/v1/runs/{run_id}").json()
        assert pending["status"] == "running"
        assert [p["request_id"] for p in pending["pending_permissions"]] == [asked["request_id"]]
        answer = client.post(asked["respond"], json={"decision": "allow", "scope": "once"})
        assert answer.status_code == 200, answer.text
        # Resume after the last id this client saw: the rest, nothing twice.
        rest = _read(client, run_id, fmt="agui", last=first[-1]["id"])
        whole = _read(client, run_id, fmt="agui")
        assert [f["id"] for f in first + rest] == [f["id"] for f in whole]
        assert [f["data"] for f in first + rest] == [f["data"] for f in whole]
        events = [AGUI.validate_json(f["data"]) for f in whole]
        types = [e.type.value for e in events]
        assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED"
        assert events[0].thread_id == session_id and events[0].protocol_version
        for name in ("TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "TOOL_CALL_START"):
            assert name in types
        assert types.index("TOOL_CALL_START") < types.index("TOOL_CALL_ARGS") < types.index("TOOL_CALL_END")
        assert types.index("TOOL_CALL_END") < types.index("TOOL_CALL_RESULT")
        result = next(e for e in events if e.type.value == "TOOL_CALL_RESULT")
        assert result.tool_call_id == "call-w" and "hello.txt" in str(result.content)
        changes = [e.value for e in events if e.type.value == "CUSTOM" and e.name == "seamline.file_change"]
        assert changes == [{"type": "file_change", "path": "hello.txt", "kind": "created", "call_id": "call-w"}]
        finished = events[-1]
        assert finished.outcome.type == "success" and finished.result == "Wrote hello.txt."
        assert finished.usage[0].input_tokens == 220 and finished.usage[0].output_tokens == 15
        assert finished.metadata["seamline.cost_usd"] == pytest.approx(0.003)
        text = "".join(e.delta for e in events if e.type.value == "TEXT_MESSAGE_CONTENT")
        assert text == "Let me write it.Wrote hello.txt."
        # Every message that starts ends, in order.
        opened = [e.message_id for e in events if e.type.value == "TEXT_MESSAGE_START"]
        closed = [e.message_id for e in events if e.type.value == "TEXT_MESSAGE_END"]
        assert opened == closed and len(opened) == 2
        assert (served.workspace / "hello.txt").read_text() == "hi\n"
        assert served.store.get(session_id).status == "completed"


def test_seamline_format_resumes_with_last_event_id(tmp_path: Path) -> None:
    with serve(tmp_path) as served, served.client() as client:
        session_id = _session(served, client, TOOL_TURN)
        run_id = _run(client, session_id)
        first = _read(client, run_id, fmt="seamline", stop=lambda f: f["event"] == "permission_request")
        request_id = json.loads(first[-1]["data"])["request_id"]
        reply = client.post(f"/v1/runs/{run_id}/permissions/{request_id}", json={"decision": "deny"})
        assert reply.status_code == 200
        rest = _read(client, run_id, fmt="seamline", last=first[-1]["id"])
        whole = _read(client, run_id, fmt="seamline")
        ids = [int(f["id"]) for f in first + rest]
        assert ids == list(range(1, len(whole) + 1))
        assert [f["data"] for f in first + rest] == [f["data"] for f in whole]
        events = [decode_event(f["data"]) for f in whole]
        assert [f["event"] for f in whole] == [e.type for e in events]
        assert events[0].type == "session" and events[-1].type == "complete"
        assert [e.type for e in events].count("permission_request") == 1  # announced once, not twice
        decision = next(e for e in events if e.type == "permission_decision")
        assert decision.decision == "deny"
        assert not (served.workspace / "hello.txt").exists()
        # NDJSON carries the same events with their ids.
        lines = client.get(f"/v1/runs/{run_id}/events", params={"format": "seamline", "stream": "ndjson"})
        rows = [json.loads(line) for line in lines.text.splitlines()]
        assert [r["id"] for r in rows] == list(range(1, len(whole) + 1))
        assert [json.dumps(r["event"], separators=(",", ":")) for r in rows] == [f["data"] for f in whole]


def test_disconnect_does_not_abort_and_cancel_does(tmp_path: Path) -> None:
    slow = [{"text": "first", "stream": True}, {"delay": 30, "text": "never"}]
    script = [{"text": "thinking", "tool_calls": [{"name": "list_dir", "arguments": {}}]}, *slow[1:]]
    with serve(tmp_path) as served, served.client() as client:
        session_id = _session(served, client, script)
        run_id = _run(client, session_id)
        # Read until the tool result (the model is now waiting 30 s), then drop.
        first = _read(client, run_id, fmt="seamline", stop=lambda f: f["event"] == "tool_result")
        assert client.get(f"/v1/runs/{run_id}").json()["status"] == "running"
        reply = client.post(f"/v1/runs/{run_id}/cancel")
        assert reply.status_code == 202
        rest = _read(client, run_id, fmt="seamline", last=first[-1]["id"])
        final = decode_event(rest[-1]["data"])
        assert final.type == "complete" and final.outcome == "aborted"
        run = client.get(f"/v1/runs/{run_id}").json()
        assert run["status"] == "aborted"
        assert served.store.get(session_id).status == "aborted"
        agui = [AGUI.validate_json(f["data"]) for f in _read(client, run_id, fmt="agui")]
        assert agui[-1].type.value == "RUN_FINISHED" and agui[-1].outcome.type == "cancelled"
        assert agui[-1].metadata["seamline.outcome"] == "aborted"


def test_busy_session_rejects_or_enqueues(tmp_path: Path) -> None:
    script = [{"delay": 30, "text": "slow"}, {"text": "second"}]
    with serve(tmp_path) as served, served.client() as client:
        session_id = _session(served, client, script)
        first = _run(client, session_id)
        busy = client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "again"})
        assert busy.status_code == 409 and busy.json()["error"]["kind"] == "busy"
        assert client.delete(f"/v1/sessions/{session_id}").status_code == 409
        assert client.post(f"/v1/sessions/{session_id}/revert", json={}).status_code == 409
        queued = client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "again", "busy": "enqueue"})
        assert queued.status_code == 201 and queued.json()["status"] == "queued"
        client.post(f"/v1/runs/{first}/cancel")
        second = _wait_done(client, queued.json()["id"])
        assert second["status"] == "completed"
        assert _wait_done(client, first)["status"] == "aborted"
        events = [decode_event(f["data"]) for f in _read(client, queued.json()["id"], fmt="seamline")]
        assert events[-1].type == "complete" and events[-1].text == "second"


def test_sessions_fork_transcript_and_delete(tmp_path: Path) -> None:
    with serve(tmp_path) as served, served.client() as client:
        session_id = _session(served, client, [{"text": "one"}, {"text": "two"}])
        assert _wait_done(client, _run(client, session_id, "first"))["status"] == "completed"
        listed = client.get("/v1/sessions").json()["sessions"]
        row = next(s for s in listed if s["id"] == session_id)
        assert row["provider"] == "scripted" and row["status"] == "completed" and row["cost_usd"] is not None
        entries = client.get(f"/v1/sessions/{session_id}/transcript").json()["entries"]
        assert [e["kind"] for e in entries][:2] == ["user", "assistant"]
        fork = client.post(f"/v1/sessions/{session_id}/fork", json={})
        assert fork.status_code == 201, fork.text
        assert fork.json()["parent_id"] == session_id
        assert _wait_done(client, _run(client, fork.json()["id"], "next"))["status"] == "completed"
        assert client.delete(f"/v1/sessions/{fork.json()['id']}").status_code == 200
        assert client.get(f"/v1/sessions/{fork.json()['id']}").status_code == 404


def test_agui_interrupt_then_continue_with_last_event_id(tmp_path: Path) -> None:
    with serve(tmp_path) as served, served.client() as client:
        session_id = _session(served, client, TOOL_TURN)
        run_id = _run(client, session_id)
        with client.stream("GET", f"/v1/runs/{run_id}/events", params={"interrupts": "true"}) as response:
            first = list(sse_frames(response.iter_lines()))  # the server ends this stream at the interrupt
        paused = AGUI.validate_json(first[-1]["data"])
        assert paused.type.value == "RUN_FINISHED" and paused.outcome.type == "interrupt"
        (interrupt,) = paused.outcome.interrupts
        assert interrupt.tool_call_id == "call-w" and interrupt.response_schema["required"] == ["decision"]
        respond = interrupt.metadata["seamline.respond"]
        assert client.post(respond, json={"decision": "allow"}).status_code == 200
        headers = {"Last-Event-ID": first[-1]["id"]}
        params = {"interrupts": "true"}
        with client.stream("GET", f"/v1/runs/{run_id}/events", params=params, headers=headers) as response:
            rest = [AGUI.validate_json(f["data"]) for f in sse_frames(response.iter_lines())]
        assert rest[0].type.value == "RUN_STARTED" and rest[0].parent_run_id == run_id
        assert rest[-1].type.value == "RUN_FINISHED" and rest[-1].outcome.type == "success"
        assert (served.workspace / "hello.txt").exists()


def test_revert_undoes_a_sessions_edits(tmp_path: Path) -> None:
    with serve(tmp_path, agents=TRUSTED) as served, served.client() as client:
        (served.workspace / "keep.txt").write_text("before\n")
        script = [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "keep.txt", "content": "after\n"}}]},
            {"text": "changed"},
        ]
        session_id = _session(served, client, script, yes=True, agent="trusted")
        assert _wait_done(client, _run(client, session_id, "change it"))["status"] == "completed"
        assert (served.workspace / "keep.txt").read_text() == "after\n"
        reply = client.post(f"/v1/sessions/{session_id}/revert", json={})
        assert reply.status_code == 200, reply.text
        assert reply.json()["steps_undone"] == 1
        assert (served.workspace / "keep.txt").read_text() == "before\n"


def test_old_finished_runs_are_forgotten(tmp_path: Path) -> None:
    with serve(tmp_path, keep_finished=1) as served, served.client() as client:
        session_id = _session(served, client, [{"text": "one"}, {"text": "two"}])
        first = _run(client, session_id, "first")
        assert _wait_done(client, first)["status"] == "completed"
        second = _run(client, session_id, "second")
        assert _wait_done(client, second)["status"] == "completed"
        assert client.get(f"/v1/runs/{first}").status_code == 404
        assert client.get(f"/v1/sessions/{session_id}").json()["runs"] == [second]
        entries = client.get(f"/v1/sessions/{session_id}/transcript").json()["entries"]
        assert [e["content"] for e in entries if e["kind"] == "user"] == ["first", "second"]


def test_pipeline_run_streams_roles_as_subagents(tmp_path: Path) -> None:
    script = [{"text": "The answer is 42.", "usage": {"input_tokens": 5, "output_tokens": 5, "cost_usd": 0.01}}]
    with serve(tmp_path) as served, served.client() as client:
        path = served.script("pipeline", script)
        reply = client.post(
            "/v1/pipelines/single/runs",
            json={"prompt": "what is six times seven?", "provider": "scripted", "options": {"script": path}},
        )
        assert reply.status_code == 201, reply.text
        run_id = reply.json()["id"]
        assert reply.json()["pipeline"] == "single" and reply.json()["session_id"] is None
        events = [AGUI.validate_json(f["data"]) for f in _read(client, run_id, fmt="agui")]
        types = [e.type.value for e in events]
        assert types[0] == "RUN_STARTED" and events[0].thread_id == run_id
        started = [e for e in events if e.type.value == "SUBAGENT_STARTED"]
        ended = [e for e in events if e.type.value in ("SUBAGENT_FINISHED", "SUBAGENT_ERROR")]
        assert [e.name for e in started] == ["answer"]  # named by phase
        assert [e.subagent_run_id for e in ended] == [e.subagent_run_id for e in started]
        assert ended[0].type.value == "SUBAGENT_FINISHED" and ended[0].result == "The answer is 42."
        texts = [e for e in events if e.type.value == "TEXT_MESSAGE_CONTENT"]
        assert [t.subagent_run_id for t in texts] == [started[0].subagent_run_id]
        assert types[-1] == "RUN_FINISHED", events[-1]
        assert events[-1].outcome.type == "success" and events[-1].result == "The answer is 42."
        assert events[-1].metadata["seamline.cost_usd"] == pytest.approx(0.01)
        run = client.get(f"/v1/runs/{run_id}").json()
        assert run["status"] == events[-1].metadata["seamline.outcome"]
        verify = client.get(f"/v1/traces/{run_id}/verify")
        assert verify.status_code == 200 and verify.json()["ok"] is True


def test_cancel_while_a_permission_waits_denies_it(tmp_path: Path) -> None:
    with serve(tmp_path) as served, served.client() as client:
        session_id = _session(served, client, TOOL_TURN)
        run_id = _run(client, session_id)
        _read(client, run_id, fmt="seamline", stop=lambda f: f["event"] == "permission_request")
        assert client.post(f"/v1/runs/{run_id}/cancel").status_code == 202
        events = [decode_event(f["data"]) for f in _read(client, run_id, fmt="seamline")]
        decision = next(e for e in events if e.type == "permission_decision")
        assert decision.decision == "deny"
        assert events[-1].type == "complete" and events[-1].outcome == "aborted"
        assert not (served.workspace / "hello.txt").exists()


def test_yes_on_a_run_allows_its_tools_unasked(tmp_path: Path) -> None:
    with serve(tmp_path, agents=TRUSTED) as served, served.client() as client:
        session_id = _session(served, client, [*TOOL_TURN, {"text": "again"}], agent="trusted")
        run_id = _run(client, session_id, yes=True)
        assert _wait_done(client, run_id)["status"] == "completed"
        events = [decode_event(f["data"]) for f in _read(client, run_id, fmt="seamline")]
        decision = next(e for e in events if e.type == "permission_decision")
        assert decision.decision == "allow" and "--yes" in decision.reason
        assert (served.workspace / "hello.txt").read_text() == "hi\n"


def test_interrupts_are_only_the_requests_that_waited(tmp_path: Path) -> None:
    # A request decided at once (yes, a rule) is no interrupt: the stream goes on to success.
    with serve(tmp_path, agents=TRUSTED) as served, served.client() as client:
        session_id = _session(served, client, [*TOOL_TURN, {"text": "again"}], agent="trusted")
        run_id = _run(client, session_id, yes=True)
        assert _wait_done(client, run_id)["status"] == "completed"
        with client.stream("GET", f"/v1/runs/{run_id}/events", params={"interrupts": "true"}) as response:
            frames = [AGUI.validate_json(f["data"]) for f in sse_frames(response.iter_lines())]
        finished = [f for f in frames if f.type.value == "RUN_FINISHED"]
        assert len(finished) == 1 and finished[0].outcome.type == "success", frames
        assert (served.workspace / "hello.txt").read_text() == "hi\n"


def test_a_stored_session_not_held_is_resumed_for_a_run(tmp_path: Path) -> None:
    with serve(tmp_path) as served, served.client() as client:
        # A session some other process left in the store (the server is idle meanwhile).
        served.store.create_session(
            "feedfacecafe0001", provider="scripted", model="scripted", workspace=str(served.workspace)
        )
        served.store.set_status("feedfacecafe0001", "completed")
        assert client.get("/v1/sessions/feedface").json()["live"] is False
        path = served.script("later", [{"text": "resumed"}])
        missing = client.post("/v1/sessions/feedface/runs", json={"prompt": "go on"})
        assert missing.status_code == 400 and "script" in missing.json()["error"]["message"]
        run = client.post("/v1/sessions/feedface/runs", json={"prompt": "go on", "options": {"script": path}})
        assert run.status_code == 201, run.text
        assert _wait_done(client, run.json()["id"])["status"] == "completed"
        row = client.get("/v1/sessions/feedfacecafe0001").json()
        assert row["live"] is True and row["status"] == "completed" and row["runs"] == [run.json()["id"]]


def test_a_store_that_fails_is_a_500_of_kind_storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from seamline.errors import StorageFailure

    with serve(tmp_path) as served, served.client() as client:

        def broken(**_: object) -> list[object]:
            raise StorageFailure("cannot read the store s.db: disk I/O error")

        monkeypatch.setattr(served.store, "list_sessions", broken)
        reply = client.get("/v1/sessions")
    assert reply.status_code == 500, reply.text
    assert reply.json()["error"]["kind"] == "storage" and "disk I/O error" in reply.json()["error"]["message"]


def test_a_run_titles_its_session_as_soon_as_it_is_started(tmp_path: Path) -> None:
    # The model takes 30 s to answer: nothing of the turn is committed yet when the POST returns.
    with serve(tmp_path) as served, served.client() as client:
        session_id = _session(served, client, [{"delay": 30, "text": "slow"}])
        assert client.get(f"/v1/sessions/{session_id}").json()["title"] == ""
        run_id = _run(client, session_id, "Tidy the tests, please\nand then the docs")
        listed = client.get("/v1/sessions").json()["sessions"]
        assert [s["title"] for s in listed if s["id"] == session_id] == ["Tidy the tests, please"]
        assert client.get(f"/v1/sessions/{session_id}").json()["title"] == "Tidy the tests, please"
        assert client.get(f"/v1/runs/{run_id}").json()["status"] in ("queued", "running")
        assert client.post(f"/v1/runs/{run_id}/cancel").status_code == 202
        assert _wait_done(client, run_id)["status"] == "aborted"
        # Once the turn is in the store, its first prompt still titles it.
        assert client.get(f"/v1/sessions/{session_id}").json()["title"] == "Tidy the tests, please"
