"""Approvals that survive the server: a model-API run of `seamline serve` waits for a
person's answer; the server is killed outright (SIGKILL of its process group); a new
server on the same store (SQLite, and a real PostgreSQL server) lists the request (and so
does the next one, when that one is killed too before anyone answers); the run's own
operator answers it, the tool runs exactly once and the run ends from its stored
transcript with the model's answer.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("openai")

import httpx2

from seamline.server.users import UserBook, users_path_for
from tests.fakes.openai_api import FakeOpenAI
from tests.sessions.conftest import fresh_database, postgres_url  # noqa: F401 - the fixture

_T = TypeVar("_T")

SCRIPT = [
    {
        "text": "Appending.",
        "tool_calls": [{"id": "call-once", "name": "shell", "arguments": {"command": "echo ran >> side.txt"}}],
        "usage": {"input_tokens": 20, "output_tokens": 5},
    },
    {"text": "Appended the line once.", "usage": {"input_tokens": 30, "output_tokens": 6}},
]


def _until(what: str, probe: Callable[[], _T | None], deadline_s: float = 90.0) -> _T:
    """Wait for a condition (polled), failing with ``what`` when it does not come."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _events(client: httpx2.Client, run_id: str, deadline_s: float = 120.0) -> list[dict[str, Any]]:
    """The run's events until it ends; fails when it has not ended after ``deadline_s``
    (the stream's keep-alive comments every 15 s let the deadline be checked)."""
    deadline = time.monotonic() + deadline_s
    events: list[dict[str, Any]] = []
    with client.stream("GET", f"/v1/runs/{run_id}/events", params={"format": "seamline"}) as response:
        lines = response.iter_lines()
        for line in lines:
            if time.monotonic() > deadline:
                raise AssertionError(f"run {run_id} did not end; its events so far: {events}")
            if line.startswith("data:"):  # one event a frame, its JSON on one line
                events.append(json.loads(line[5:]))
    return events


@pytest.fixture(params=["sqlite", "postgres"])
def store_at(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "s.db")
    return fresh_database(request.getfixturevalue("postgres_url"))


def _stored_requests(store: Path | str) -> list[tuple[str, str]]:
    """The stored pending requests, read straight from the store's table."""
    query = "SELECT run_id, request_id FROM pending_permissions ORDER BY created_at"
    if str(store).startswith("postgresql://"):
        import psycopg

        with psycopg.connect(str(store), autocommit=True) as conn:
            try:
                return [(r[0], r[1]) for r in conn.execute(query).fetchall()]
            except psycopg.errors.UndefinedTable:  # not migrated yet
                return []
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        try:
            return [(r[0], r[1]) for r in db.execute(query)]
        except sqlite3.OperationalError:  # not migrated yet
            return []


@contextmanager
def _serve(command: list[str], env: dict[str, str]) -> Iterator[tuple[subprocess.Popen[str], str]]:
    proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stderr is not None
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stderr, selectors.EVENT_READ)
            assert selector.select(90), "seamline serve said nothing"
        line = proc.stderr.readline()
        found = re.search(r"serving (http://127\.0\.0\.1:\d+)/", line)
        assert found, line
        yield proc, found.group(1)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # its process group: nothing it started stays
            proc.wait(timeout=30)
        if proc.stderr is not None:
            proc.stderr.close()


def _raw_events(store: Path | str, session_id: str) -> list[tuple[str, dict[str, Any]]]:
    from seamline.sessions.sqlite_store import open_store

    opened = open_store(store)
    try:
        return [(row.source, json.loads(row.payload)) for row in opened.raw_rows(session_id)]
    finally:
        opened.close()


def test_a_pending_approval_survives_kill_9_and_the_tool_runs_once(
    tmp_path: Path, store_at: str, seamline_cmd: list[str], cli_env: dict[str, str]
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    store = store_at
    users = users_path_for(tmp_path / "s.db")
    book = UserBook(users)
    ana = book.add("ana", "operator")
    env = {**cli_env, "OPENAI_API_KEY": "sk-test-approvals"}
    env.pop("SEAMLINE_BLOCK_REAL_PROVIDERS", None)
    env.pop("OPENAI_BASE_URL", None)
    side = workspace / "side.txt"
    with FakeOpenAI(SCRIPT) as fake:
        agents = tmp_path / "agents.toml"
        agents.write_text(
            f'[agents.worker]\nprovider = "openai"\nmodel = "gpt-4o"\noptions = {{ base_url = "{fake.base_url}" }}\n'
        )
        command = [
            *seamline_cmd,
            *("serve", "--port", "0", "--store", str(store), "--workspace", str(workspace)),
            *("--agents", str(agents), "--users", str(users)),
        ]
        headers = {"authorization": f"Bearer {ana}"}
        with _serve(command, env) as (first, base), httpx2.Client(base_url=base, timeout=30, headers=headers) as client:
            created = client.post("/v1/sessions", json={"agent": "worker"})
            assert created.status_code == 201, created.text
            session_id = created.json()["id"]
            started = client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "append a line"})
            assert started.status_code in (200, 201, 202), started.text
            run_id = started.json()["id"]
            listed = _until(
                "the request to be listed",
                lambda: [r for r in client.get("/v1/runs").json()["runs"] if r["pending_permissions"]],
            )
            assert [p["request_id"] for p in listed[0]["pending_permissions"]] == ["perm-call-once"]
            assert _stored_requests(store) == [(run_id, "perm-call-once")]
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(timeout=30)
        assert not side.exists(), "the tool ran before anyone answered"
        assert len(fake.model_requests()) == 1
        # The server that took the run up dies too, before anyone answers: the next one takes it up again.
        with _serve(command, env) as (second, base), httpx2.Client(base_url=base, timeout=30, headers=headers) as c:
            runs = c.get("/v1/runs").json()["runs"]
            assert [(r["id"], r["status"], r["started_by"]) for r in runs] == [(run_id, "running", "ana")]
            assert [p["request_id"] for p in runs[0]["pending_permissions"]] == ["perm-call-once"]
            os.killpg(second.pid, signal.SIGKILL)
            second.wait(timeout=30)
        assert not side.exists() and len(fake.model_requests()) == 1
        assert _stored_requests(store) == [(run_id, "perm-call-once")]

        with _serve(command, env) as (_third, base), httpx2.Client(base_url=base, timeout=30, headers=headers) as c:
            runs = c.get("/v1/runs").json()["runs"]
            assert [(r["id"], r["status"], r["started_by"]) for r in runs] == [(run_id, "running", "ana")]
            assert [p["request_id"] for p in runs[0]["pending_permissions"]] == ["perm-call-once"]
            assert runs[0]["pending_permissions"][0]["arguments"] == {"command": "echo ran >> side.txt"}
            answered = c.post(f"/v1/runs/{run_id}/permissions/perm-call-once", json={"decision": "allow"})
            assert answered.status_code == 200, answered.text
            events = _events(c, run_id)
            summary = c.get(f"/v1/runs/{run_id}").json()
            assert (summary["status"], summary["pending_permissions"]) == ("completed", [])
            assert _stored_requests(store) == []
    assert side.read_text() == "ran\n", "the tool ran once"
    complete = [e for e in events if e["type"] == "complete"]
    assert len(complete) == 1 and complete[0]["text"] == "Appended the line once."
    decision = next(e for e in events if e["type"] == "permission_decision")
    assert (decision["request_id"], decision["decision"], decision["by"]) == ("perm-call-once", "allow", "ana")
    result = next(e for e in events if e["type"] == "tool_result")
    assert result["call_id"] == "call-once" and not result["is_error"]
    # The model was asked once more, with the stored conversation and the tool's result.
    asked = fake.model_requests()
    assert len(asked) == 2
    messages = asked[1].body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert messages[1]["tool_calls"][0]["id"] == "call-once" and messages[2]["tool_call_id"] == "call-once"
    # The store keeps who answered, and that the run was taken up by a new server.
    raw = _raw_events(store, session_id)
    kept = [p for s, p in raw if s == "event" and p.get("type") == "permission_decision"]
    assert [(d["decision"], d["by"]) for d in kept] == [("allow", "ana")]
    taken = [p for s, p in raw if s == "serve.taken_up"]
    assert [(t["run_id"], t["requests"]) for t in taken] == [(run_id, ["perm-call-once"])] * 2
    prompts = [p for s, p in raw if s == "prompt"]
    assert prompts == ["append a line"], "the turn went on; it was not started again"


def test_a_run_that_ends_leaves_no_stored_request(
    tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    store = tmp_path / "s.db"
    env = {**cli_env, "OPENAI_API_KEY": "sk-test-approvals"}
    env.pop("SEAMLINE_BLOCK_REAL_PROVIDERS", None)
    with FakeOpenAI(SCRIPT) as fake:
        agents = tmp_path / "agents.toml"
        agents.write_text(
            f'[agents.worker]\nprovider = "openai"\nmodel = "gpt-4o"\noptions = {{ base_url = "{fake.base_url}" }}\n'
        )
        command = [
            *seamline_cmd,
            *("serve", "--port", "0", "--store", str(store), "--workspace", str(workspace)),
            *("--agents", str(agents)),
        ]
        with _serve(command, env) as (proc, base), httpx2.Client(base_url=base, timeout=30) as client:
            session_id = client.post("/v1/sessions", json={"agent": "worker"}).json()["id"]
            run_id = client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "append"}).json()["id"]
            _until("the request to be stored", lambda: _stored_requests(store))
            # Denied: the request is answered, the turn goes on without the tool, the row goes.
            denied = client.post(f"/v1/runs/{run_id}/permissions/perm-call-once", json={"decision": "deny"})
            assert denied.status_code == 200
            _until("the run to end", lambda: client.get(f"/v1/runs/{run_id}").json()["status"] != "running")
            assert _stored_requests(store) == []
            # A run cancelled while it waits leaves none either.
            fake.push(SCRIPT[0])  # the tool call only: a cancelled run asks the model nothing more
            second = client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "again"}).json()["id"]
            _until("the second request to be stored", lambda: _stored_requests(store))
            client.post(f"/v1/runs/{second}/cancel")
            _until("the second run to end", lambda: client.get(f"/v1/runs/{second}").json()["status"] != "running")
            assert _stored_requests(store) == []
            # A server stopped gracefully ends its waiting runs (aborted): nothing is left to take up.
            fake.push(SCRIPT[0])
            client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "once more"})
            _until("the third request to be stored", lambda: _stored_requests(store))
            os.killpg(proc.pid, signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
            assert _stored_requests(store) == []
    assert not (workspace / "side.txt").exists(), "denied, then cancelled: the tool never ran"
