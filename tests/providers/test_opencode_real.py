"""The ``opencode`` provider against the real ``opencode serve`` (opencode-ai 1.18.33),
its model pointed at the fake OpenAI-compatible server on 127.0.0.1 (Chat Completions).

Installed by ``bash scripts/system/45-acp-opencode.sh``; a test that does not find it
fails, naming that command. OpenCode installs its ``@ai-sdk/openai-compatible`` plugin
with npm on first start in a fresh HOME (the npm registry is reachable in CI).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from seamline.events import Complete, Event, Session, TextDelta, Usage
from seamline.providers.opencode.provider import OpenCodeProvider
from seamline.providers.opencode.server import running_servers
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.tools.approval import YesApproval
from seamline.transport.subprocess import group_members
from tests.fakes._http import RecordedRequest
from tests.fakes.openai_api import FakeOpenAI
from tests.providers.agent_cli_support import ROOT, CliWorld, make_world, run_async
from tests.providers.test_acp_real import processes_in

pytestmark = pytest.mark.real
SETUP_COMMAND = "bash scripts/system/45-acp-opencode.sh"
OPENCODE_BIN = ROOT / ".tools" / "acp-opencode" / "node_modules" / ".bin" / "opencode"


def opencode_path() -> str:
    if not (OPENCODE_BIN.exists() and os.access(OPENCODE_BIN, os.X_OK)):
        pytest.fail(f"opencode is not installed at {OPENCODE_BIN}; run: {SETUP_COMMAND}")
    return str(OPENCODE_BIN)


class OpenCodeOpenAI(FakeOpenAI):
    """The fake OpenAI API; OpenCode's title request (no tools) gets the fallback."""

    def _take(self, request: RecordedRequest) -> dict[str, Any] | None:
        body = request.body if isinstance(request.body, dict) else {}
        if not body.get("tools"):
            return self.fallback or {"text": "A title"}
        return super()._take(request)

    def turn_requests(self) -> list[RecordedRequest]:
        return [r for r in self.model_requests() if isinstance(r.body, dict) and r.body.get("tools")]


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliWorld:
    return make_world(tmp_path, monkeypatch)


def test_seamline_run_completes_a_turn_with_tools_against_the_fake_model(world: CliWorld) -> None:
    opencode_path()
    notes = str(world.workspace / "notes.txt")
    script = [
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo hi-oc > out.txt", "description": "write"}}]},
        {"tool_calls": [{"name": "read", "arguments": {"filePath": notes}}]},
        {"text": "The word is pelican.", "usage": {"input_tokens": 300, "output_tokens": 7, "cache_read_tokens": 40}},
    ]
    with OpenCodeOpenAI(script, fallback={"text": "A title"}) as fake:
        env = dict(os.environ, OPENAI_BASE_URL=fake.base_url, PATH=f"{OPENCODE_BIN.parent}:{os.environ['PATH']}")
        argv = [
            sys.executable, "-m", "seamline", "run", "--provider", "opencode", "--json", "--yes",
            "--workspace", str(world.workspace), "What is the secret word?",
        ]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=150, cwd=ROOT, env=env, check=False)
        seen = fake.turn_requests()
        answered = len(fake.model_requests())
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "session" and kinds[-1] == "complete" and kinds.count("complete") == 1
    assert events[0]["provider_session_id"].startswith("ses_")
    calls = [e for e in events if e["type"] == "tool_call"]
    results = {e["call_id"]: e for e in events if e["type"] == "tool_result"}
    assert [c["name"] for c in calls] == ["bash", "read"]
    assert all(c["call_id"] in results and not results[c["call_id"]]["is_error"] for c in calls)
    assert "pelican" in results[calls[1]["call_id"]]["output"]
    assert (world.workspace / "out.txt").read_text() == "hi-oc\n"
    # OpenCode asked before running bash; the policy (--yes) answered.
    decision = next(e for e in events if e["type"] == "permission_decision")
    assert decision["decision"] == "allow" and "--yes" in decision["reason"]
    usage = [e for e in events if e["type"] == "usage"]
    # One figure per model request (the title's too), read from the wire by seamline's gateway.
    assert len(usage) == answered and usage[-1]["input_tokens"] == 300 and usage[-1]["cache_read_tokens"] == 40
    assert events[-1]["outcome"] == "completed" and events[-1]["text"] == "The word is pelican."
    # Chat Completions, the model we configured, and the tool results went back to the model.
    assert len(seen) == 3 and all(r.body["model"] == "gpt-4o-mini" for r in seen)
    assert "pelican" in json.dumps(seen[2].body["messages"])
    assert processes_in(world.workspace) == []  # `opencode serve` ended with the run


@run_async
async def test_abort_mid_turn_fork_and_shared_server(
    world: CliWorld, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    slow = {"chunks": [f"w{i} " for i in range(300)], "chunk_delay": 0.05}
    store = SQLiteStore(tmp_path / "store.db")
    with OpenCodeOpenAI(
        [{"text": "First answer."}, slow, {"text": "Forked answer."}], fallback={"text": "A title"}
    ) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        # Shared without the gateway (through it, each session has its own server and gateway).
        provider = OpenCodeProvider(options={"executable": opencode_path(), "gateway": "off"})
        session = await provider.open(workspace=world.workspace, store=store, approval=YesApproval())
        server = session.state["opencode_server"]
        pgid = server.process.pgid
        first = [e async for e in session.send("Say something")]
        assert isinstance(first[-1], Complete) and first[-1].outcome == "completed"
        assert first[-1].text == "First answer."
        # Abort mid-stream.
        events: list[Event] = []
        aborting: asyncio.Task[None] | None = None
        async for event in session.send("Count slowly"):
            events.append(event)
            if aborting is None and isinstance(event, TextDelta):
                aborting = asyncio.create_task(provider.abort(session))
        assert aborting is not None
        await aborting
        final = events[-1]
        assert isinstance(final, Complete) and final.outcome == "aborted"
        assert sum(isinstance(e, Complete) for e in events) == 1
        # A native fork on the same server: a new OpenCode session with the history.
        forked = await provider.fork(session.session_id, store=store, approval=YesApproval())
        assert forked.state["opencode_server"] is server and server.refs == 2
        assert forked.provider_session_id and forked.provider_session_id != session.provider_session_id
        later = [e async for e in forked.send("And now?")]
        assert isinstance(later[-1], Complete) and later[-1].text == "Forked answer."
        starts = [e for e in later if isinstance(e, Session)]
        assert starts[0].provider_session_id == forked.provider_session_id
        assert any(isinstance(e, Usage) for e in later)
        await provider.close(session)
        assert group_members(pgid)  # still serving the fork
        await provider.close(forked)
        seen = fake.turn_requests()
    assert group_members(pgid) == []
    assert running_servers() == []
    assert "Say something" in json.dumps(seen[-1].body["messages"])  # the fork carried the history
    store.close()


@run_async
async def test_native_resume_through_the_store(
    world: CliWorld, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    store = SQLiteStore(tmp_path / "store.db")
    with OpenCodeOpenAI([{"text": "Noted: plover."}, {"text": "It was plover."}], fallback={"text": "A title"}) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        provider = OpenCodeProvider(options={"executable": opencode_path()})
        session = await provider.open(workspace=world.workspace, store=store, approval=YesApproval())
        first = [e async for e in session.send("Remember plover")]
        assert isinstance(first[-1], Complete) and first[-1].outcome == "completed"
        psid = session.provider_session_id
        await provider.close(session)
        resumed = await provider.resume(session.session_id, store=store, approval=YesApproval())
        assert resumed.resumed == "native" and resumed.provider_session_id == psid
        second = [e async for e in resumed.send("Which bird?")]
        await provider.close(resumed)
        seen = fake.turn_requests()
    assert isinstance(second[-1], Complete) and second[-1].text == "It was plover."
    sent = json.dumps(seen[-1].body["messages"])
    assert "Remember plover" in sent and "Noted: plover." in sent and "Which bird?" in sent
    assert running_servers() == []
    store.close()
