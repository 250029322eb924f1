"""An ACP agent's own tool calls reach seamline's permission service with the same rules and
hard denials, and its turn is journaled so `seamline revert` undoes it: claude-agent-acp
(the real program) against the fake Anthropic API on 127.0.0.1; plus the translator's
reads and Gemini's shell commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from seamline.events import FileChange, ToolCall
from seamline.providers.acp.agent_process import tool_arguments
from seamline.providers.acp.translator import AcpTranslator
from seamline.providers.agent_clis.approvals import agent_tool
from seamline.tools.permissions import PermissionService
from tests.providers.agent_cli_support import ROOT, CliWorld, make_world
from tests.providers.test_acp_real import AcpAnthropic, agent_command, bash_script, processes_in

pytestmark = pytest.mark.real


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliWorld:
    w = make_world(tmp_path, monkeypatch)
    monkeypatch.setenv("IS_SANDBOX", "1")  # Claude Code refuses to run as root without it
    monkeypatch.setenv("CLAUDE_CODE_MAX_RETRIES", "0")
    return w


def seamline(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "seamline", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
        check=False,
    )


def run_acp(world: CliWorld, fake: AcpAnthropic, store: Path, *extra: str) -> list[dict[str, Any]]:
    env = dict(os.environ, ANTHROPIC_BASE_URL=fake.root_url)
    done = seamline(
        "run", "--provider", "acp", "--json", "--store", str(store),
        "--provider-option", f"command={agent_command()}",
        "--workspace", str(world.workspace), *extra, "Do it",
        env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert processes_in(world.workspace) == []
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_a_stored_deny_rule_refuses_the_acp_agents_shell_call(world: CliWorld, tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    marker = world.workspace / "marker"
    env = dict(os.environ, SEAMLINE_STORE=str(store))
    added = seamline("permissions", "add", "deny", "--tool", "Bash", "--pattern", "command=touch*", env=env)
    assert added.returncode == 0, added.stderr
    with AcpAnthropic(bash_script(f"touch {marker}"), fallback={"text": "side"}) as fake:
        events = run_acp(world, fake, store, "--yes")  # --yes: only the rule can refuse it
    decisions = [e for e in events if e["type"] == "permission_decision"]
    assert [d["decision"] for d in decisions] == ["deny"] and "denied by rule" in decisions[0]["reason"]
    assert events[-1]["type"] == "complete" and not marker.exists()


def test_the_hard_denial_refuses_rm_rf_outside_even_with_yes(world: CliWorld, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep\n")
    with AcpAnthropic(bash_script(f"rm -rf {outside}"), fallback={"text": "side"}) as fake:
        events = run_acp(world, fake, tmp_path / "store.db", "--yes")
    decisions = [e for e in events if e["type"] == "permission_decision"]
    assert [d["decision"] for d in decisions] == ["deny"] and "hard denial" in decisions[0]["reason"]
    assert (outside / "keep.txt").read_text() == "keep\n"


def test_revert_undoes_what_the_acp_agent_wrote(world: CliWorld, tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    notes = world.workspace / "notes.txt"
    before = notes.read_bytes()
    command = f"echo changed >> {notes} && printf 'a\\0b' > {world.workspace / 'made.bin'}"
    with AcpAnthropic(bash_script(command), fallback={"text": "side"}) as fake:
        events = run_acp(world, fake, store, "--yes")
    assert notes.read_bytes() == before + b"changed\n" and (world.workspace / "made.bin").exists()
    changes = {(e["path"], e["kind"]) for e in events if e["type"] == "file_change"}
    assert {(str(notes), "edited"), (str(world.workspace / "made.bin"), "created")} <= changes
    assert [e["type"] for e in events][-1] == "complete"
    run_id = events[0]["session_id"]
    done = seamline("revert", run_id, "--store", str(store))
    assert done.returncode == 0, done.stderr
    assert notes.read_bytes() == before and not (world.workspace / "made.bin").exists()


def test_an_agents_own_read_is_a_file_change_read_once() -> None:
    translator = AcpTranslator()
    announce = {"sessionUpdate": "tool_call", "toolCallId": "r1", "title": "Read notes.txt", "kind": "read"}
    located = {"sessionUpdate": "tool_call_update", "toolCallId": "r1", "status": "in_progress",
               "locations": [{"path": "/ws/notes.txt"}, {"path": "/ws/notes.txt", "line": 3}]}  # fmt: skip
    done = {"sessionUpdate": "tool_call_update", "toolCallId": "r1", "status": "completed", "rawOutput": "x"}
    events = [e for item in (announce, located, done) for e in translator.feed(item)]
    reads = [e for e in events if isinstance(e, FileChange)]
    assert reads == [FileChange(path="/ws/notes.txt", kind="read", call_id="r1")]
    call = next(i for i, e in enumerate(events) if isinstance(e, ToolCall))
    assert call < events.index(reads[0])


def test_a_gemini_shell_call_without_input_is_judged_by_its_command(tmp_path: Path) -> None:
    call = {"toolCallId": "run_shell_command__run_shell_command_1_0", "kind": "execute", "title": "rm -rf /etc"}
    arguments = tool_arguments(call, "run_shell_command")
    assert arguments == {"command": "rm -rf /etc"}
    service = PermissionService(workspace=tmp_path, yes=True)
    effect, reason = service.evaluate(agent_tool("run_shell_command"), arguments)
    assert effect == "deny" and "hard denial" in reason
