"""Approvals that survive the server, for an agent CLI: real Claude Code (from .tools)
against the fake Anthropic API waits, under `seamline serve`, for an answer to its Bash
call; the machine dies (SIGKILL of the server's process group and of Claude Code's); a new
server on the same store lists the request, resumes Claude Code's session natively, and
when Claude Code asks for the same call again the new request says it is asked again after
a restart; the answer given to the stored request decides it, and the call runs once."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

pytest.importorskip("uvicorn")

import httpx2

from seamline.server.pending import AGAIN_PREFIX
from tests.providers.agent_cli_support import AgentAnthropic, cli_path, make_world
from tests.server.test_approvals_survive import _events, _raw_events, _serve, _stored_requests, _until

pytestmark = pytest.mark.real
MODEL = "claude-sonnet-4-5"
COMMAND = "echo ran >> side.txt"


def _children(pid: int) -> list[int]:
    """The process groups that children of ``pid`` lead (read from /proc): the agents a
    server started, each in a session of its own."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and int(fields[2]) == int(entry.name):
            found.append(int(entry.name))
    return found


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def test_an_agent_cli_run_is_resumed_and_asked_again_after_kill_9(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = make_world(tmp_path, monkeypatch)
    store = tmp_path / "s.db"
    side = world.workspace / "side.txt"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    script = [
        {"tool_calls": [{"name": "Bash", "arguments": {"command": COMMAND}}]},
        {"tool_calls": [{"name": "Bash", "arguments": {"command": COMMAND}}]},
        {"text": "Appended after the restart."},
    ]
    agents_pgids: list[int] = []
    with AgentAnthropic(script, fallback={"text": "side"}) as fake:
        agents = tmp_path / "agents.toml"
        agents.write_text(
            "[agents.cc]\n"
            'provider = "claude-code"\n'
            f'model = "{MODEL}"\n'
            'sandbox = "none"\n'
            f'options = {{ executable = "{cli_path("claude")}", base_url = "{fake.root_url}", max_retries = "0" }}\n'
        )
        command = [
            *(sys.executable, "-m", "seamline", "serve", "--port", "0"),
            *("--store", str(store), "--workspace", str(world.workspace), "--agents", str(agents)),
        ]
        try:
            with _serve(command, env) as (first, base), httpx2.Client(base_url=base, timeout=30) as client:
                created = client.post("/v1/sessions", json={"agent": "cc"})
                assert created.status_code == 201, created.text
                session_id = created.json()["id"]
                run_id = client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "append a line"}).json()["id"]
                listed = _until(
                    "Claude Code's request to be stored",
                    lambda: (
                        [r for r in client.get("/v1/runs").json()["runs"] if r["pending_permissions"]]
                        and _stored_requests(store)
                    ),
                )
                first_request = listed[0][1]
                agents_pgids += _children(first.pid)  # Claude Code: its own process group (pgid == pid)
                assert agents_pgids, "no agent process under the server"
                # The machine dies: the server and the agent together.
                os.killpg(first.pid, signal.SIGKILL)
                for pgid in agents_pgids:
                    os.killpg(pgid, signal.SIGKILL)
                first.wait(timeout=30)
                _until("the agent to be gone", lambda: all(_gone(p) for p in agents_pgids))
            assert not side.exists()
            assert len(fake.turn_requests()) == 1

            with _serve(command, env) as (second, base), httpx2.Client(base_url=base, timeout=60) as client:
                try:
                    runs = client.get("/v1/runs").json()["runs"]
                    assert [(r["id"], r["status"]) for r in runs] == [(run_id, "running")]
                    assert [p["request_id"] for p in runs[0]["pending_permissions"]] in ([first_request], [])
                    # Answered by the stored request's id, whether or not Claude Code asked again yet.
                    answered = client.post(f"/v1/runs/{run_id}/permissions/{first_request}", json={"decision": "allow"})
                    assert answered.status_code == 200, answered.text
                    events = _events(client, run_id)
                    assert client.get(f"/v1/runs/{run_id}").json()["status"] == "completed"
                    assert _stored_requests(store) == []
                finally:  # the agent it started: ended below, by its process group
                    agents_pgids.extend(p for p in _children(second.pid) if p not in agents_pgids)
        finally:
            for pgid in agents_pgids:
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    assert side.read_text() == "ran\n", "the call ran once, after the answer"
    asked = [e for e in events if e["type"] == "permission_request"]
    again = [e for e in asked if e["reason"].startswith(AGAIN_PREFIX)]
    assert len(again) == 1 and first_request in again[0]["reason"], asked
    assert again[0]["arguments"]["command"] == COMMAND
    decisions = [e for e in events if e["type"] == "permission_decision" and e["request_id"] == again[0]["request_id"]]
    assert [(d["decision"], d["by"]) for d in decisions] == [("allow", "user")]
    complete = [e for e in events if e["type"] == "complete"]
    assert len(complete) == 1 and complete[0]["outcome"] == "completed"
    assert complete[0]["text"] == "Appended after the restart."
    raw = _raw_events(store, session_id)
    assert [p["first"] for s, p in raw if s == "serve.asked_again"] == [first_request]
    assert [p["how"] for s, p in raw if s == "serve.taken_up"] == ["native"]
    turns = fake.turn_requests()
    assert len(turns) == 3
    # The resumed session was told that its call was not run (the prompt after the restart).
    assert "waited for approval" in json.dumps(turns[1].body["messages"][-1])
    from seamline.sessions.sqlite_store import SQLiteStore

    opened = SQLiteStore(store)
    try:
        assert opened.require(session_id).metadata["last_resume"] == "native"
    finally:
        opened.close()
