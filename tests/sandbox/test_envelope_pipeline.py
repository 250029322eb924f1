"""`seamline run --pipeline --sandbox bwrap`: a role bound to an agent CLI runs in the
envelope (Claude Code, the real program, real bubblewrap), as a plain run's backend does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from seamline.definitions import RoleBinding
from seamline.pipeline.builtin import SINGLE
from tests.providers.agent_cli_support import ROOT, AgentAnthropic, CliWorld, cli_path, make_world

pytestmark = pytest.mark.real


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bwrap_ready: None) -> CliWorld:
    return make_world(tmp_path, monkeypatch)


def test_a_role_bound_to_an_agent_cli_runs_in_the_envelope(world: CliWorld, tmp_path: Path) -> None:
    escaped = tmp_path / "outside-escaped"
    script = [
        {"tool_calls": [{"name": "Bash", "arguments": {"command": f"touch {escaped}; echo tried"}}]},
        {"text": "Done."},
    ]
    with AgentAnthropic(script, fallback={"text": "side"}) as fake:
        options = {"executable": cli_path("claude"), "base_url": fake.root_url, "max_retries": "0"}
        binding = RoleBinding(kind="agent", provider="claude-code", model="claude-sonnet-4-5", options=options)
        definition = SINGLE.to_data()
        definition["name"] = "boxed"
        definition["roles"] = {"agent": msgspec.to_builtins(binding)}
        path = tmp_path / "boxed.json"
        path.write_text(json.dumps(definition))
        argv = [
            sys.executable, "-m", "seamline", "run", "--pipeline", str(path), "--sandbox", "bwrap", "--yes",
            "--json", "--store", str(tmp_path / "s.db"), "--workspace", str(world.workspace), "go",
        ]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=ROOT, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert any(e["type"] == "tool_call" and e["name"] == "Bash" for e in events), done.stdout[-2000:]
    assert not escaped.exists()
