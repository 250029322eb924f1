"""Users and roles over HTTP, against a real server on 127.0.0.1: every route of the route
table for each role (the table below is written out by hand: a route added without a role
fails here), an operator answering only its own runs' requests, who started a run and who
answered recorded, tokens kept only as hashes, and a user's daily budget."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("ag_ui")

import httpx2
from starlette.routing import Route

from seamline.server.routes import ROUTES
from seamline.server.users import UserBook, users_path_for
from seamline.sessions.sqlite_store import SQLiteStore
from tests.server.harness import TOOL_TURN, Served, serve, sse_frames
from tests.server.test_cli import _line

# What each route needs, by hand. "own": an operator's own run or session (anyone else's
# needs an admin).
EXPECTED: dict[tuple[str, str], str] = {
    ("GET", "/"): "viewer",
    ("GET", "/page/{name}"): "viewer",
    ("GET", "/v1/openapi.json"): "viewer",
    ("GET", "/v1/info"): "viewer",
    ("GET", "/v1/providers"): "viewer",
    ("GET", "/v1/agents"): "viewer",
    ("GET", "/v1/sessions"): "viewer",
    ("POST", "/v1/sessions"): "operator",
    ("GET", "/v1/sessions/{session_id}"): "viewer",
    ("DELETE", "/v1/sessions/{session_id}"): "admin",
    ("POST", "/v1/sessions/{session_id}/fork"): "operator",
    ("GET", "/v1/sessions/{session_id}/transcript"): "viewer",
    ("POST", "/v1/sessions/{session_id}/revert"): "admin",
    ("POST", "/v1/sessions/{session_id}/runs"): "operator",
    ("GET", "/v1/sessions/{session_id}/diff"): "viewer",
    ("POST", "/v1/sessions/{session_id}/merge"): "own",
    ("POST", "/v1/sessions/{session_id}/discard"): "own",
    ("GET", "/v1/runs"): "viewer",
    ("GET", "/v1/runs/{run_id}"): "viewer",
    ("GET", "/v1/runs/{run_id}/events"): "viewer",
    ("POST", "/v1/runs/{run_id}/cancel"): "own",
    ("POST", "/v1/runs/{run_id}/budget"): "own",
    ("POST", "/v1/runs/{run_id}/permissions/{request_id}"): "own",
    ("GET", "/v1/runs/{run_id}/diff"): "viewer",
    ("POST", "/v1/runs/{run_id}/merge"): "own",
    ("POST", "/v1/runs/{run_id}/discard"): "own",
    ("GET", "/v1/pipelines"): "viewer",
    ("POST", "/v1/pipelines/{name}/runs"): "operator",
    ("GET", "/v1/traces/{run_id}"): "viewer",
    ("GET", "/v1/traces/{run_id}/verify"): "viewer",
    ("GET", "/v1/evals"): "viewer",
    ("GET", "/v1/evals/{eval_id}"): "viewer",
    ("GET", "/v1/evals/{eval_id}/page"): "viewer",
    ("POST", "/v1/agui"): "operator",
    ("POST", "/v1/agents/{name}/agui"): "operator",
    ("GET", "/v1/agents/{name}/a2a/.well-known/agent-card.json"): "viewer",
    ("POST", "/v1/agents/{name}/a2a"): "operator",
    ("GET", "/.well-known/agent-card.json"): "viewer",
}
RANK = {"viewer": 0, "operator": 1, "admin": 2}
ROLES = ("viewer", "operator", "admin")


def _table() -> list[tuple[str, str]]:
    return [(m, r.path) for r in ROUTES if isinstance(r, Route) for m in sorted(r.methods or ()) if m != "HEAD"]


def _users(tmp_path: Path) -> tuple[UserBook, dict[str, str]]:
    book = UserBook(users_path_for(tmp_path / "store.db"))
    tokens = {
        "vera": book.add("vera", "viewer"),
        "otto": book.add("otto", "operator"),
        "olga": book.add("olga", "operator"),
        "ada": book.add("ada", "admin"),
    }
    return book, tokens


def _as(served: Served, token: str) -> httpx2.Client:
    return served.client(headers={"authorization": f"Bearer {token}"})


def test_the_expected_table_is_the_route_table() -> None:
    assert sorted(_table()) == sorted(EXPECTED), "a route was added or removed: give it a role here and in access.py"


def test_each_role_on_each_route(tmp_path: Path) -> None:
    book, tokens = _users(tmp_path)
    who = {"viewer": tokens["vera"], "operator": tokens["otto"], "admin": tokens["ada"]}
    with serve(tmp_path, users=book) as served:
        for role in ROLES:
            with _as(served, who[role]) as client:
                for method, path in _table():
                    url = re.sub(r"\{[a-z_]+\}", "nothing", path)
                    if path == "/page/{name}":
                        url = "/page/page.js"
                    reply = client.request(method, url, json={} if method == "POST" else None)
                    needed = EXPECTED[(method, path)]
                    # A run or session that does not exist is no one's: an operator may try it (404).
                    floor = "operator" if needed == "own" else needed
                    if RANK[role] >= RANK[floor]:
                        assert reply.status_code != 403, (role, method, path, reply.text)
                    else:
                        assert reply.status_code == 403, (role, method, path, reply.status_code)
                        error = reply.json()["error"]
                        assert error["role"] == floor and floor in error["message"], (role, method, path, error)
        # A viewer gets 403 on every writing route, whichever it is.
        with _as(served, tokens["vera"]) as client:
            for method, path in _table():
                if method != "GET":
                    url = re.sub(r"\{[a-z_]+\}", "nothing", path)
                    assert client.request(method, url, json={}).status_code == 403, (method, path)
        with served.client() as anonymous, _as(served, "not-a-token") as stranger:
            assert anonymous.get("/v1/runs").status_code == 401
            assert stranger.get("/v1/runs").status_code == 401
            assert stranger.get("/", params={"token": "not-a-token"}).status_code == 401
        with _as(served, tokens["otto"]) as client:
            info = client.get("/v1/info").json()
            assert (info["user"], info["role"], info["auth"]) == ("otto", "operator", True)


def _events(client: httpx2.Client, run_id: str, until: str) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    with client.stream("GET", f"/v1/runs/{run_id}/events", params={"format": "seamline"}) as response:
        assert response.status_code == 200
        for frame in sse_frames(response.iter_lines()):
            seen.append(json.loads(frame["data"]))
            if seen[-1]["type"] == until:
                break
    return seen


def test_an_operator_answers_only_its_own_runs_requests(tmp_path: Path) -> None:
    book, tokens = _users(tmp_path)
    with serve(tmp_path, users=book) as served:
        second = json.loads(json.dumps(TOOL_TURN).replace("call-w", "call-x").replace("hello.txt", "other.txt"))
        script = served.script("tool", TOOL_TURN + second)
        with _as(served, tokens["otto"]) as otto, _as(served, tokens["olga"]) as olga:
            with _as(served, tokens["vera"]) as vera:
                created = otto.post("/v1/sessions", json={"provider": "scripted", "options": {"script": script}})
                assert created.status_code == 201, created.text
                assert created.json()["metadata"]["started_by"] == "otto"
                session_id = created.json()["id"]
                run_id = otto.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "write"}).json()["id"]
                asked = _events(otto, run_id, "permission_request")[-1]
                answer = f"/v1/runs/{run_id}/permissions/{asked['request_id']}"
                refused = olga.post(answer, json={"decision": "allow"})
                assert refused.status_code == 403
                assert refused.json()["error"]["role"] == "admin" and "otto" in refused.json()["error"]["message"]
                assert olga.post(f"/v1/runs/{run_id}/cancel").status_code == 403
                assert vera.post(answer, json={"decision": "allow"}).json()["error"]["role"] == "operator"
                summary = vera.get(f"/v1/runs/{run_id}").json()
                assert summary["status"] == "running" and summary["started_by"] == "otto"
                assert otto.post(answer, json={"decision": "allow"}).status_code == 200
                decision = [e for e in _events(otto, run_id, "complete") if e["type"] == "permission_decision"]
                assert [(d["decision"], d["by"]) for d in decision] == [("allow", "otto")]
                assert (served.workspace / "hello.txt").read_text() == "hi\n"
            # An admin answers anyone's: a second run of otto's, answered by ada.
            with _as(served, tokens["ada"]) as ada:
                again = otto.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "again"}).json()["id"]
                asked = _events(ada, again, "permission_request")[-1]
                reply = ada.post(f"/v1/runs/{again}/permissions/{asked['request_id']}", json={"decision": "deny"})
                assert reply.status_code == 200
                decision = [e for e in _events(ada, again, "complete") if e["type"] == "permission_decision"]
                assert [(d["decision"], d["by"]) for d in decision] == [("deny", "ada")]
                assert not (served.workspace / "other.txt").exists()
    # The store's event log keeps who answered each request.
    kept = SQLiteStore(tmp_path / "store.db")
    try:
        events = [json.loads(row.payload) for row in kept.raw_rows(session_id) if row.source == "event"]
        logged = [e for e in events if e["type"] == "permission_decision"]
    finally:
        kept.close()
    assert [(e["decision"], e["by"]) for e in logged] == [("allow", "otto"), ("deny", "ada")]


def test_a_users_daily_budget_refuses_its_next_run(tmp_path: Path) -> None:
    book = UserBook(users_path_for(tmp_path / "store.db"))
    token = book.add("penny", "operator", budget_usd_per_day=0.001)
    costly = [{"text": "done", "usage": {"input_tokens": 10, "output_tokens": 2, "cost_usd": 0.002}}] * 2
    with serve(tmp_path, users=book) as served, _as(served, token) as client:
        body = {"provider": "scripted", "options": {"script": served.script("costly", costly)}}
        session_id = client.post("/v1/sessions", json=body).json()["id"]
        first = client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "one"}).json()["id"]
        _events(client, first, "complete")
        assert client.get(f"/v1/runs/{first}").json()["cost_usd"] == pytest.approx(0.002)
        refused = client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "two"})
        assert refused.status_code == 400
        assert refused.json()["error"]["kind"] == "budget" and "penny" in refused.json()["error"]["message"]


def test_tokens_are_shown_once_and_stored_hashed(
    tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]
) -> None:
    store = tmp_path / "s.db"
    made = subprocess.run(
        [*seamline_cmd, "users", "--store", str(store), "add", "ana", "--role", "operator"],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert len(token) >= 40
    kept = users_path_for(store).read_bytes()
    assert token.encode() not in kept
    assert hashlib.sha256(token.encode()).hexdigest().encode() in kept
    assert users_path_for(store).stat().st_mode & 0o077 == 0
    listed = subprocess.run(
        [*seamline_cmd, "users", "--store", str(store), "list"], env=cli_env, capture_output=True, text=True, timeout=60
    )
    assert listed.stdout.splitlines() == ["ana\toperator"] and token not in listed.stdout
    assert UserBook(users_path_for(store)).authenticate(token) is not None
    # seamline serve finds the users file beside its store and takes the token.
    command = [*seamline_cmd, "serve", "--port", "0", "--store", str(store), "--workspace", str(tmp_path)]
    proc = subprocess.Popen(command, env=cli_env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        found = re.search(r"serving (http://127\.0\.0\.1:\d+)/", _line(proc, time.monotonic() + 60))
        assert found
        with httpx2.Client(base_url=found.group(1), timeout=20) as client:
            assert client.get("/v1/info").status_code == 401
            info = client.get("/v1/info", headers={"authorization": f"Bearer {token}"}).json()
            assert (info["user"], info["role"]) == ("ana", "operator")
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    gone = subprocess.run(
        [*seamline_cmd, "users", "--store", str(store), "remove", "ana"], env=cli_env, capture_output=True, timeout=60
    )
    assert gone.returncode == 0
    assert UserBook(users_path_for(store)).authenticate(token) is None


def test_watch_url_meets_the_roles(tmp_path: Path) -> None:
    """`seamline watch --url` reads as any user; its approve key is refused to a viewer and
    to another operator, with the role that would be needed."""
    from seamline.cli.watch_sources import ActionRefused, ServerSource

    book, tokens = _users(tmp_path)
    with serve(tmp_path, users=book) as served, _as(served, tokens["otto"]) as otto:
        body = {"provider": "scripted", "options": {"script": served.script("tool", TOOL_TURN)}}
        session_id = otto.post("/v1/sessions", json=body).json()["id"]
        run_id = otto.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "write"}).json()["id"]
        _events(otto, run_id, "permission_request")

        async def check() -> None:
            for name, needed in (("vera", "operator"), ("olga", "admin")):
                source = ServerSource(served.base, token=tokens[name])
                try:
                    row = next(r for r in await source.rows(10) if r["run_id"] == run_id)
                    assert row["pending_approvals"] == 1
                    with pytest.raises(ActionRefused, match=rf"^403: .*needs (the role )?{needed}"):
                        await source.answer(row, "allow")
                finally:
                    await source.close()
            source = ServerSource(served.base, token=tokens["otto"])
            try:
                row = next(r for r in await source.rows(10) if r["run_id"] == run_id)
                assert (await source.answer(row, "allow")).startswith("allowed write_file")
            finally:
                await source.close()

        asyncio.run(check())
        decision = [e for e in _events(otto, run_id, "complete") if e["type"] == "permission_decision"]
        assert [d["by"] for d in decision] == ["otto"]
