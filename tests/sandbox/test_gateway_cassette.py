"""Cassettes with the real Claude Code, Codex and Gemini CLI (from npm) and the fake APIs
on 127.0.0.1, in bubblewrap's envelope and without it:

- a run recorded with ``record=`` replays with ``replay=`` in another folder and home, the
  fake API stopped and no key in the environment: the same events (types, texts, tool
  calls and results, usage; not ids or times) and the same files in the workspace; the
  file holds no key;
- a replay whose prompt changed fails: an ``invalid_request`` error naming the request and
  the first field that differs, outcome ``failed``, no file written (Claude Code).

What the programs vary from run to run (found by recording each twice) is what the
normalisation rule of docs/gateway.md takes out.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from seamline import Agent
from seamline.events import (
    Complete,
    Error,
    Event,
    FileChange,
    Raw,
    Text,
    TextDelta,
    ToolCall,
    ToolResult,
    Usage,
)
from seamline.runner import RunResult
from seamline.sandbox.probe import SandboxMode
from tests.providers.agent_cli_support import AgentAnthropic, CliWorld, cli_path, make_world

pytestmark = pytest.mark.real
MODEL = "claude-sonnet-4-5"
CANARY = "sk-ant-canary-C4s5e6T7"
ONE = {"input_tokens": 2000, "output_tokens": 300, "cache_read_tokens": 500, "cache_write_tokens": 100}
SCRIPT = [
    {"tool_calls": [{"name": "Bash", "arguments": {"command": "echo recorded > made.txt"}}], "usage": ONE},
    {"text": "Made it.", "usage": {**ONE, "output_tokens": 7}},
]


def world_in(folder: Path, monkeypatch: pytest.MonkeyPatch, *, key: bool) -> CliWorld:
    folder.mkdir()
    made = make_world(folder, monkeypatch)
    if key:
        monkeypatch.setenv("ANTHROPIC_API_KEY", CANARY)
    else:
        monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    return made


def run(world: CliWorld, base_url: str, prompt: str, *, sandbox: SandboxMode | None, **cassette: Path) -> RunResult:
    options = {"executable": cli_path("claude"), "base_url": base_url, "max_retries": "0", "warm": "false"}
    agent = Agent(
        provider="claude-code",
        model=MODEL,
        options=options,
        workspace=world.workspace,
        sandbox=sandbox,
        store=None,
        yes=True,
        **cassette,  # type: ignore[arg-type]
    )
    return asyncio.run(agent.run(prompt))


def what_happened(events: list[Event]) -> tuple[list[tuple[Any, ...]], list[tuple[int, ...]]]:
    """The events in order, without ids and times, and the usage figures (in any order:
    a side request's answer may come before or after the program's next line). ``raw``
    events are left out: the envelope's notes (Claude Code's telemetry refused at the
    egress) come when they come."""
    seen: list[tuple[Any, ...]] = []
    usage: list[tuple[int, ...]] = []
    for event in events:
        match event:
            case Usage():
                usage.append((event.input_tokens, event.output_tokens, event.cache_read_tokens))
            case TextDelta() | Text():
                seen.append((event.type, event.text))
            case ToolCall():
                seen.append(("tool_call", event.name, event.arguments))
            case ToolResult():
                seen.append(("tool_result", event.output, event.is_error))
            case FileChange():
                seen.append(("file_change", Path(event.path).name, event.kind))
            case Complete():
                seen.append(("complete", event.outcome, event.stop_reason, event.text))
            case Error():
                seen.append(("error", event.kind))
            case Raw():
                pass
            case _:
                seen.append((event.type,))
    return seen, sorted(usage)


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("sandbox", ["bwrap", None], ids=["in-the-envelope", "no-sandbox"])
def test_a_recorded_run_replays_with_the_api_stopped_and_no_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sandbox: SandboxMode | None, request: pytest.FixtureRequest
) -> None:
    if sandbox == "bwrap":
        request.getfixturevalue("bwrap_ready")
    tape = tmp_path / "run.cassette.jsonl"
    first = world_in(tmp_path / "recorded", monkeypatch, key=True)
    with AgentAnthropic(SCRIPT, fallback={"text": "side", "usage": ONE}) as fake:
        recorded = run(first, fake.root_url, "Make a file.", sandbox=sandbox, record=tape)
        asked = len(fake.model_requests())
        gone = fake.root_url
    assert recorded.outcome == "completed", recorded.events
    assert (first.workspace / "made.txt").read_text() == "recorded\n"
    assert CANARY not in tape.read_text()
    assert len(tape.read_text().splitlines()) == 1 + asked  # a header, then one line per request

    second = world_in(tmp_path / "replayed", monkeypatch, key=False)  # another folder, another home
    replayed = run(second, gone, "Make a file.", sandbox=sandbox, replay=tape)
    assert replayed.outcome == "completed", replayed.events
    assert what_happened(replayed.events) == what_happened(recorded.events)
    assert files(second.workspace) == files(first.workspace)


def test_a_changed_prompt_fails_naming_the_first_field_that_differs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tape = tmp_path / "run.cassette.jsonl"
    first = world_in(tmp_path / "recorded", monkeypatch, key=True)
    with AgentAnthropic(SCRIPT, fallback={"text": "side", "usage": ONE}) as fake:
        recorded = run(first, fake.root_url, "Make a file.", sandbox=None, record=tape)
        gone = fake.root_url
    assert recorded.outcome == "completed", recorded.events

    second = world_in(tmp_path / "replayed", monkeypatch, key=False)
    replayed = run(second, gone, "Make two files.", sandbox=None, replay=tape)
    assert (replayed.outcome, replayed.stop_reason) == ("failed", "invalid_request"), replayed.events
    errors = [e for e in replayed.events if isinstance(e, Error) and e.message.startswith("cassette:")]
    assert len(errors) == 1 and errors[0].kind == "invalid_request" and not errors[0].retryable, replayed.events
    said = re.fullmatch(
        r"cassette: request \d+ differs at messages\[0\]\.content\[(\d+)\]\.text \(recorded (.*), sent (.*)\); in (.*)",
        errors[0].message,
        re.S,
    )
    assert said is not None, errors[0].message
    assert "Make a file." in said.group(2) and "Make two" in said.group(3)  # where the prompt changed
    assert said.group(4) == str(tape)
    assert not (second.workspace / "made.txt").exists()


@pytest.mark.parametrize("sandbox", ["bwrap", None], ids=["in-the-envelope", "no-sandbox"])
@pytest.mark.parametrize("program", ["codex", "gemini-cli"])
def test_codex_and_the_gemini_cli_replay_with_the_api_stopped_and_no_key(
    program: str,
    sandbox: SandboxMode | None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    if sandbox == "bwrap":
        request.getfixturevalue("bwrap_ready")
    from tests.fakes.gemini_api import FakeGemini
    from tests.fakes.openai_api import FakeOpenAI
    from tests.providers.agent_cli_support import make_gemini_world

    codex = program == "codex"
    key_var = "OPENAI_API_KEY" if codex else "GEMINI_API_KEY"
    shell_tool = (
        {"name": "exec_command", "arguments": {"cmd": "echo recorded > made.txt"}}
        if codex
        else {
            "name": "run_shell_command",
            "arguments": {"command": "echo recorded > made.txt"},
        }
    )
    script = [{"tool_calls": [shell_tool], "usage": ONE}, {"text": "Made it.", "usage": ONE}]

    def world(folder: Path, *, key: bool) -> CliWorld:
        folder.mkdir()
        made = make_world(folder, monkeypatch) if codex else make_gemini_world(folder, monkeypatch, request)
        for name in ("OPENAI_API_KEY", "GEMINI_API_KEY"):
            monkeypatch.delenv(name, raising=False)
        if key:
            monkeypatch.setenv(key_var, CANARY)
        return made

    def go(where: CliWorld, base_url: str, **cassette: Path) -> RunResult:
        options = {
            "executable": cli_path("codex" if codex else "gemini"),
            "base_url": base_url,
            "max_retries": "0",
            "turn_timeout": "120",
        }
        if codex and sandbox is None:
            options["codex_sandbox"] = "danger-full-access"  # Codex's own sandbox cannot nest here
        agent = Agent(
            provider=program,
            model="gpt-5" if codex else "gemini-2.5-flash",
            options=options,
            workspace=where.workspace,
            sandbox=sandbox,
            store=None,
            yes=True,
            **cassette,  # type: ignore[arg-type]
        )
        return asyncio.run(agent.run("Make a file."))

    tape = tmp_path / "run.cassette.jsonl"
    first = world(tmp_path / "recorded", key=True)
    fake_class = FakeOpenAI if codex else FakeGemini
    with fake_class(script, fallback={"text": "side", "usage": ONE}) as fake:
        recorded = go(first, fake.base_url if codex else fake.root_url, record=tape)
        gone = fake.base_url if codex else fake.root_url
    assert recorded.outcome == "completed", recorded.events
    assert CANARY not in tape.read_text()
    second = world(tmp_path / "replayed", key=False)
    replayed = go(second, gone, replay=tape)
    assert replayed.outcome == "completed", replayed.events
    assert what_happened(replayed.events) == what_happened(recorded.events)
    assert files(second.workspace) == files(first.workspace)
