"""An agent CLI's turn is journaled: `seamline revert RUN` undoes what Claude Code changed
with its own tools (a file it created, one it edited, one its shell wrote), byte for byte.
The real program against the fake Anthropic API on 127.0.0.1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from seamline.events import FileChange
from seamline.providers.agent_clis.claude_code import ClaudeCodeProvider
from seamline.sandbox.journal import EditJournal, journal_path_for
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.tools.permissions import PermissionService
from tests.providers.agent_cli_support import (
    NOTE,
    ROOT,
    AgentAnthropic,
    CliWorld,
    cli_path,
    collect,
    make_world,
    one_complete,
    run_async,
)

pytestmark = pytest.mark.real
MODEL = "claude-sonnet-4-5"


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliWorld:
    return make_world(tmp_path, monkeypatch)


def edit_script(ws: Path) -> list[dict[str, object]]:
    notes = str(ws / "notes.txt")
    return [
        {"tool_calls": [{"name": "Read", "arguments": {"file_path": notes}}]},
        {
            "tool_calls": [
                {"name": "Edit", "arguments": {"file_path": notes, "old_string": "pelican", "new_string": "heron"}}
            ]
        },
        {"tool_calls": [{"name": "Write", "arguments": {"file_path": str(ws / "made.txt"), "content": "new\n"}}]},
        {
            "tool_calls": [
                {
                    "name": "Bash",
                    "arguments": {
                        "command": f"printf 'x\\0y' > {ws / 'sub' / 'bin.dat'} && echo f > {ws / '.git' / 'FETCH_HEAD'}"
                    },
                }
            ]
        },
        {"text": "Done."},
    ]


@run_async
async def test_revert_undoes_a_claude_code_run_byte_for_byte(world: CliWorld, tmp_path: Path) -> None:
    ws = world.workspace
    (ws / "sub").mkdir()
    (ws / ".git").mkdir()
    (ws / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    store_file = tmp_path / "store.db"
    store = SQLiteStore(store_file)
    service = PermissionService(workspace=ws, yes=True)
    with AgentAnthropic(edit_script(ws), fallback={"text": "side"}) as fake:
        options = {"executable": cli_path("claude"), "base_url": fake.root_url, "max_retries": "0"}
        claude = ClaudeCodeProvider(model=MODEL, options=options)
        session = await claude.open(workspace=ws, store=store, approval=service)
        events = await collect(session, "edit the notes")
        await claude.close(session)
    store.close()
    assert one_complete(events).outcome == "completed"
    assert (ws / "notes.txt").read_text() == NOTE.replace("pelican", "heron")
    assert (ws / "made.txt").read_text() == "new\n" and (ws / "sub" / "bin.dat").read_bytes() == b"x\0y"
    # The shell's file is reported too, though Claude Code's own events do not name it.
    changes = {(e.path, e.kind) for e in events if isinstance(e, FileChange) and e.kind != "read"}
    assert (str(ws / "sub" / "bin.dat"), "created") in changes
    journal = EditJournal(journal_path_for(store_file))
    try:
        steps = journal.steps(session.session_id)
    finally:
        journal.close()
    assert [(s.tool, s.call_id) for s in steps] == [("claude-code", "turn-1")]
    assert set(steps[0].paths) == {"notes.txt", "made.txt", "sub/bin.dat"}  # .git is left out
    done = subprocess.run(
        [sys.executable, "-m", "seamline", "revert", session.session_id, "--store", str(store_file)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (ws / "notes.txt").read_bytes() == NOTE.encode()
    assert not (ws / "made.txt").exists() and not (ws / "sub" / "bin.dat").exists()
    assert (ws / "sub").is_dir() and (ws / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n"
    assert (ws / ".git" / "FETCH_HEAD").read_text() == "f\n"  # .git is not the journal's
