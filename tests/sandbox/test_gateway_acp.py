"""An ACP agent's model traffic through seamline's gateway (claude-agent-acp, the real program
from npm, against the fake Anthropic API on 127.0.0.1; real bubblewrap where the envelope is
asked for):

- the model's own shell reads ``env``, every ``/proc/*/environ`` it can and its home, and
  finds no trace of the real key; the fake API received the real key on every request;
- the ledger is what the fake API itself reported, summed, exactly;
- a budget worth two requests stops the turn after at most three, outcome ``budget``;
- an agent whose vendor seamline does not know says so (a ``raw`` note), never silently.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any, Literal

import pytest

from seamline import Agent
from seamline.events import Error, Raw, ToolResult, Usage
from seamline.providers.acp.agent_process import running_agents
from seamline.runner import RunResult
from seamline.sessions import open_store
from seamline.usage import price_usage
from tests.fakes._http import JsonReply, RecordedRequest, StreamReply, usage_of
from tests.fakes.gemini_api import FakeGemini
from tests.fixtures.acp_capture import ACP_BIN, CLI_BIN, SideAnthropic
from tests.providers.agent_cli_support import CliWorld, make_world

pytestmark = pytest.mark.real
Sandboxed = Literal["bwrap"] | None
AGENT = ACP_BIN / "claude-agent-acp"
MODEL = "claude-sonnet-4-5"  # what the fake answers with, so that the wire's usage is priced
CANARY = "sk-ant-canary-Vb3n8Hq2"
ONE = {"input_tokens": 2000, "output_tokens": 300, "cache_read_tokens": 500, "cache_write_tokens": 100}
SIDE = {"text": "side", "usage": ONE, "model": MODEL}
LOOK = (
    "env > seen_env.txt; "
    # Every process of this agent (its own HOME): without the envelope /proc shows the whole
    # machine, and another test's program may hold its own real key at the same time.
    "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f | grep -qx \"HOME=$HOME\" && tr '\\0' '\\n' < $f; "
    "done > seen_proc.txt 2>/dev/null; "
    'grep -rIa "canary" "$HOME" > seen_home.txt 2>/dev/null; echo looked'
)


class CountingAnthropic(SideAnthropic):
    """The fake Anthropic API, keeping the usage it reported in each answer."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reported: list[dict[str, int]] = []
        self._reported_lock = threading.Lock()

    def answer(self, request: RecordedRequest, body: dict[str, Any], entry: dict[str, Any]) -> JsonReply | StreamReply:
        reply = super().answer(request, body, entry)
        with self._reported_lock:
            self.reported.append(usage_of(entry))
        return reply

    def __enter__(self) -> CountingAnthropic:
        self.start()
        return self

    def sums(self) -> dict[str, int]:
        with self._reported_lock:
            return {k: sum(u[k] for u in self.reported) for k in ONE}


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliWorld:
    if not (AGENT.exists() and os.access(AGENT, os.X_OK)):
        pytest.fail(f"{AGENT} is not installed; run: bash scripts/system/45-acp-opencode.sh")
    made = make_world(tmp_path, monkeypatch)
    monkeypatch.setenv("IS_SANDBOX", "1")  # claude-agent-acp as root (CI)
    monkeypatch.setenv("CLAUDE_CODE_MAX_RETRIES", "0")
    monkeypatch.setenv("ANTHROPIC_API_KEY", CANARY)
    return made


def shell(command: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "Bash", "arguments": {"command": command}}], "usage": ONE, "model": MODEL}


def run(
    world: CliWorld,
    fake: CountingAnthropic,
    store: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    sandbox: Sandboxed,
    budget_usd: float | None = None,
    options: dict[str, str] | None = None,
) -> RunResult:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.root_url)
    agent = Agent(
        provider="acp",
        options={"command": str(AGENT), "turn_timeout": "120", "grace": "1", **(options or {})},
        workspace=world.workspace,
        sandbox=sandbox,
        store=store,
        yes=True,
        budget_usd=budget_usd,
    )
    result = asyncio.run(agent.run("Look around."))
    assert running_agents() == []  # the session's agent ended with it
    return result


@pytest.mark.parametrize("sandbox", ["bwrap", None], ids=["in-the-envelope", "no-sandbox"])
def test_the_agents_shell_finds_no_real_key_and_the_api_gets_it(
    world: CliWorld,
    tmp_path: Path,
    sandbox: Sandboxed,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if sandbox == "bwrap":
        request.getfixturevalue("bwrap_ready")
    script = [shell(LOOK), {"text": "Looked.", "usage": ONE, "model": MODEL}]
    with CountingAnthropic(script, fallback=SIDE) as fake:
        result = run(world, fake, tmp_path / "store.db", monkeypatch, sandbox=sandbox)
        keys = {r.headers.get("x-api-key") or r.headers.get("authorization", "") for r in fake.model_requests()}
    assert result.outcome == "completed", result.events
    seen = {
        name: (world.workspace / name).read_text(errors="replace")
        for name in ("seen_env.txt", "seen_proc.txt", "seen_home.txt")
    }
    for name, text in seen.items():
        assert CANARY not in text, name  # never the key …
    assert "ANTHROPIC_API_KEY=sl-gw-" in seen["seen_proc.txt"]  # … the agent has a placeholder
    if sandbox == "bwrap":  # the other vendors' keys (make_world's) stay out of the envelope
        assert "sk-fake-test" not in seen["seen_env.txt"] and "fake-gemini-key" not in seen["seen_env.txt"]
    assert CANARY not in str(result.events)
    assert keys and all(CANARY in k for k in keys), keys  # every request reached the API with it


@pytest.mark.parametrize("sandbox", ["bwrap", None], ids=["in-the-envelope", "no-sandbox"])
def test_the_ledger_is_what_the_api_reported(
    world: CliWorld,
    tmp_path: Path,
    sandbox: Sandboxed,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if sandbox == "bwrap":
        request.getfixturevalue("bwrap_ready")
    second = {"input_tokens": 3100, "output_tokens": 41, "cache_read_tokens": 0, "cache_write_tokens": 0}
    script = [
        shell("echo one"),
        {**shell("echo two"), "usage": second},
        {"text": "Done.", "usage": ONE, "model": MODEL},
    ]
    store = tmp_path / "store.db"
    with CountingAnthropic(script, fallback=SIDE) as fake:
        result = run(world, fake, store, monkeypatch, sandbox=sandbox)
        sums, answered = fake.sums(), len(fake.reported)
    assert result.outcome == "completed", result.events
    usages = [e for e in result.events if isinstance(e, Usage)]
    assert len(usages) == answered >= 3  # one figure per model request, from the wire
    ledger = {
        "input_tokens": sum(u.input_tokens for u in usages),
        "output_tokens": sum(u.output_tokens for u in usages),
        "cache_read_tokens": sum(u.cache_read_tokens or 0 for u in usages),
        "cache_write_tokens": sum(u.cache_write_tokens or 0 for u in usages),
    }
    assert ledger == sums
    opened = open_store(store)
    try:
        totals = opened.totals(result.session_id)
    finally:
        opened.close()
    assert (totals.input_tokens, totals.output_tokens, totals.cache_read_tokens) == (
        sums["input_tokens"],
        sums["output_tokens"],
        sums["cache_read_tokens"],
    )


@pytest.mark.parametrize("sandbox", ["bwrap", None], ids=["in-the-envelope", "no-sandbox"])
def test_a_budget_worth_two_requests_stops_the_turn_after_at_most_three(
    world: CliWorld,
    tmp_path: Path,
    sandbox: Sandboxed,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if sandbox == "bwrap":
        request.getfixturevalue("bwrap_ready")
    one_request = price_usage(
        Usage(input_tokens=2000, output_tokens=300, cache_read_tokens=500, cache_write_tokens=100), model=MODEL
    )
    assert one_request is not None and one_request > 0
    script = [shell(f"echo step{i}") for i in range(8)] + [{"text": "Done.", "usage": ONE, "model": MODEL}]
    with CountingAnthropic(script, fallback=SIDE) as fake:
        result = run(world, fake, tmp_path / "store.db", monkeypatch, sandbox=sandbox, budget_usd=2 * one_request)
        sent = len(fake.model_requests())
    assert result.outcome == "budget", result.events
    assert any(isinstance(e, Error) and e.kind == "budget" for e in result.events)
    assert sent <= 3, sent


def test_an_agent_whose_vendor_is_unknown_says_its_key_is_in_its_environment(
    world: CliWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same agent under another name: seamline cannot know whose variables it reads.
    renamed = tmp_path / "bin" / "some-acp-agent"
    renamed.parent.mkdir()
    renamed.symlink_to(AGENT)
    script = [shell("env > seen_env.txt"), {"text": "Done.", "usage": ONE, "model": MODEL}]

    def once(options: dict[str, str]) -> tuple[RunResult, str, set[str]]:
        with CountingAnthropic(script, fallback=SIDE) as fake:
            monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.root_url)
            agent = Agent(
                provider="acp",
                options={"command": str(renamed), "turn_timeout": "120", "grace": "1", **options},
                workspace=world.workspace,
                sandbox=None,
                yes=True,
            )
            result = asyncio.run(agent.run("Look around."))
            keys = {r.headers.get("x-api-key", "") for r in fake.model_requests()}
        assert result.outcome == "completed", result.events
        assert running_agents() == []
        return result, (world.workspace / "seen_env.txt").read_text(errors="replace"), keys

    result, seen, keys = once({})
    notes = [e.payload for e in result.events if isinstance(e, Raw) and e.payload.get("gateway") == "off"]
    assert len(notes) == 1 and "some-acp-agent" in str(notes[0]["because"]), notes
    assert f"ANTHROPIC_API_KEY={CANARY}" in seen  # said: the key is in its environment
    assert keys == {CANARY}
    # Named by the operator, the same agent goes through the gateway.
    result, seen, keys = once({"gateway_vendor": "anthropic"})
    assert not [e for e in result.events if isinstance(e, Raw) and e.payload.get("gateway") == "off"]
    assert CANARY not in seen and "ANTHROPIC_API_KEY=sl-gw-" in seen
    assert keys == {CANARY}  # the gateway put it in


def test_gemini_over_acp_has_only_the_placeholder_in_its_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # gemini --acp reads GEMINI_API_KEY: it holds the placeholder, and the agent's requests
    # reach the API with the real key. (A key given by `authenticate` alone, gemini 0.61.0
    # does not send on its model requests, gateway or not: that case is not tested here.)
    argv = [str(CLI_BIN / "gemini"), "--acp", "-m", "gemini-2.5-flash"]
    if not (Path(argv[0]).exists() and os.access(argv[0], os.X_OK)):
        pytest.fail(f"{argv[0]} is not installed; run: bash scripts/system/40-agent-clis.sh")
    world = make_world(tmp_path, monkeypatch)
    (world.home / ".gemini").mkdir()
    (world.home / ".gemini" / "settings.json").write_text(
        '{"security": {"auth": {"selectedType": "gemini-api-key"}}, "general": {"maxAttempts": 1}}'
    )
    canary = "gemini-canary-Tq5z0Lp8"
    monkeypatch.setenv("GEMINI_API_KEY", canary)
    script = [
        {"tool_calls": [{"name": "run_shell_command", "arguments": {"command": LOOK}}], "usage": ONE},
        {"text": "Looked.", "usage": ONE},
    ]
    with FakeGemini(script, fallback={"text": "side", "usage": ONE}) as fake:
        monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", fake.root_url)
        options = {"command": " ".join(argv), "turn_timeout": "120", "grace": "1"}
        agent = Agent(provider="acp", options=options, workspace=world.workspace, sandbox=None, yes=True)
        result = asyncio.run(agent.run("Look around."))
        keys = {r.headers.get("x-goog-api-key") or (r.query.get("key") or [""])[0] for r in fake.model_requests()}
        answered = len(fake.model_requests())
    assert running_agents() == []
    assert result.outcome == "completed", result.events
    seen = {
        n: (world.workspace / n).read_text(errors="replace") for n in ("seen_env.txt", "seen_proc.txt", "seen_home.txt")
    }
    for name, text in seen.items():
        assert canary not in text, name
    assert "GEMINI_API_KEY=sl-gw-" in seen["seen_proc.txt"]
    assert keys == {canary}, keys
    assert len([e for e in result.events if isinstance(e, Usage)]) == answered


# The model's shell sends its own request to the gateway with a key it made up.
TRY_GATEWAY = (
    'python3 -c "import os, urllib.request as u; '
    "r = u.Request(os.environ['ANTHROPIC_BASE_URL'] + '/v1/messages', data=b'{}', "
    "headers={'x-api-key': 'sk-ant-made-up', 'content-type': 'application/json'}); "
    'print(u.urlopen(r).status)" 2>&1 | tail -1'
)


@pytest.mark.parametrize("sandbox", ["bwrap", None], ids=["in-the-envelope", "no-sandbox"])
def test_a_key_tried_at_the_gateway_from_inside_is_refused_and_reported(
    world: CliWorld,
    tmp_path: Path,
    sandbox: Sandboxed,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if sandbox == "bwrap":
        request.getfixturevalue("bwrap_ready")
    script = [shell(TRY_GATEWAY), {"text": "Tried.", "usage": ONE, "model": MODEL}]
    with CountingAnthropic(script, fallback=SIDE) as fake:
        result = run(world, fake, tmp_path / "store.db", monkeypatch, sandbox=sandbox)
        keys = [r.headers.get("x-api-key") or r.headers.get("authorization", "") for r in fake.requests]
    assert result.outcome == "completed", result.events
    outputs = " ".join(str(e.output) for e in result.events if isinstance(e, ToolResult))
    assert "401" in outputs  # the shell's request was answered 401 …
    assert not any("made-up" in k for k in keys)  # … and never reached the API
    refused = [
        e.payload["gateway_refused"] for e in result.events if isinstance(e, Raw) and "gateway_refused" in e.payload
    ]
    assert refused == [{"reason": "no credential this gateway issued", "method": "POST", "path": "/v1/messages"}]


@pytest.mark.parametrize("sandbox", ["bwrap", None], ids=["in-the-envelope", "no-sandbox"])
def test_a_recorded_acp_run_replays_with_the_api_stopped_and_no_key(
    world: CliWorld,
    tmp_path: Path,
    sandbox: Sandboxed,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if sandbox == "bwrap":
        request.getfixturevalue("bwrap_ready")
    # The cassette sits at the session's gateway, so an ACP agent of known vendor records and
    # replays as an agent CLI does: the same events and files, nothing sent anywhere.
    cassette = tmp_path / "acp.cassette.jsonl"
    script = [shell("echo made > made.txt"), {"text": "Made it.", "usage": ONE, "model": MODEL}]

    def agent_run(**cassette_use: Path) -> RunResult:
        agent = Agent(
            provider="acp",
            options={"command": str(AGENT), "turn_timeout": "120", "grace": "1"},
            workspace=world.workspace,
            sandbox=sandbox,
            store=tmp_path / "store.db",
            yes=True,
            **cassette_use,  # type: ignore[arg-type]
        )
        result = asyncio.run(agent.run("Make the file."))
        assert running_agents() == []
        return result

    with CountingAnthropic(script, fallback=SIDE) as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.root_url)
        recorded = agent_run(record=cassette)
        sent = len(fake.model_requests())
    assert recorded.outcome == "completed" and sent >= 2, recorded.events
    assert (world.workspace / "made.txt").read_text() == "made\n" and CANARY not in cassette.read_text()
    (world.workspace / "made.txt").unlink()
    monkeypatch.delenv("ANTHROPIC_API_KEY")  # the fake is stopped too: nothing could answer
    replayed = agent_run(replay=cassette)
    assert replayed.outcome == "completed", replayed.events
    assert replayed.text == recorded.text == "Made it."
    assert (world.workspace / "made.txt").read_text() == "made\n"

    def shape(result: RunResult) -> list[tuple[str, str]]:
        return [(e.type, getattr(e, "name", "") or "") for e in result.events if e.type in ("tool_call", "tool_result")]

    assert shape(replayed) == shape(recorded) != []


def test_every_model_request_of_an_acp_turn_is_a_chat_span_under_the_turn(
    world: CliWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    from seamline.events import Event
    from seamline.telemetry.live import tap_turn
    from tests.telemetry.support import MemorySink, by_name

    script = [shell("echo one"), shell("echo two"), {"text": "Done.", "usage": ONE, "model": MODEL}]
    sink = MemorySink()
    with CountingAnthropic(script, fallback=SIDE) as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.root_url)
        agent = Agent(
            provider="acp",
            options={"command": str(AGENT), "turn_timeout": "120", "grace": "1"},
            workspace=world.workspace,
            yes=True,
        )

        async def drive() -> list[Event]:
            return [e async for e in tap_turn(agent.stream("Go."), sink, prompt="Go.")]

        events = asyncio.run(drive())
        answered = len(fake.model_requests())
    assert running_agents() == []
    assert any(isinstance(e, Usage) for e in events)
    chats = by_name(sink.spans(), "chat")
    turn = by_name(sink.spans(), "invoke_agent")[0]
    assert turn.context is not None and all(c.parent and c.parent.span_id == turn.context.span_id for c in chats)
    # One span per request, each with the tokens the API reported for it.
    assert len(chats) == answered >= 3
    assert [c.attributes["gen_ai.usage.input_tokens"] for c in chats] == [2000] * answered  # type: ignore[index]
