"""The ``acp`` provider against each real ACP agent: claude-agent-acp 0.23.1, ``gemini --acp``
(Gemini CLI 0.61.0) and ``opencode acp`` (opencode-ai 1.18.33), each with its API traffic
pointed at a fake server on 127.0.0.1, on the cases every agent must get right: a tool
call with its arguments, an overloaded API (529; Gemini's is 503), a stream cut mid-way,
and a resume of a session id the agent does not know.

The agents are installed by ``bash scripts/system/45-acp-opencode.sh`` and
``bash scripts/system/40-agent-clis.sh``; a test that does not find one fails, naming them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from seamline.errors import InvalidRequest
from seamline.events import Complete, Error, Event, Text, ToolCall, ToolResult, Usage
from seamline.providers.acp.agent_process import running_agents
from seamline.providers.acp.provider import AcpProvider
from seamline.providers.opencode.provider import opencode_config
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.tools.approval import YesApproval
from seamline.transport.subprocess import group_members
from tests.fakes._http import FakeAPI
from tests.fixtures.acp_capture import _SOON, FAKES, FALLBACK, SCENARIOS, UNKNOWN_SESSION, _argv
from tests.providers.agent_cli_support import CliWorld, make_world, run_async
from tests.providers.test_acp_real import processes_in

pytestmark = pytest.mark.real
AGENTS = ("claude-acp", "gemini-acp", "opencode-acp")
SETUP = "bash scripts/system/45-acp-opencode.sh and bash scripts/system/40-agent-clis.sh"
TOOL = {"claude-acp": "Bash", "gemini-acp": "run_shell_command", "opencode-acp": "bash"}


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliWorld:
    w = make_world(tmp_path, monkeypatch)
    monkeypatch.setenv("IS_SANDBOX", "1")  # claude-agent-acp as root (CI)
    monkeypatch.setenv("CLAUDE_CODE_MAX_RETRIES", "0")
    gemini = w.home / ".gemini"
    gemini.mkdir()
    settings = {"security": {"auth": {"selectedType": "gemini-api-key"}}, "general": {"maxAttempts": 1}}
    (gemini / "settings.json").write_text(json.dumps(settings))
    return w


@contextmanager
def agent_against_fake(agent: str, scenario: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[AcpProvider]:
    with agent_and_fake(agent, SCENARIOS[scenario](agent), monkeypatch) as (provider, _):
        yield provider


@contextmanager
def agent_and_fake(
    agent: str, script: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[AcpProvider, FakeAPI]]:
    argv = _argv(agent)
    if not (Path(argv[0]).exists() and os.access(argv[0], os.X_OK)):
        pytest.fail(f"{argv[0]} is not installed; run: {SETUP}")
    with FAKES[agent](script, fallback=FALLBACK[agent]) as fake:
        if agent == "claude-acp":
            monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.root_url)
        elif agent == "gemini-acp":
            monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", fake.root_url)
        else:
            config = opencode_config(base_url=fake.base_url, model="fake-model", api_key_env="OPENAI_API_KEY")
            monkeypatch.setenv("OPENCODE_CONFIG_CONTENT", json.dumps(config))
            for key in ("MODELS_FETCH", "AUTOUPDATE", "LSP_DOWNLOAD"):
                monkeypatch.setenv(f"OPENCODE_DISABLE_{key}", "1")
        # OpenCode retries a 5xx on its own; the turn timeout bounds a case that never ends.
        yield AcpProvider(options={"command": " ".join(argv), "turn_timeout": "90", "grace": "1"}), fake


async def one_turn(provider: AcpProvider, workspace: Path, prompt: str) -> list[Event]:
    session = await provider.open(workspace=workspace, approval=YesApproval(yes=True))
    pgid = session.state["acp_agent"].rpc.process.pgid
    try:
        events = [e async for e in session.send(prompt)]
    finally:
        await provider.close(session)
    assert group_members(pgid) == [] and running_agents() == []
    assert sum(isinstance(e, Complete) for e in events) == 1 and isinstance(events[-1], Complete)
    return events


@pytest.mark.parametrize("agent", AGENTS)
@run_async
async def test_a_tool_call_carries_its_name_and_arguments(
    agent: str, world: CliWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    with agent_against_fake(agent, "tools", monkeypatch) as provider:
        events = await one_turn(provider, world.workspace, "What is the secret word in notes.txt?")
    (call,) = [e for e in events if isinstance(e, ToolCall)]
    assert call.name == TOOL[agent]
    # Gemini sends no rawInput: its title is the command.
    assert call.arguments.get("command", call.arguments.get("title")) == "cat notes.txt", call
    (result,) = [e for e in events if isinstance(e, ToolResult)]
    assert result.call_id == call.call_id and not result.is_error
    assert [e.text for e in events if isinstance(e, Text)] == ["Let me look.", "The word is pelican."]
    assert any(isinstance(e, Usage) and e.output_tokens > 0 for e in events)
    final = events[-1]
    assert isinstance(final, Complete) and final.outcome == "completed" and final.text == "The word is pelican."
    assert processes_in(world.workspace) == []


@pytest.mark.parametrize("agent", AGENTS)
@run_async
async def test_an_overloaded_api_is_a_retryable_provider_error(
    agent: str, world: CliWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    with agent_against_fake(agent, "overloaded", monkeypatch) as provider:
        events = await one_turn(provider, world.workspace, "Say hello.")
    errors = [e for e in events if isinstance(e, Error)]
    assert [(e.kind, e.retryable) for e in errors] == [("provider", True)], errors
    assert isinstance(events[-1], Complete) and events[-1].outcome == "failed"


@pytest.mark.parametrize("agent", AGENTS)
@run_async
async def test_a_cut_stream_ends_the_turn_classified(
    agent: str, world: CliWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = SCENARIOS["cut"](agent)
    if agent == "opencode-acp":
        # OpenCode retries a failed attempt five times, backing off 2, 4, 8, 16 and 30 s, and a
        # cut stream's error carries no answer header to shorten that (a minute of waiting). So
        # its first five attempts get an overloaded answer that names 10 ms, and its sixth and
        # last the cut stream, which then ends the turn.
        script = [{"status": 529, "times": 5, "headers": _SOON}, {**script[0], "times": 1}]
    with agent_and_fake(agent, script, monkeypatch) as (provider, fake):
        events = await one_turn(provider, world.workspace, "Say hello.")
    assert agent != "opencode-acp" or fake.remaining == 0  # the cut answered OpenCode's last attempt
    final = events[-1]
    assert isinstance(final, Complete)
    errors = [e for e in events if isinstance(e, Error)]
    if agent == "claude-acp":
        # claude-agent-acp ends a cut stream as an ordinary end_turn with no text: nothing to classify.
        assert errors == [] and final.outcome == "completed" and final.text == ""
    else:
        assert [(e.kind, e.retryable) for e in errors] == [("transport", True)], errors
        assert final.outcome == "failed"


@pytest.mark.parametrize("agent", AGENTS)
@run_async
async def test_resume_of_an_unknown_session_id_is_an_invalid_request(
    agent: str, world: CliWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLiteStore(tmp_path / "store.db")
    try:
        store.create_session("s-unknown", provider="acp", model=None, workspace=str(world.workspace))
        store.set_provider_session_id("s-unknown", UNKNOWN_SESSION)
        with agent_against_fake(agent, "resume_unknown", monkeypatch) as provider:
            with pytest.raises(InvalidRequest) as caught:
                await provider.resume("s-unknown", store=store)
    finally:
        store.close()
    assert UNKNOWN_SESSION in caught.value.message or "No previous sessions" in caught.value.message
    assert running_agents() == [] and processes_in(world.workspace) == []


@run_async
async def test_gemini_is_authenticated_when_its_session_asks(world: CliWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    # No auth type chosen and no key in the agent's environment: session/new answers
    # "Authentication required" until `authenticate` brings the key (from api_key_env).
    (world.home / ".gemini" / "settings.json").write_text(json.dumps({"general": {"maxAttempts": 1}}))
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_GEMINI_BASE_URL", raising=False)
    monkeypatch.setenv("SEAMLINE_TEST_GEMINI_KEY", "fake-gemini-key")
    argv = _argv("gemini-acp")
    if not os.access(argv[0], os.X_OK):
        pytest.fail(f"{argv[0]} is not installed; run: {SETUP}")
    # Without the gateway: through it (the gateway's URL and a placeholder in its environment)
    # gemini 0.61.0 opened the session without asking.
    options = {"command": " ".join(argv), "api_key_env": "SEAMLINE_TEST_GEMINI_KEY", "grace": "1", "gateway": "off"}
    provider = AcpProvider(options=options)
    session = await provider.open(workspace=world.workspace)  # no prompt: the endpoint would be Google's
    try:
        assert session.provider_session_id and session.state["acp_agent"].authenticated
    finally:
        await provider.close(session)
    assert running_agents() == [] and processes_in(world.workspace) == []


@pytest.mark.parametrize("agent", AGENTS)
@run_async
async def test_one_agent_process_serves_every_turn_of_a_session(
    agent: str, world: CliWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An ACP session stays warm: the agent process (and its connection) started for the
    # session's first turn serves the next, which carries the first turn's context.
    script: list[dict[str, Any]] = [{"text": "Noted: the bird is heron."}, {"text": "It was heron."}]
    with agent_and_fake(agent, script, monkeypatch) as (provider, fake):
        session = await provider.open(workspace=world.workspace, approval=YesApproval(yes=True))
        process = session.state["acp_agent"].rpc.process
        try:
            first = [e async for e in session.send("Remember the bird: heron.")]
            assert session.state["acp_agent"].rpc.process is process and process.returncode is None
            second = [e async for e in session.send("Which bird?")]
            assert session.state["acp_agent"].rpc.process is process
        finally:
            await provider.close(session)
        sent = [json.dumps(r.body) for r in fake.model_requests()]
    assert isinstance(first[-1], Complete) and first[-1].outcome == "completed"
    assert isinstance(second[-1], Complete) and second[-1].text == "It was heron."
    answered = [body for body in sent if "Which bird?" in body]
    assert answered and "Noted: the bird is heron." in answered[-1]  # the second turn was sent the first
    assert group_members(process.pgid) == [] and running_agents() == []
