"""What the real agent-CLI tests share: where the pinned CLIs live, an isolated HOME for
each run, fake-server scripts per scenario, and checks that no process was left behind.

The CLIs are installed by ``bash scripts/system/40-agent-clis.sh`` (part of
``bash scripts/setup --dev``); a test that needs one and does not find it fails, naming
that command.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from seamline.events import Complete, Event
from seamline.providers.agent_clis.base import AgentCliProvider
from seamline.providers.base import ProviderSession
from seamline.transport.subprocess import group_members
from tests.fakes._http import JsonReply, RecordedRequest, StreamReply
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.openai_api import FakeOpenAI

ROOT = Path(__file__).resolve().parents[2]
TOOLS_BIN = ROOT / ".tools" / "agent-clis" / "node_modules" / ".bin"
SETUP_COMMAND = "bash scripts/system/40-agent-clis.sh"
NOTE = "the secret word is pelican\n"

# Environment keys that would point a CLI at a real service or change its behaviour.
_SCRUB = (
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_GEMINI_BASE_URL",
    "CLAUDE_CONFIG_DIR",
    "CODEX_HOME",
    "GEMINI_CLI_HOME",
    "CLAUDECODE",
)


def cli_path(name: str) -> str:
    """The pinned CLI ``name``; fails the test (not skips) when it is not installed."""
    path = TOOLS_BIN / name
    if not (path.exists() and os.access(path, os.X_OK)):
        pytest.fail(f"the {name} CLI is not installed at {path}; run: {SETUP_COMMAND}")
    return str(path)


@dataclass
class CliWorld:
    """An isolated HOME and workspace for one test, with real providers allowed."""

    home: Path
    workspace: Path


def make_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliWorld:
    home = tmp_path / "home"
    workspace = tmp_path / "ws"
    home.mkdir()
    workspace.mkdir()
    (workspace / "notes.txt").write_text(NOTE)
    for key in _SCRUB:
        monkeypatch.delenv(key, raising=False)
    # The provider is real, only its API is our fake: lift the switch on purpose.
    monkeypatch.delenv("SEAMLINE_BLOCK_REAL_PROVIDERS", raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CODEX_HOME", str(home / ".codex"))
    (home / ".codex").mkdir()
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-fake-test")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-test")
    monkeypatch.setenv("GEMINI_API_KEY", "fake-gemini-key")
    monkeypatch.setenv("DISABLE_AUTOUPDATER", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    return CliWorld(home=home, workspace=workspace)


def private_runtime_dir(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Path:
    """A folder only this user can write, with none above it writable by others, as
    ``$XDG_RUNTIME_DIR`` (a login's ``/run/user/UID`` is one; the tests' ``/tmp`` is not):
    the Gemini CLI reads seamline's settings file, which carries its approval hook, only
    from such a folder. Made under the real home's ``.cache``; removed after the test."""
    import pwd
    import shutil
    import tempfile

    base = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache"
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    if any(p.stat().st_mode & 0o022 for p in (base, *base.parents)):
        pytest.fail(f"no private folder for the Gemini CLI's settings: {base} or a folder above it is shared")
    made = Path(tempfile.mkdtemp(prefix="seamline-test-", dir=base))
    request.addfinalizer(lambda: shutil.rmtree(made, ignore_errors=True))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(made))
    return made


def make_gemini_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> CliWorld:
    """A world for the Gemini CLI as a user configures it: API-key auth and one attempt per
    call in the user's settings, and a private ``$XDG_RUNTIME_DIR`` where the CLI reads
    seamline's own settings file (its approval hook)."""
    made = make_world(tmp_path, monkeypatch)
    private_runtime_dir(monkeypatch, request)
    settings = {"security": {"auth": {"selectedType": "gemini-api-key"}}, "general": {"maxAttempts": 1}}
    (made.home / ".gemini").mkdir()
    (made.home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    return made


async def collect(session: ProviderSession, prompt: str, **kwargs: Any) -> list[Event]:
    return [event async for event in session.send(prompt, **kwargs)]


def one_complete(events: list[Event]) -> Complete:
    completes = [e for e in events if isinstance(e, Complete)]
    assert len(completes) == 1, events
    assert events[-1] is completes[0]
    return completes[0]


def assert_group_gone(session: ProviderSession) -> None:
    proc = session.state.get("cli_process")
    assert proc is not None, "the turn never started a process"
    assert group_members(proc.pgid) == [], f"processes left in group {proc.pgid}"


async def abort_when(
    provider: AgentCliProvider,
    session: ProviderSession,
    prompt: str,
    ready: Callable[[Event], bool],
) -> list[Event]:
    """Run a turn and abort it once ``ready`` says so; returns every event of the turn."""
    events: list[Event] = []
    aborting: asyncio.Task[None] | None = None
    async for event in session.send(prompt):
        events.append(event)
        if aborting is None and ready(event):
            aborting = asyncio.create_task(provider.abort(session))
    if aborting is not None:
        await aborting
    return events


def request_texts(body: Any) -> str:
    """Everything a recorded request body says, flattened, for 'did the server see X' checks."""
    return str(body)


class AgentAnthropic(FakeAnthropic):
    """The fake Anthropic API, with Claude Code's side requests kept off the script.

    Claude Code asks for a session title now and then (no tools, a JSON-schema output
    format); that request gets the ``fallback`` entry so the script stays the conversation.
    """

    def _take(self, request: RecordedRequest) -> dict[str, Any] | None:
        body = request.body if isinstance(request.body, dict) else {}
        if not body.get("tools") or "output_config" in body:
            return self.fallback or {"text": '{"title": "side"}'}
        return super()._take(request)

    def turn_requests(self) -> list[RecordedRequest]:
        """The model requests of the conversation itself (side requests left out)."""
        return [
            r
            for r in self.model_requests()
            if isinstance(r.body, dict) and r.body.get("tools") and "output_config" not in r.body
        ]


def run_async(test: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """Run an ``async def`` test on its own event loop (the suite has no asyncio plugin)."""

    @functools.wraps(test)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))  # type: ignore[arg-type]

    return wrapper


FIXTURES = ROOT / "tests" / "fixtures"


def fixture_lines(provider: str, scenario: str) -> list[bytes]:
    """The lines a real CLI printed, as captured by ``tests/fixtures/capture.py``."""
    return (FIXTURES / provider / f"{scenario}.jsonl").read_bytes().splitlines()


def fixture_meta(provider: str, scenario: str) -> dict[str, Any]:
    import json

    meta: dict[str, Any] = json.loads((FIXTURES / provider / f"{scenario}.json").read_text())
    return meta


def replay(
    parser: Any,
    lines: list[bytes],
    *,
    returncode: int | None = 0,
    aborted: bool = False,
) -> list[Event]:
    """Feed every line to ``parser`` and finish the turn, as the provider does."""
    events: list[Event] = []
    for line in lines:
        events.extend(parser.feed(line))
    events.extend(parser.finish(returncode=returncode, aborted=aborted))
    return events


class AgentOpenAI(FakeOpenAI):
    """The fake OpenAI API, plus the Responses ``custom_tool_call`` items Codex's freeform
    tools (``apply_patch``) need: an entry ``{"custom_tool_calls": [{"name", "input"}]}``."""

    def answer(self, request: RecordedRequest, body: dict[str, Any], entry: dict[str, Any]) -> JsonReply | StreamReply:
        customs = entry.get("custom_tool_calls")
        if not customs:
            return super().answer(request, body, entry)
        stand_in = [{"name": c["name"], "arguments": {"__custom_input": c["input"]}} for c in customs]
        reply = super().answer(request, body, {**entry, "tool_calls": stand_in})
        if not isinstance(reply, StreamReply):
            return reply
        frames: list[bytes] = []
        for frame in reply.frames:
            head, _, data = frame.partition(b"data: ")
            payload = json.loads(data)
            if payload.get("type", "").startswith("response.function_call_arguments"):
                continue
            _customize(payload)
            frames.append(head + b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n")
        reply.frames = frames
        return reply


def _customize(value: Any) -> None:
    """Turn stand-in function calls into custom tool calls, wherever they sit in a payload."""
    if isinstance(value, dict):
        if value.get("type") == "function_call" and "__custom_input" in str(value.get("arguments", "")):
            arguments = value.pop("arguments")
            value["type"] = "custom_tool_call"
            value["input"] = json.loads(arguments)["__custom_input"] if arguments else ""
        elif value.get("type") == "function_call" and value.get("arguments") == "":
            value.pop("arguments")
            value["type"] = "custom_tool_call"
            value["input"] = ""
        for inner in value.values():
            _customize(inner)
    elif isinstance(value, list):
        for inner in value:
            _customize(inner)
