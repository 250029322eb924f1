"""Codex and the Gemini CLI through seamline's model gateway (the real programs from npm, the
fake OpenAI and Gemini APIs on 127.0.0.1, real bubblewrap where the envelope is asked for):
the model's own shell finds no trace of the real key, which the fake API received on every
request, and the ledger holds one figure per request as the fake API reported it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from seamline import Agent
from seamline.events import Error, Usage
from seamline.runner import RunResult
from seamline.usage import price_usage
from tests.fakes._http import FakeAPI, RecordedRequest
from tests.fakes.gemini_api import FakeGemini
from tests.fakes.openai_api import FakeOpenAI
from tests.providers.agent_cli_support import CliWorld, cli_path, make_gemini_world, make_world

pytestmark = pytest.mark.real
CANARY = "canary-key-Zr8m3Kq1"
ONE = {"input_tokens": 1500, "output_tokens": 120, "cache_read_tokens": 300, "cache_write_tokens": 0}
LOOK = (
    "env > seen_env.txt; "
    # Every process of this agent (its own HOME): without the envelope /proc shows the whole
    # machine, and another test's program may hold its own real key at the same time.
    "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f | grep -qx \"HOME=$HOME\" && tr '\\0' '\\n' < $f; "
    "done > seen_proc.txt 2>/dev/null; "
    'grep -rIa "canary-key" "$HOME" > seen_home.txt 2>/dev/null; echo looked'
)


@dataclass(frozen=True)
class Program:
    provider: str
    model: str
    key_var: str
    fake: Callable[..., FakeAPI]
    base_url: Callable[[FakeAPI], str]
    shell: Callable[[str], dict[str, Any]]
    key_of: Callable[[RecordedRequest], str]


CODEX = Program(
    provider="codex",
    model="gpt-5",
    key_var="OPENAI_API_KEY",
    fake=FakeOpenAI,
    base_url=lambda fake: fake.base_url,
    shell=lambda command: {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": command}}], "usage": ONE},
    key_of=lambda r: r.headers.get("authorization", ""),
)
GEMINI = Program(
    provider="gemini-cli",
    model="gemini-2.5-flash",
    key_var="GEMINI_API_KEY",
    fake=FakeGemini,
    base_url=lambda fake: fake.root_url,
    shell=lambda command: {
        "tool_calls": [{"name": "run_shell_command", "arguments": {"command": command}}],
        "usage": ONE,
    },
    key_of=lambda r: r.headers.get("x-goog-api-key") or (r.query.get("key") or [""])[0],
)


def world_for(
    program: Program, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> CliWorld:
    made = make_gemini_world(tmp_path, monkeypatch, request) if program is GEMINI else make_world(tmp_path, monkeypatch)
    monkeypatch.setenv(program.key_var, CANARY)
    return made


def run(
    program: Program,
    world: CliWorld,
    fake: FakeAPI,
    store: Path,
    *,
    sandbox: str | None,
    budget_usd: float | None = None,
) -> RunResult:
    options = {
        "executable": cli_path("codex" if program is CODEX else "gemini"),
        "base_url": program.base_url(fake),
        "max_retries": "0",
        "turn_timeout": "120",
    }
    if program is CODEX and sandbox is None:
        options["codex_sandbox"] = "danger-full-access"  # Codex's own sandbox cannot nest here
    agent = Agent(
        provider=program.provider,
        model=program.model,
        options=options,
        workspace=world.workspace,
        sandbox=sandbox,
        store=store,
        yes=True,
        budget_usd=budget_usd,
    )
    return asyncio.run(agent.run("Look around."))


@pytest.mark.parametrize("sandbox", ["bwrap", None], ids=["in-the-envelope", "no-sandbox"])
@pytest.mark.parametrize("program", [CODEX, GEMINI], ids=["codex", "gemini-cli"])
def test_the_programs_shell_finds_no_real_key_and_the_api_gets_it(
    program: Program,
    sandbox: str | None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    if sandbox == "bwrap":
        request.getfixturevalue("bwrap_ready")
    world = world_for(program, tmp_path, monkeypatch, request)
    script = [program.shell(LOOK), {"text": "Looked.", "usage": ONE}]
    with program.fake(script, fallback={"text": "side", "usage": ONE}) as fake:
        result = run(program, world, fake, tmp_path / "store.db", sandbox=sandbox)
        keys = [program.key_of(r) for r in fake.model_requests()]
        answered = len(fake.model_requests())
    assert result.outcome == "completed", result.events
    seen = {name: (world.workspace / name).read_text() for name in ("seen_env.txt", "seen_proc.txt", "seen_home.txt")}
    for name, text in seen.items():
        assert CANARY not in text, name  # never the key …
    assert f"{program.key_var}=sl-gw-" in seen["seen_proc.txt"]  # … the program has a placeholder
    assert CANARY not in str(result.events)
    assert keys and all(CANARY in k for k in keys), keys  # every request reached the API with it
    usages = [e for e in result.events if isinstance(e, Usage)]
    # One figure per model request, as the fake API reported it (cached tokens inside input).
    assert [(u.input_tokens, u.output_tokens, u.cache_read_tokens) for u in usages] == [(1500, 120, 300)] * answered, (
        result.events
    )


@pytest.mark.parametrize("sandbox", ["bwrap", None], ids=["in-the-envelope", "no-sandbox"])
@pytest.mark.parametrize("program", [CODEX, GEMINI], ids=["codex", "gemini-cli"])
def test_a_budget_worth_two_requests_stops_the_turn_after_at_most_three(
    program: Program,
    sandbox: str | None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    if sandbox == "bwrap":
        request.getfixturevalue("bwrap_ready")
    world = world_for(program, tmp_path, monkeypatch, request)
    one_request = price_usage(Usage(input_tokens=1500, output_tokens=120, cache_read_tokens=300), model=program.model)
    assert one_request is not None and one_request > 0
    script = [program.shell(f"echo step{i}") for i in range(8)] + [{"text": "Done.", "usage": ONE}]
    with program.fake(script, fallback={"text": "side", "usage": ONE}) as fake:
        result = run(program, world, fake, tmp_path / "store.db", sandbox=sandbox, budget_usd=2 * one_request)
        sent = len(fake.model_requests())
    assert result.outcome == "budget", result.events
    assert any(isinstance(e, Error) and e.kind == "budget" for e in result.events)
    assert sent <= 3, sent
