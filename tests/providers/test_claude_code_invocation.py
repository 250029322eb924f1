"""claude-code without the real program: argv dialect, environment, capabilities,
preflight, seeding, transcript location, and the driver's bounds (against stand-in
executables that misbehave on purpose)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import sys
from pathlib import Path

import pytest

from seamline.events import Complete, Error, Raw, Session
from seamline.providers.agent_clis.claude_code import ClaudeCodeProvider
from seamline.providers.base import ProviderSession
from seamline.providers.registry import create_provider
from seamline.transport.env import compose_env
from seamline.transport.subprocess import group_members


def session_of(provider: ClaudeCodeProvider, tmp_path: Path) -> ProviderSession:
    return ProviderSession(provider=provider, session_id="0" * 32, workspace=tmp_path, store=None, tools=None)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in CLIs need no key, but a session checks for one before it starts."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")


def stand_in(tmp_path: Path, body: str, name: str = "claude") -> Path:
    """An executable that plays a CLI: a Python script."""
    path = tmp_path / "bin" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_registered_with_truthful_capabilities() -> None:
    provider = create_provider("claude-code")
    assert isinstance(provider, ClaudeCodeProvider)
    caps = provider.capabilities()
    assert (caps.forking, caps.session_ids, caps.cost_source, caps.budget) == (
        "native",
        "seamline",
        "reported",
        "native",
    )
    assert caps.runs_own_tools and caps.resume == "native" and caps.result_cadence == "turn"


def test_argv_for_fresh_resumed_and_forked_sessions(tmp_path: Path) -> None:
    provider = ClaudeCodeProvider(model="claude-opus-4-1", options={"effort": "high", "max_budget_usd": "0.5"})
    session = session_of(provider, tmp_path)
    common = [
        "--model",
        "claude-opus-4-1",
        "--effort",
        "high",
        "--max-budget-usd",
        "0.5",
        "--allowedTools",
        "Bash",
        "Read",
        "--setting-sources",
        "user",
    ]
    head = ["claude", "-p", "hi", "--output-format", "stream-json", "--verbose", "--include-partial-messages"]
    ours = "00000000-0000-0000-0000-000000000000"
    fresh = provider._invocation(session=session, prompt="hi", executable="claude", mode="fresh", target=None)
    assert fresh.argv == [*head, "--session-id", ours, *common]
    resumed = provider._invocation(session=session, prompt="hi", executable="claude", mode="resume", target="abc")
    assert resumed.argv == [*head, "--resume", "abc", *common]
    forked = provider._invocation(session=session, prompt="hi", executable="claude", mode="fork", target="abc")
    assert forked.argv == [*head, "--resume", "abc", "--fork-session", "--session-id", ours, *common]


def test_env_keys_and_none_unsets(tmp_path: Path) -> None:
    provider = ClaudeCodeProvider(options={"base_url": "http://127.0.0.1:9", "max_retries": "4"})
    invocation = provider._invocation(
        session=session_of(provider, tmp_path), prompt="hi", executable="claude", mode="fresh", target=None
    )
    env = compose_env({"CLAUDECODE": "1", "PATH": "/bin"}, invocation.env)
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9" and env["CLAUDE_CODE_MAX_RETRIES"] == "4"
    assert "CLAUDECODE" not in env and env["PATH"] == "/bin"


def test_preflight_names_the_install_command_when_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("seamline.providers.programs.lookup._places", list)  # not the project's .tools either
    checks = asyncio.run(ClaudeCodeProvider().preflight())
    assert [(c.name, c.ok) for c in checks] == [("executable", False)]
    assert checks[0].fix == "npm install -g @anthropic-ai/claude-code@2.1.197"


def test_preflight_version_range_and_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = stand_in(tmp_path, "print('1.0.3 (Claude Code)')\n")
    monkeypatch.setenv("PATH", str(old.parent))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    checks = {c.name: c for c in asyncio.run(ClaudeCodeProvider().preflight())}
    assert checks["executable"].ok and checks["executable"].detail == f"{old} (found on PATH)"
    assert not checks["version"].ok and "1.0.3" in checks["version"].detail and checks["version"].fix
    assert not checks["credentials"].ok and "ANTHROPIC_API_KEY" in (checks["credentials"].fix or "")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    stand_in(tmp_path, "print('2.1.197 (Claude Code)')\n")
    checks = {c.name: c for c in asyncio.run(ClaudeCodeProvider().preflight())}
    assert all(c.ok for c in checks.values()), checks


def test_missing_executable_option_fails_the_turn_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEAMLINE_BLOCK_REAL_PROVIDERS")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")  # credentials are checked first, at open
    provider = ClaudeCodeProvider(options={"executable": str(tmp_path / "nope")})

    async def go() -> list[object]:
        session = await provider.open(workspace=tmp_path)
        return [e async for e in session.send("hi")]

    events = asyncio.run(go())
    errors = [e for e in events if isinstance(e, Error)]
    assert (
        errors[0].kind == "invalid_request" and "npm install -g @anthropic-ai/claude-code@2.1.197" in errors[0].message
    )
    assert isinstance(events[-1], Complete) and events[-1].outcome == "failed"


def test_seeding_copies_config_and_referenced_files_but_not_sessions(tmp_path: Path) -> None:
    parent = tmp_path / "parent"
    config = parent / ".claude"
    (config / "hooks").mkdir(parents=True)
    (config / "projects" / "-x").mkdir(parents=True)
    (config / "hooks" / "status.sh").write_text("echo hi\n")
    (config / "projects" / "-x" / "s.jsonl").write_text("{}\n")
    (config / "settings.json").write_text(json.dumps({"statusLine": {"type": "command", "command": "hooks/status.sh"}}))
    node = tmp_path / "node"
    ClaudeCodeProvider().seed(node, parent)
    assert json.loads((node / ".claude" / "settings.json").read_text())["statusLine"]["command"] == "hooks/status.sh"
    assert (node / ".claude" / "hooks" / "status.sh").read_text() == "echo hi\n"
    assert not (node / ".claude" / "projects").exists()


def test_transcript_location_and_fallback_for_our_own_id_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    provider = ClaudeCodeProvider()
    workspace = tmp_path / "my ws.1"
    session = ProviderSession(provider=provider, session_id="s", workspace=workspace, store=None, tools=None)  # type: ignore[arg-type]
    assert provider.transcript_location(session) is None  # no provider id recorded yet
    session.provider_session_id = "abc-123"
    # Claude Code names the folder after the cwd, every character but letters and digits a dash.
    slug = re.sub(r"[^A-Za-z0-9]", "-", str(workspace))
    expected = tmp_path / ".claude" / "projects" / slug / "abc-123.jsonl"
    assert provider.transcript_location(session) == expected  # expected path, even before it exists
    elsewhere = tmp_path / ".claude" / "projects" / "-moved" / "abc-123.jsonl"
    elsewhere.parent.mkdir(parents=True)
    elsewhere.write_text("{}\n")
    (elsewhere.parent / "other-id.jsonl").write_text("{}\n")
    assert provider.transcript_location(session) == elsewhere
    session.provider_session_id = "../etc"
    assert provider.transcript_location(session) is None  # ids that could escape are refused


RETRIES_FOREVER = """
import json, sys, time
print(json.dumps({"type": "system", "subtype": "init", "session_id": "retry-1", "model": "m"}), flush=True)
n = 0
while True:
    n += 1
    print(json.dumps({"type": "system", "subtype": "api_retry", "attempt": n, "error_status": 529, "error": "overloaded"}), flush=True)
    time.sleep(0.05)
"""

SILENT = """
import json, signal, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
print(json.dumps({"type": "system", "subtype": "init", "session_id": "slow-1"}), flush=True)
time.sleep(60)
"""


def drive(
    tmp_path: Path, script: str, monkeypatch: pytest.MonkeyPatch, **options: str
) -> tuple[list[object], list[int]]:
    monkeypatch.delenv("SEAMLINE_BLOCK_REAL_PROVIDERS")
    provider = ClaudeCodeProvider(options={"executable": str(stand_in(tmp_path, script)), **options})

    async def go() -> tuple[list[object], list[int]]:
        session = await provider.open(workspace=tmp_path)
        events = [e async for e in session.send("hi")]
        return events, group_members(session.state["cli_process"].pgid)

    return asyncio.run(go())


def test_our_retry_bound_stops_a_cli_that_retries_for_ever(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events, left = drive(tmp_path, RETRIES_FOREVER, monkeypatch, max_retries="3", grace="0.5")
    errors = [e for e in events if isinstance(e, Error)]
    assert [e.attempt for e in errors[:-1]] == [1, 2, 3, 4]
    # Issue 14, item 13: the give-up is classified by what was retried (529: provider), not as a timeout.
    assert (errors[-1].kind, errors[-1].retryable) == ("provider", True) and "retried 4 times" in errors[-1].message
    assert isinstance(events[-1], Complete) and events[-1].stop_reason == "provider" and left == []


KILLED_FROM_OUTSIDE = """
import json, os, signal
print(json.dumps({"type": "system", "subtype": "init", "session_id": "gone-1", "model": "m"}), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""

DIES_ON_SIGTERM = """
import json, signal, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
print(json.dumps({"type": "system", "subtype": "init", "session_id": "slow-2", "model": "m"}), flush=True)
time.sleep(60)
"""


def test_diagnostic_names_a_signal_sent_from_outside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 14, item 15: nobody here signalled it, yet SIGKILL ended it: the diagnostic says so.
    events, left = drive(tmp_path, KILLED_FROM_OUTSIDE, monkeypatch, grace="0.5")
    diagnostics = [e.payload for e in events if isinstance(e, Raw) and e.source == "seamline"]
    assert len(diagnostics) == 1 and diagnostics[0]["signal"] == "SIGKILL"
    assert diagnostics[0]["signals_sent"] == "none" and diagnostics[0]["by"] == "outside"
    assert isinstance(events[-1], Complete) and events[-1].outcome == "failed" and left == []


def test_diagnostic_names_the_signal_that_ended_an_aborted_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEAMLINE_BLOCK_REAL_PROVIDERS")
    provider = ClaudeCodeProvider(options={"executable": str(stand_in(tmp_path, DIES_ON_SIGTERM)), "grace": "0.5"})

    async def go() -> tuple[list[object], list[int]]:
        session = await provider.open(workspace=tmp_path)
        events: list[object] = []
        aborting = None
        async for event in session.send("hi"):
            events.append(event)
            if aborting is None and isinstance(event, Session) and event.provider_session_id:
                aborting = asyncio.create_task(provider.abort(session))
        assert aborting is not None
        await aborting
        return events, group_members(session.state["cli_process"].pgid)

    events, left = asyncio.run(go())
    diagnostics = [e.payload for e in events if isinstance(e, Raw) and e.source == "seamline"]
    assert [(d["signal"], d["signals_sent"]) for d in diagnostics] == [("SIGTERM", "SIGTERM")]
    assert isinstance(events[-1], Complete) and events[-1].outcome == "aborted" and left == []


def test_turn_timeout_ends_a_cli_that_ignores_sigint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events, left = drive(tmp_path, SILENT, monkeypatch, turn_timeout="1", grace="0.5")
    assert [e.kind for e in events if isinstance(e, Error)] == ["timeout"]
    assert isinstance(events[-1], Complete) and events[-1].outcome == "failed" and left == []


def test_executable_found_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    found = stand_in(tmp_path, "print('2.1.197')\n")
    monkeypatch.setenv("PATH", f"{found.parent}{os.pathsep}/usr/bin")
    assert ClaudeCodeProvider().executable() == str(found)
    assert ClaudeCodeProvider(options={"executable": str(found)}).executable() == str(found)
    assert ClaudeCodeProvider(options={"executable": str(tmp_path / "none")}).executable() is None
