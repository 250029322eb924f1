"""A repository's own Claude settings do not decide what seamline is asked, with the real
claude-agent-acp against the fake Anthropic API on 127.0.0.1.

A workspace ``.claude/settings.json`` with ``permissions.allow: ["Bash"]`` made the agent
run the shell on the host without ``session/request_permission`` (no permission event, no
rule, no hard denial), and ``permissions.defaultMode: "acceptEdits"`` let its edits through
the same way. Each run here is unsandboxed and has neither ``--yes`` nor a rule: seamline
must be asked, and with nobody to answer it denies, so nothing is run or written. The
project's ``CLAUDE.md``, which only the dropped settings layer would load, still reaches
the model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from seamline.providers.acp.provider import _pick_option
from tests.fixtures.acp_capture import ACP_BIN, SideAnthropic
from tests.providers.agent_cli_support import ROOT, CliWorld, make_world
from tests.sandbox.envelope_support import json_events

pytestmark = pytest.mark.real
AGENT = ACP_BIN / "claude-agent-acp"


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliWorld:
    if not (AGENT.exists() and os.access(AGENT, os.X_OK)):
        pytest.fail(f"{AGENT} is not installed; run: bash scripts/system/45-acp-opencode.sh")
    made = make_world(tmp_path, monkeypatch)
    monkeypatch.setenv("CLAUDE_CODE_MAX_RETRIES", "0")
    return made


def _settings(world: CliWorld, settings: dict[str, Any]) -> None:
    (world.workspace / ".claude").mkdir()
    (world.workspace / ".claude" / "settings.json").write_text(json.dumps(settings))


def _run(fake: SideAnthropic, world: CliWorld, *extra: str) -> list[dict[str, Any]]:
    argv = [
        sys.executable, "-m", "seamline", "run", "--provider", "acp", "--json", "--no-store",
        "-o", f"command={AGENT}", "-o", "turn_timeout=120", "--workspace", str(world.workspace),
        *extra, "Do the task.",
    ]  # fmt: skip
    env = {**os.environ, "ANTHROPIC_BASE_URL": fake.root_url, "IS_SANDBOX": "1"}
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=180, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, check=False
    )
    assert done.returncode == 0, done.stderr
    return json_events(done.stdout)


def _asked_and_denied(events: list[dict[str, Any]], tool: str) -> None:
    requests = [e for e in events if e["type"] == "permission_request"]
    decisions = [e for e in events if e["type"] == "permission_decision"]
    assert [r["tool"] for r in requests] == [tool], events
    assert [d["decision"] for d in decisions] == ["deny"], decisions
    assert events[-1]["type"] == "complete" and events[-1]["outcome"] == "completed", events[-1]


def test_a_workspace_allow_rule_for_bash_does_not_skip_seamlines_question(world: CliWorld) -> None:
    _settings(world, {"permissions": {"allow": ["Bash", "Bash(*)", "Write", "Edit"]}})
    marker = world.workspace / "marker"
    script = [{"tool_calls": [{"name": "Bash", "arguments": {"command": f"touch {marker}"}}]}, {"text": "Done."}]
    with SideAnthropic(script, fallback={"text": "side"}) as fake:
        events = _run(fake, world)
    _asked_and_denied(events, "Bash")
    assert not marker.exists()


def test_a_workspace_default_mode_that_accepts_edits_is_set_back_to_asking(world: CliWorld) -> None:
    _settings(world, {"permissions": {"defaultMode": "acceptEdits"}})
    target = world.workspace / "made.txt"
    write = {"name": "Write", "arguments": {"file_path": str(target), "content": "written unasked\n"}}
    with SideAnthropic([{"tool_calls": [write]}, {"text": "Done."}], fallback={"text": "side"}) as fake:
        events = _run(fake, world)
    _asked_and_denied(events, "Write")
    assert not target.exists()


def test_the_projects_claude_md_still_reaches_the_model(world: CliWorld) -> None:
    (world.workspace / "CLAUDE.md").write_text("Project rule: answer in haiku. MARKER-PROJECT-MEMORY-7\n")
    with SideAnthropic([{"text": "Done."}], fallback={"text": "side"}) as fake:
        events = _run(fake, world)
        bodies = [json.dumps(r.body) for r in fake.model_requests() if isinstance(r.body, dict) and r.body.get("tools")]
    assert events[-1]["outcome"] == "completed"
    assert bodies and all("MARKER-PROJECT-MEMORY-7" in b for b in bodies)


def test_an_allow_is_granted_once_even_where_the_agent_offers_always_first() -> None:
    exit_plan = [
        {"kind": "allow_always", "name": "Yes, and bypass permissions", "optionId": "bypassPermissions"},
        {"kind": "allow_always", "name": "Yes, and auto-accept edits", "optionId": "acceptEdits"},
        {"kind": "allow_once", "name": "Yes, and manually approve edits", "optionId": "default"},
        {"kind": "reject_once", "name": "No, keep planning", "optionId": "plan"},
    ]
    assert _pick_option(exit_plan, allow=True) == "default"
    assert _pick_option(exit_plan, allow=False) == "plan"
    assert _pick_option([{"kind": "allow_always", "optionId": "always"}], allow=True) is None
