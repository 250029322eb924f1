"""OpenCode's model traffic through seamline's gateway (``opencode serve``, the real program
from npm, its provider pointed at the fake OpenAI-compatible API on 127.0.0.1; real
bubblewrap where the envelope is asked for):

- the model's own shell reads ``env``, every ``/proc/*/environ`` it can and its home, and
  finds no trace of the real key; the fake API received the real key on every request;
- the ledger is what the fake API itself reported, summed, exactly;
- a budget worth two requests stops the turn after at most three, outcome ``budget``;
- without seamline's provider (OpenCode's own configuration) the session says the key is
  in OpenCode's environment.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any, Literal

import pytest

from seamline import Agent
from seamline.events import Error, Raw, Usage
from seamline.providers.opencode.server import running_servers
from seamline.runner import RunResult
from seamline.sessions import open_store
from seamline.usage import price_usage
from tests.fakes._http import JsonReply, RecordedRequest, StreamReply, usage_of
from tests.providers.agent_cli_support import CliWorld, make_world
from tests.providers.test_opencode_real import OpenCodeOpenAI, opencode_path

pytestmark = pytest.mark.real
Sandboxed = Literal["bwrap"] | None
MODEL = "gpt-4o-mini"  # seamline's default for its OpenCode provider; priced
CANARY = "sk-canary-Pm4x7Wd1"
ONE = {"input_tokens": 2000, "output_tokens": 300, "cache_read_tokens": 500, "cache_write_tokens": 0}
TITLE = {"text": "A title", "usage": ONE}
LOOK = (
    "env > seen_env.txt; "
    # Every process of this agent (its own HOME): without the envelope /proc shows the whole
    # machine, and another test's program may hold its own real key at the same time.
    "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f | grep -qx \"HOME=$HOME\" && tr '\\0' '\\n' < $f; "
    "done > seen_proc.txt 2>/dev/null; "
    'grep -rIa "canary" "$HOME" > seen_home.txt 2>/dev/null; echo looked'
)


class CountingOpenAI(OpenCodeOpenAI):
    """The fake OpenAI API, keeping the usage it reported in each answer."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reported: list[dict[str, int]] = []
        self._reported_lock = threading.Lock()

    def answer(self, request: RecordedRequest, body: dict[str, Any], entry: dict[str, Any]) -> JsonReply | StreamReply:
        reply = super().answer(request, body, entry)
        stream_options: dict[str, Any] = body.get("stream_options") or {}
        if stream_options.get("include_usage") or not body.get("stream"):  # the usage it sent
            with self._reported_lock:
                self.reported.append(usage_of(entry))
        return reply

    def __enter__(self) -> CountingOpenAI:
        self.start()
        return self

    def sums(self) -> dict[str, int]:
        with self._reported_lock:
            return {k: sum(u[k] for u in self.reported) for k in ONE}


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliWorld:
    opencode_path()
    made = make_world(tmp_path, monkeypatch)
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    return made


def shell(command: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "bash", "arguments": {"command": command, "description": "run"}}], "usage": ONE}


def run(
    world: CliWorld,
    fake: CountingOpenAI | None,
    store: Path,
    *,
    sandbox: Sandboxed,
    budget_usd: float | None = None,
    options: dict[str, str] | None = None,
) -> RunResult:
    given = {"executable": opencode_path(), "turn_timeout": "120", "grace": "1", "max_retries": "0"}
    if fake is not None:
        given["base_url"] = fake.base_url
    agent = Agent(
        provider="opencode",
        options={**given, **(options or {})},
        workspace=world.workspace,
        sandbox=sandbox,
        store=store,
        yes=True,
        budget_usd=budget_usd,
    )
    result = asyncio.run(agent.run("Look around."))
    assert running_servers() == []  # the session's server ended with it
    return result


@pytest.mark.parametrize("sandbox", ["bwrap", None], ids=["in-the-envelope", "no-sandbox"])
def test_the_shell_finds_no_real_key_and_the_api_gets_it(
    world: CliWorld, tmp_path: Path, sandbox: Sandboxed, request: pytest.FixtureRequest
) -> None:
    if sandbox == "bwrap":
        request.getfixturevalue("bwrap_ready")
    script = [shell(LOOK), {"text": "Looked.", "usage": ONE}]
    with CountingOpenAI(script, fallback=TITLE) as fake:
        result = run(world, fake, tmp_path / "store.db", sandbox=sandbox)
        keys = {r.headers.get("authorization", "") for r in fake.model_requests()}
    assert result.outcome == "completed", result.events
    seen = {
        name: (world.workspace / name).read_text(errors="replace")
        for name in ("seen_env.txt", "seen_proc.txt", "seen_home.txt")
    }
    for name, text in seen.items():
        assert CANARY not in text, name  # never the key …
    assert "OPENAI_API_KEY=sl-gw-" in seen["seen_proc.txt"]  # … OpenCode has a placeholder
    assert CANARY not in str(result.events)
    assert keys == {f"Bearer {CANARY}"}, keys  # every request reached the API with it


@pytest.mark.parametrize("sandbox", ["bwrap", None], ids=["in-the-envelope", "no-sandbox"])
def test_the_ledger_is_what_the_api_reported(
    world: CliWorld, tmp_path: Path, sandbox: Sandboxed, request: pytest.FixtureRequest
) -> None:
    if sandbox == "bwrap":
        request.getfixturevalue("bwrap_ready")
    second = {"input_tokens": 3100, "output_tokens": 41, "cache_read_tokens": 0, "cache_write_tokens": 0}
    script = [shell("echo one"), {**shell("echo two"), "usage": second}, {"text": "Done.", "usage": ONE}]
    store = tmp_path / "store.db"
    with CountingOpenAI(script, fallback=TITLE) as fake:
        result = run(world, fake, store, sandbox=sandbox)
        sums, answered = fake.sums(), len(fake.model_requests())
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
    world: CliWorld, tmp_path: Path, sandbox: Sandboxed, request: pytest.FixtureRequest
) -> None:
    if sandbox == "bwrap":
        request.getfixturevalue("bwrap_ready")
    one_request = price_usage(Usage(input_tokens=2000, output_tokens=300, cache_read_tokens=500), model=MODEL)
    assert one_request is not None and one_request > 0
    script = [shell(f"echo step{i}") for i in range(8)] + [{"text": "Done.", "usage": ONE}]
    with CountingOpenAI(script, fallback=TITLE) as fake:
        result = run(world, fake, tmp_path / "store.db", sandbox=sandbox, budget_usd=2 * one_request)
        sent = len(fake.model_requests())
    assert result.outcome == "budget", result.events
    assert any(isinstance(e, Error) and e.kind == "budget" for e in result.events)
    assert sent <= 3, sent


def test_opencodes_own_configuration_is_said_to_keep_the_key_in_its_environment(
    world: CliWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No base_url: OpenCode's own configuration would choose its provider (none here, so the
    # turn fails); the session says so before anything else, once.
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    result = run(world, None, tmp_path / "store.db", sandbox=None)
    notes = [e.payload for e in result.events if isinstance(e, Raw) and e.payload.get("gateway") == "off"]
    assert len(notes) == 1 and "OpenCode's own configuration" in str(notes[0]["because"]), notes


@pytest.mark.parametrize("sandbox", ["bwrap", None], ids=["in-the-envelope", "no-sandbox"])
def test_a_recorded_opencode_run_replays_with_the_api_stopped_and_no_key(
    world: CliWorld,
    tmp_path: Path,
    sandbox: Sandboxed,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if sandbox == "bwrap":
        request.getfixturevalue("bwrap_ready")
    # The cassette sits at the session's gateway: OpenCode with seamline's provider records
    # and replays as an agent CLI does, the same answer and file, nothing sent anywhere.
    cassette = tmp_path / "opencode.cassette.jsonl"
    script = [shell("echo made > made.txt"), {"text": "Made it.", "usage": ONE}]

    def agent_run(base_url: str, **cassette_use: Path) -> RunResult:
        options = {"executable": opencode_path(), "turn_timeout": "120", "grace": "1", "max_retries": "0"}
        agent = Agent(
            provider="opencode",
            options={**options, "base_url": base_url},
            workspace=world.workspace,
            sandbox=sandbox,
            store=tmp_path / "store.db",
            yes=True,
            **cassette_use,  # type: ignore[arg-type]
        )
        result = asyncio.run(agent.run("Make the file."))
        assert running_servers() == []
        return result

    with CountingOpenAI(script, fallback=TITLE) as fake:
        base_url = fake.base_url
        recorded = agent_run(base_url, record=cassette)
    assert recorded.outcome == "completed", recorded.events
    assert (world.workspace / "made.txt").read_text() == "made\n" and CANARY not in cassette.read_text()
    (world.workspace / "made.txt").unlink()
    monkeypatch.delenv("OPENAI_API_KEY")  # the fake is stopped too: nothing could answer
    replayed = agent_run(base_url, replay=cassette)
    assert replayed.outcome == "completed", replayed.events
    assert replayed.text == recorded.text == "Made it."
    assert (world.workspace / "made.txt").read_text() == "made\n"
