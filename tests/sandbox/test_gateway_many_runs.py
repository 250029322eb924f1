"""Twenty runs of real agent CLIs at once (Codex, Claude Code and the Gemini CLI from npm, no
envelope) through seamline's gateway with ``max_concurrent_requests=4``, against one fake
API on 127.0.0.1 that serves all three vendors and refuses (a ``500``, counted) every request
that arrives while four are already in its hands: every run completes, the fake never held
more than four at once, and it held more than one (the limit is a limit, not a queue of one).

The fake holds each request until four are in its hands (or a moment has passed, for the
last few), so that a fifth let through by the gateway would be seen, whatever the load.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from seamline import Agent
from seamline.runner import RunResult
from tests.fakes import _http as fake_http
from tests.fakes._http import FakeAPI, JsonReply, RecordedRequest, StreamReply
from tests.fakes.gemini_api import FakeGemini
from tests.fakes.openai_api import FakeOpenAI
from tests.providers.agent_cli_support import AgentAnthropic, cli_path, make_gemini_world

pytestmark = pytest.mark.real
LIMIT = 4
HOLD_S = 2.0
"""The longest the fake holds a request waiting for the others (only the last few wait it out)."""
ONE = {"input_tokens": 200, "output_tokens": 10, "cache_read_tokens": 0, "cache_write_tokens": 0}
DONE = {"text": "Done.", "usage": ONE}
# 12 Codex (a native program, the cheapest to start), 4 Claude Code, 4 Gemini CLI.
FLEET = ["codex"] * 12 + ["claude-code"] * 4 + ["gemini-cli"] * 4


class ThreeAPIs(FakeAPI):
    """The fake Anthropic, OpenAI and Gemini APIs behind one port (one upstream, as the
    gateway counts them), each request answered by the vendor's fake it is shaped for; and
    a ceiling of :data:`LIMIT` requests in hand at once, past which a request is refused."""

    base_path = "/v1"

    def __init__(self) -> None:
        super().__init__()
        self.anthropic = AgentAnthropic([DONE] * 8, fallback={**DONE, "text": '{"title": "side"}'})
        self.openai = FakeOpenAI(fallback=DONE)
        self.gemini = FakeGemini(fallback=DONE)
        self.held = threading.Condition()
        self.now = 0
        self.most = 0
        self.refused: list[str] = []

    def start(self) -> ThreeAPIs:
        super().start()
        assert self._server is not None
        self._server.RequestHandlerClass = _CountingHandler  # before any request: none is sent yet
        return self

    def vendor_of(self, request: RecordedRequest) -> FakeAPI:
        if request.path.startswith("/v1beta") or "x-goog-api-key" in request.headers:
            return self.gemini
        if request.path.startswith("/v1/messages") or "x-api-key" in request.headers:
            return self.anthropic
        return self.openai

    def is_model_path(self, path: str) -> bool:
        return any(fake.is_model_path(path) for fake in (self.anthropic, self.openai, self.gemini))

    def _reply_for(self, request: RecordedRequest) -> tuple[JsonReply | StreamReply, float]:
        return self.vendor_of(request)._reply_for(request)


class _CountingHandler(fake_http._Handler):
    """Counts a request as in hand from its arrival until its answer starts: that span lies
    inside the one the gateway holds the request's slot for (taken before it connects, given
    back once the whole answer is back), so a count past the limit is the gateway's doing,
    never a race of this server's threads."""

    server: Any
    _in_hand = False

    def _dispatch(self) -> None:
        api: ThreeAPIs = self.server.api
        with api.held:
            api.now += 1
            self._in_hand = True
            api.most = max(api.most, api.now)
            over = api.now > LIMIT
            if over:
                api.refused.append(f"{self.command} {self.path}")
            api.held.notify_all()
            # Held until the others arrive: a request let through past the limit meets four.
            api.held.wait_for(lambda: api.now >= LIMIT, timeout=HOLD_S)
        try:
            if over:
                self._refuse()
            else:
                super()._dispatch()
        finally:
            self._answering()

    def _answering(self) -> None:
        if self._in_hand:
            self._in_hand = False
            api: ThreeAPIs = self.server.api
            with api.held:
                api.now -= 1

    def _send_json(self, reply: JsonReply) -> None:
        self._answering()
        super()._send_json(reply)

    def _send_stream(self, reply: StreamReply, request: RecordedRequest) -> None:
        self._answering()
        super()._send_stream(reply, request)

    def _refuse(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self._answering()
        body = b'{"error": {"type": "api_error", "message": "more than 4 requests at once"}}'
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _options(provider: str, fake: ThreeAPIs) -> dict[str, str]:
    common = {"max_retries": "0", "turn_timeout": "600", "max_concurrent_requests": str(LIMIT)}
    if provider == "codex":
        return {
            **common,
            "executable": cli_path("codex"),
            "base_url": fake.base_url,
            "warm": "false",
            "codex_sandbox": "danger-full-access",  # Codex's own sandbox cannot nest here
        }
    if provider == "claude-code":
        return {**common, "executable": cli_path("claude"), "base_url": fake.root_url, "warm": "false"}
    return {**common, "executable": cli_path("gemini"), "base_url": fake.root_url}


MODELS = {"codex": "gpt-5", "claude-code": "claude-sonnet-4-5", "gemini-cli": "gemini-2.5-flash"}


def test_twenty_runs_at_once_never_hold_more_than_four_requests_at_the_api(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    world = make_gemini_world(tmp_path, monkeypatch, request)  # keys for all three, in seamline's env
    fake = ThreeAPIs().start()
    try:

        async def fleet() -> list[RunResult]:
            agents: list[Agent] = []
            for i, provider in enumerate(FLEET):
                workspace = world.workspace / f"run{i}"
                workspace.mkdir()
                agents.append(
                    Agent(
                        provider=provider,
                        model=MODELS[provider],
                        options=_options(provider, fake),
                        workspace=workspace,
                        store=tmp_path / f"store{i}.db",
                        yes=True,
                    )
                )
            return list(await asyncio.gather(*(agent.run("Say done.") for agent in agents)))

        results = asyncio.run(fleet())
        answered = len(fake.model_requests())
    finally:
        fake.stop()
    failed = [(i, FLEET[i], r.events[-3:]) for i, r in enumerate(results) if r.outcome != "completed"]
    assert not failed, (fake.most, failed)  # every run completed …
    assert fake.refused == [], fake.refused  # … none of their requests met four in flight …
    assert fake.most <= LIMIT, fake.most
    assert answered >= len(FLEET)
    assert fake.most > 1  # … and the requests did go four at a time, not one by one
