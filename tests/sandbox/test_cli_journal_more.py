"""The Gemini CLI's and Codex's turns are journaled as Claude Code's are: `seamline revert
RUN` undoes what the agent changed with its own tools (a file its write tool made, a file
its shell changed), byte for byte. The real programs against the fake APIs on 127.0.0.1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from seamline.events import Event
from seamline.providers.agent_clis.base import AgentCliProvider
from seamline.providers.agent_clis.codex import CodexProvider
from seamline.providers.agent_clis.gemini_cli import GeminiCliProvider
from seamline.sandbox.journal import EditJournal, journal_path_for
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.tools.permissions import PermissionService
from tests.fakes.gemini_api import FakeGemini
from tests.providers.agent_cli_support import (
    NOTE,
    ROOT,
    AgentOpenAI,
    CliWorld,
    cli_path,
    collect,
    make_gemini_world,
    make_world,
    one_complete,
    run_async,
)

pytestmark = pytest.mark.real


async def _journaled_turn(provider: AgentCliProvider, ws: Path, store_file: Path) -> tuple[str, list[Event]]:
    store = SQLiteStore(store_file)
    service = PermissionService(workspace=ws, yes=True)
    try:
        session = await provider.open(workspace=ws, store=store, approval=service)
        events = await collect(session, "edit the notes")
        await provider.close(session)
    finally:
        store.close()
    return session.session_id, events


def _journal_paths(store_file: Path, session_id: str) -> list[tuple[str, set[str]]]:
    journal = EditJournal(journal_path_for(store_file))
    try:
        return [(s.tool, set(s.paths)) for s in journal.steps(session_id)]
    finally:
        journal.close()


def _revert(store_file: Path, session_id: str) -> None:
    argv = [sys.executable, "-m", "seamline", "revert", session_id, "--store", str(store_file)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr


@run_async
async def test_revert_undoes_a_gemini_cli_run_byte_for_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    world: CliWorld = make_gemini_world(tmp_path, monkeypatch, request)
    ws = world.workspace
    store_file = tmp_path / "store.db"
    script: list[dict[str, object]] = [
        {"tool_calls": [{"name": "write_file", "arguments": {"file_path": str(ws / "made.txt"), "content": "new\n"}}]},
        {"tool_calls": [{"name": "run_shell_command", "arguments": {"command": "sed -i s/pelican/heron/ notes.txt"}}]},
        {"text": "Done."},
    ]
    with FakeGemini(script, fallback={"text": "side"}) as fake:
        options = {"executable": cli_path("gemini"), "base_url": fake.root_url, "max_retries": "0"}
        session_id, events = await _journaled_turn(
            GeminiCliProvider(model="gemini-2.5-flash", options=options), ws, store_file
        )
    assert one_complete(events).outcome == "completed", events
    assert (ws / "made.txt").read_text() == "new\n"
    assert (ws / "notes.txt").read_text() == NOTE.replace("pelican", "heron")
    assert _journal_paths(store_file, session_id) == [("gemini-cli", {"made.txt", "notes.txt"})]
    _revert(store_file, session_id)
    assert (ws / "notes.txt").read_bytes() == NOTE.encode()
    assert not (ws / "made.txt").exists()


@run_async
async def test_revert_undoes_a_codex_run_byte_for_byte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    world = make_world(tmp_path, monkeypatch)
    ws = world.workspace
    store_file = tmp_path / "store.db"
    patch = "*** Begin Patch\n*** Add File: made.txt\n+new\n*** End Patch\n"
    script: list[dict[str, object]] = [
        {"custom_tool_calls": [{"name": "apply_patch", "input": patch}]},
        {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "sed -i s/pelican/heron/ notes.txt"}}]},
        {"text": "Done."},
    ]
    with AgentOpenAI(script) as fake:
        options = {"executable": cli_path("codex"), "base_url": fake.base_url, "sandbox": "danger-full-access"}
        session_id, events = await _journaled_turn(CodexProvider(model="gpt-5.5", options=options), ws, store_file)
    assert one_complete(events).outcome == "completed", events
    assert (ws / "made.txt").read_text() == "new\n"
    assert (ws / "notes.txt").read_text() == NOTE.replace("pelican", "heron")
    assert _journal_paths(store_file, session_id) == [("codex", {"made.txt", "notes.txt"})]
    _revert(store_file, session_id)
    assert (ws / "notes.txt").read_bytes() == NOTE.encode()
    assert not (ws / "made.txt").exists()
