"""Notifications from a real server to real receivers on 127.0.0.1: each receiver checks
the HMAC-SHA256 signature with its own secret; the first attempt of all is answered 503
(the notifier tries again), a receiver with the wrong secret refuses every one (401, not
retried), and the bodies carry the Slack and ntfy fields."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("ag_ui")

import httpx2

from seamline.server.notify import SIGNATURE_HEADER, Notifier
from seamline.server.users import UserBook, users_path_for
from tests.server.harness import TOOL_TURN, serve
from tests.server.test_cli import _line

WAIT = 30.0


@dataclass
class Receiver:
    url: str
    secret: str
    fail_first: int = 0
    accepted: list[dict[str, Any]] = field(default_factory=list)
    attempts: list[tuple[str, int]] = field(default_factory=list)  # (notification id, status answered)
    changed: threading.Condition = field(default_factory=threading.Condition)
    gate: threading.Event = field(default_factory=threading.Event)  # answers wait until it is set
    arrived: int = 0

    def wait_for(self, done: Callable[[], bool]) -> None:
        with self.changed:
            assert self.changed.wait_for(done, timeout=WAIT), (self.attempts, [b["event"] for b in self.accepted])


@contextmanager
def receiver(secret: str, *, fail_first: int = 0, held: bool = False) -> Iterator[Receiver]:
    state = Receiver(url="", secret=secret, fail_first=fail_first)
    if not held:
        state.gate.set()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers["content-length"]))
            with state.changed:
                state.arrived += 1
                state.changed.notify_all()
            state.gate.wait(WAIT)
            expected = "sha256=" + hmac.new(state.secret.encode(), raw, hashlib.sha256).hexdigest()
            body = json.loads(raw)
            with state.changed:
                if not hmac.compare_digest(self.headers.get(SIGNATURE_HEADER, ""), expected):
                    status = 401
                elif len(state.attempts) < state.fail_first:
                    status = 503
                else:
                    status = 204
                    state.accepted.append(body)
                state.attempts.append((body["id"], status))
                state.changed.notify_all()
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hook?topic=team-runs"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.gate.set()
        server.shutdown()
        server.server_close()
        thread.join(10)


def _events(state: Receiver) -> list[str]:
    return [b["event"] for b in state.accepted]


def test_signed_notifications_with_a_retry_and_a_bad_secret(tmp_path: Path) -> None:
    with receiver("s3cret", fail_first=1) as good, receiver("another secret") as wrong:
        notifier = Notifier([good.url, wrong.url], secret="s3cret", backoff=0.05)
        with serve(tmp_path, notifier=notifier) as served, served.client() as client:
            body = {"provider": "scripted", "options": {"script": served.script("tool", TOOL_TURN)}}
            session_id = client.post("/v1/sessions", json=body).json()["id"]
            run_id = client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "write"}).json()["id"]
            good.wait_for(lambda: "permission.requested" in _events(good))
            asked = good.accepted[0]
            assert asked["run"]["id"] == run_id and asked["details"]["tool"] == "write_file"
            request_id = asked["details"]["request_id"]
            assert client.post(f"/v1/runs/{run_id}/permissions/{request_id}", json={"decision": "allow"}).is_success
            good.wait_for(lambda: "run.finished" in _events(good))
        # The first attempt was refused (503) and the same notification came again.
        assert good.attempts[0][1] == 503 and good.attempts[1] == (good.attempts[0][0], 204)
        assert _events(good) == ["permission.requested", "run.finished"]
        finished = good.accepted[1]
        assert finished["run"]["status"] == "completed" and finished["run"]["id"] == run_id
        for sent in good.accepted:  # Slack's text; ntfy's title, message, topic
            assert sent["title"].startswith("seamline: ") and sent["message"]
            assert sent["text"] == f"*{sent['title']}*\n{sent['message']}"
            assert sent["topic"] == "team-runs"
        # The receiver with another secret refused both, each once (a 4xx is not retried).
        wrong.wait_for(lambda: len(wrong.attempts) == 2)
        assert [status for _, status in wrong.attempts] == [401, 401] and wrong.accepted == []
        assert len({notification for notification, _ in wrong.attempts}) == 2


def test_failed_runs_and_budgets_are_notified(tmp_path: Path) -> None:
    book = UserBook(users_path_for(tmp_path / "store.db"))
    token = book.add("penny", "operator", budget_usd_per_day=0.001)
    failing = [{"error": {"kind": "provider", "message": "the model is down"}}]
    costly = [{"text": "done", "usage": {"input_tokens": 10, "output_tokens": 2, "cost_usd": 0.002}}]
    with receiver("s3cret") as got:
        notifier = Notifier([got.url], secret="s3cret", backoff=0.05)
        with (
            serve(tmp_path, notifier=notifier, users=book) as served,
            served.client(headers={"authorization": f"Bearer {token}"}) as client,
        ):
            bad = {"provider": "scripted", "options": {"script": served.script("failing", failing)}}
            session_id = client.post("/v1/sessions", json=bad).json()["id"]
            failed = client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "go"}).json()["id"]
            got.wait_for(lambda: "run.failed" in _events(got))
            good = {"provider": "scripted", "options": {"script": served.script("costly", costly)}}
            session_id = client.post("/v1/sessions", json=good).json()["id"]
            spent = client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "go"}).json()["id"]
            got.wait_for(lambda: len(got.accepted) == 2)
            refused = client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "more"})
            assert refused.status_code == 400
            got.wait_for(lambda: len(got.accepted) == 3)
    first, second, third = got.accepted
    assert first["event"] == "run.failed" and first["run"]["id"] == failed and first["run"]["started_by"] == "penny"
    # The costly run went past the cap it was given (what was left of penny's day).
    assert second["run"]["id"] == spent and second["event"] in ("run.finished", "budget.reached")
    assert third["event"] == "budget.reached" and third["run"] is None
    assert third["details"] == {"user": "penny", "budget_usd_per_day": 0.001}


def test_a_receiver_that_hangs_holds_no_run(tmp_path: Path) -> None:
    """A receiver that has not answered yet: the run still ends, and the next run starts."""
    with receiver("s3cret", held=True) as slow:
        # A timeout past the receiver's hold: a delivery that blocked the loop would block it until then.
        notifier = Notifier([slow.url], secret="s3cret", backoff=0.05, timeout=4 * WAIT)
        quick = [{"text": "one"}, {"text": "two"}]
        with serve(tmp_path, notifier=notifier) as served, served.client() as client:
            body = {"provider": "scripted", "options": {"script": served.script("quick", quick)}}
            session_id = client.post("/v1/sessions", json=body).json()["id"]
            for prompt in ("first", "second"):
                run_id = client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": prompt}).json()["id"]
                ended = client.get(f"/v1/runs/{run_id}/events", params={"format": "seamline", "stream": "ndjson"})
                assert json.loads(ended.text.splitlines()[-1])["event"]["outcome"] == "completed"
            slow.wait_for(lambda: slow.arrived >= 1)
            assert slow.accepted == []  # both runs ended while the receiver held its answer
            slow.gate.set()
            slow.wait_for(lambda: len(slow.accepted) == 2)
        assert _events(slow) == ["run.finished", "run.finished"]


def test_serve_notify_flags(tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]) -> None:
    """`seamline serve --notify URL` with the secret from $SEAMLINE_NOTIFY_SECRET."""
    with receiver("from-env") as got:
        command = [
            *seamline_cmd,
            "serve",
            "--port",
            "0",
            "--store",
            str(tmp_path / "s.db"),
            "--workspace",
            str(tmp_path),
        ]
        command += ["--notify", got.url]
        env = {**cli_env, "SEAMLINE_NOTIFY_SECRET": "from-env"}
        proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            found = re.search(r"serving (http://127\.0\.0\.1:\d+)/", _line(proc, time.monotonic() + 60))
            assert found
            with httpx2.Client(base_url=found.group(1), timeout=20) as client:
                session_id = client.post("/v1/sessions", json={"provider": "offline"}).json()["id"]
                run_id = client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "hi"}).json()["id"]
                got.wait_for(lambda: "run.finished" in _events(got))
            os.killpg(proc.pid, signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()
    assert [(b["event"], b["run"]["id"]) for b in got.accepted] == [("run.finished", run_id)]
