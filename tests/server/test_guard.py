"""Bad input and the gate: malformed JSON, unknown ids, wrong token, wrong Host or
Origin, oversized bodies, a reader that never reads. Each is a clear HTTP error (or
bounded buffering), and nothing recorded is lost."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

pytest.importorskip("ag_ui")
pytest.importorskip("uvicorn")

from tests.server.harness import serve, sse_frames


def _error(reply: object, status: int, kind: str) -> str:
    assert reply.status_code == status, reply.text  # type: ignore[attr-defined]
    body = reply.json()  # type: ignore[attr-defined]
    assert body["error"]["kind"] == kind
    assert body["error"]["message"]
    return str(body["error"]["message"])


def test_bad_input_is_a_clear_error_and_loses_nothing(tmp_path: Path) -> None:
    with serve(tmp_path, max_body=4096) as served, served.client() as client:
        created = client.post("/v1/sessions", json={"provider": "offline"})
        assert created.status_code == 201
        session_id = created.json()["id"]
        before = client.get(f"/v1/sessions/{session_id}").json()
        headers = {"content-type": "application/json"}
        message = _error(client.post("/v1/sessions", content=b"{not json", headers=headers), 400, "invalid_request")
        assert "malformed JSON" in message
        not_utf8 = client.post("/v1/sessions", content=b'{"provider": "\x80"}', headers=headers)
        assert "not UTF-8" in _error(not_utf8, 400, "invalid_request")
        _error(client.post("/v1/sessions", json={"provider": 7}), 400, "invalid_request")
        _error(client.post("/v1/sessions", json={"bogus": True}), 400, "invalid_request")
        assert "unknown provider" in _error(
            client.post("/v1/sessions", json={"provider": "nope"}), 400, "invalid_request"
        )
        _error(
            client.post("/v1/sessions", content=b"provider=offline", headers={"content-type": "text/plain"}),
            400,
            "invalid_request",
        )
        _error(client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "  "}), 400, "invalid_request")
        _error(client.get("/v1/sessions/0000000000unknown"), 404, "not_found")
        _error(client.post("/v1/sessions/0000000000unknown/runs", json={"prompt": "hi"}), 404, "not_found")
        _error(client.get("/v1/runs/nope"), 404, "not_found")
        _error(client.get("/v1/runs/nope/events"), 404, "not_found")
        _error(client.post("/v1/runs/nope/permissions/x", json={"decision": "allow"}), 404, "not_found")
        _error(client.get("/v1/no-such-route"), 404, "not_found")
        _error(client.put("/v1/sessions"), 405, "invalid_request")
        big = json.dumps({"provider": "offline", "metadata": {"pad": "x" * 10_000}})
        _error(client.post("/v1/sessions", content=big, headers=headers), 413, "invalid_request")

        def chunks():  # no Content-Length: the limit applies while the body is read
            for _ in range(10):
                yield b" " * 1000

        _error(client.post("/v1/sessions", content=chunks(), headers=headers), 413, "invalid_request")
        after = client.get(f"/v1/sessions/{session_id}").json()
        assert after == before
        assert [s["id"] for s in client.get("/v1/sessions").json()["sessions"]] == [session_id]


def test_token_host_and_origin(tmp_path: Path) -> None:
    with serve(tmp_path, token="s3cret") as served:
        with served.client() as anonymous:
            assert "bearer token" in _error(anonymous.get("/v1/info"), 401, "auth")
            _error(anonymous.get("/"), 401, "auth")
        with served.client(headers={"authorization": "Bearer wrong"}) as wrong:
            _error(wrong.get("/v1/sessions"), 401, "auth")
        with served.client(headers={"authorization": "Bearer s3cret"}) as good:
            assert good.get("/v1/info").json()["auth"] is True
            _error(good.get("/v1/info", headers={"host": "evil.example:8765"}), 403, "permission")
            _error(good.post("/v1/sessions", json={}, headers={"origin": "http://evil.example"}), 403, "permission")
            assert good.get("/v1/info", headers={"origin": served.base}).status_code == 200
        with served.client(follow_redirects=False) as browser:
            login = browser.get("/", params={"token": "s3cret"})
            assert login.status_code == 303 and "HttpOnly" in login.headers["set-cookie"]
            assert browser.get("/").status_code == 200  # the cookie now carries the token
            _error(browser.get("/", params={"token": "nope"}), 401, "auth")


def test_a_reader_that_never_reads_is_held_by_backpressure(tmp_path: Path) -> None:
    chunk = "y" * 1000
    script = [{"deltas": [chunk] * 6000}]  # about 6 MB of events, past the kernel's socket buffers
    with serve(tmp_path) as served, served.client() as client:
        path = served.script("big", script)
        session_id = client.post("/v1/sessions", json={"provider": "scripted", "options": {"script": path}}).json()[
            "id"
        ]
        run_id = client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "go"}).json()["id"]
        stuck = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
            stuck.connect(("127.0.0.1", int(served.base.rsplit(":", 1)[1])))
            host = served.base.removeprefix("http://")
            stuck.sendall(f"GET /v1/runs/{run_id}/events?format=seamline HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            # Another reader follows the run to its end: the stuck one did not hold it up.
            with client.stream("GET", f"/v1/runs/{run_id}/events", params={"format": "seamline"}) as response:
                frames = list(sse_frames(response.iter_lines()))
            assert frames[-1]["event"] == "complete"
            assert client.get(f"/v1/runs/{run_id}").json()["status"] == "completed"
            buffered = [
                conn.transport.get_write_buffer_size()
                for conn in served.server.server_state.connections
                if conn.transport is not None and not conn.transport.is_closing()
            ]
            # What waits for the stuck reader is bounded by the transport's high-water mark,
            # not by the run's 6 MB.
            assert buffered and max(buffered) < 512 * 1024
            # ... and the stuck stream is paused there, waiting for the reader.
            assert any(conn.flow.write_paused for conn in served.server.server_state.connections)
        finally:
            stuck.close()
        assert client.get("/v1/info").status_code == 200


def test_a_refused_provider_is_403_not_a_server_error(tmp_path: Path) -> None:
    # The test suite blocks real providers: opening one is refused, and says so.
    with serve(tmp_path) as served, served.client() as client:
        reply = client.post("/v1/sessions", json={"provider": "anthropic"})
        assert "would call a real backend" in _error(reply, 403, "permission")


REBOUND_NAMES = (
    "127.0.0.1.evil.example",
    "127.evil.example",
    "127.0.0.1.nip.io",
    "[::1].evil.example",
    "[::1]evil",
    "localhost.evil.example",
    "evil.example",
)


@pytest.mark.parametrize("name", REBOUND_NAMES)
def test_a_rebound_dns_name_is_refused_as_host_and_as_origin(tmp_path: Path, name: str) -> None:
    # A page on a name the attacker points at 127.0.0.1 is same-origin for the browser:
    # only comparing parsed addresses and exact names keeps it out (no token needed here).
    with serve(tmp_path) as served, served.client() as client:
        port = served.base.rsplit(":", 1)[1]
        reply = client.post("/v1/sessions", json={}, headers={"host": f"{name}:{port}"})
        assert "DNS rebinding" in _error(reply, 403, "permission")
        reply = client.post("/v1/sessions", json={}, headers={"origin": f"http://{name}:{port}"})
        assert "cross-site" in _error(reply, 403, "permission")
        assert client.get("/v1/sessions").json()["sessions"] == []


def test_loopback_addresses_and_allowed_names_are_served(tmp_path: Path) -> None:
    with serve(tmp_path, hosts=("box.lan",)) as served, served.client() as client:
        port = served.base.rsplit(":", 1)[1]
        for host in ("127.0.0.1", "127.0.0.2", "localhost", "[::1]", "[0:0:0:0:0:0:0:1]", "box.lan", "BOX.lan"):
            assert client.get("/v1/info", headers={"host": f"{host}:{port}"}).status_code == 200, host
            both = {"host": f"{host}:{port}", "origin": f"http://{host}:{port}"}
            assert client.get("/v1/info", headers=both).status_code == 200, host
        for bad in ("", ":80", "127.0.0.1:x", "[::1", "[::1]:", "box.lan.evil.example"):
            assert client.get("/v1/info", headers={"host": bad}).status_code == 403, bad


def test_is_loopback_parses_addresses() -> None:
    from seamline.server.guard import is_loopback

    for host in ("127.evil.example", "127.0.0.1.evil.example", "[::1].evil", "0.0.0.0", "::", "10.0.0.1", "box"):
        assert not is_loopback(host), host
    for host in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LOCALHOST"):
        assert is_loopback(host), host


def test_a_bad_last_event_id_is_400_in_both_formats(tmp_path: Path) -> None:
    with serve(tmp_path) as served, served.client() as client:
        session_id = client.post("/v1/sessions", json={"provider": "offline"}).json()["id"]
        run_id = client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "hi"}).json()["id"]
        for fmt, bads in (("agui", ("abc", "1.x", "-1", "1.-1", "9" * 30)), ("seamline", ("abc", "-1", "9" * 30))):
            for bad in bads:
                reply = client.get(f"/v1/runs/{run_id}/events", params={"format": fmt}, headers={"last-event-id": bad})
                assert "Last-Event-ID" in _error(reply, 400, "invalid_request"), (fmt, bad)
        assert client.get("/v1/info").status_code == 200


def test_a_negative_budget_is_400(tmp_path: Path) -> None:
    with serve(tmp_path) as served, served.client() as client:
        session_id = client.post("/v1/sessions", json={"provider": "offline"}).json()["id"]
        reply = client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "hi", "budget_usd": -1})
        assert "budget_usd" in _error(reply, 400, "invalid_request")
        reply = client.post("/v1/pipelines/single/runs", json={"prompt": "hi", "budget_usd": -0.5})
        assert "budget_usd" in _error(reply, 400, "invalid_request")
        assert client.get("/v1/runs").json()["runs"] == []


def test_metadata_too_deep_or_too_big_is_400_and_not_stored(tmp_path: Path) -> None:
    headers = {"content-type": "application/json"}
    with serve(tmp_path, max_body=4_000_000) as served, served.client() as client:
        for depth in (33, 500, 200_000):
            body = '{"provider": "offline", "metadata": ' + '{"a": ' * depth + "1" + "}" * depth + "}"
            reply = client.post("/v1/sessions", content=body, headers=headers)
            assert reply.status_code == 400, (depth, reply.status_code)
        big = {"provider": "offline", "metadata": {"pad": "x" * 70_000}}
        assert "metadata" in _error(client.post("/v1/sessions", json=big), 400, "invalid_request")
        fine = {"provider": "offline", "metadata": {"nested": [[{"a": 1}]] * 3}}
        assert client.post("/v1/sessions", json=fine).status_code == 201
        listed = client.get("/v1/sessions")
        assert listed.status_code == 200 and len(listed.json()["sessions"]) == 1


def test_a_listing_survives_a_row_it_cannot_read(
    tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]
) -> None:
    import sqlite3
    import subprocess

    with serve(tmp_path) as served, served.client() as client:
        good = client.post("/v1/sessions", json={"provider": "offline"}).json()["id"]
        served.store.flush()
        deep = '{"a": ' * 600 + "1" + "}" * 600
        with sqlite3.connect(tmp_path / "store.db") as db:
            db.execute(
                "INSERT INTO sessions (id, provider, model, workspace, mode, status, metadata, created_at, updated_at)"
                " SELECT 'bad0000000000001', provider, model, workspace, mode, status, '{not json', created_at,"
                " updated_at FROM sessions WHERE id = ?",
                (good,),
            )
            db.execute(
                "INSERT INTO sessions (id, provider, model, workspace, mode, status, metadata, created_at, updated_at)"
                " SELECT 'bad0000000000002', provider, model, workspace, mode, status, ?, created_at,"
                " updated_at FROM sessions WHERE id = ?",
                (deep, good),
            )
        listed = client.get("/v1/sessions")
        assert listed.status_code == 200, listed.text
        rows = {row["id"]: row for row in listed.json()["sessions"]}
        assert set(rows) == {good, "bad0000000000001", "bad0000000000002"}
        assert "unreadable" in rows["bad0000000000001"]["metadata"]
        assert "unreadable" in rows["bad0000000000002"]["metadata"]
        assert rows[good]["metadata"] == {"surface": "serve"}
    for extra in ([], ["--json"]):
        done = subprocess.run(
            # --all: the good session never ran a turn, so it is not_started once the server closed it
            [*seamline_cmd, "sessions", "list", "--all", "--store", str(tmp_path / "store.db"), *extra],
            env=cli_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert "bad0000000000001"[:12] in done.stdout and good[:12] in done.stdout
