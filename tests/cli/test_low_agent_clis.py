"""The agent CLIs the project's set-up installs under .tools are found off PATH, and
`providers check` says where each one was found."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from seamline.providers.agent_clis.claude_code import ClaudeCodeProvider
from seamline.providers.agent_clis.gemini_cli import GeminiCliProvider

ROOT = Path(__file__).resolve().parents[2]
TOOLS_BIN = ROOT / ".tools" / "agent-clis" / "node_modules" / ".bin"


def installed(name: str) -> Path:
    path = TOOLS_BIN / name
    if not (path.exists() and os.access(path, os.X_OK)):
        pytest.fail(f"the {name} CLI is not installed at {path}; run: bash scripts/system/40-agent-clis.sh")
    return path


def test_project_installed_cli_is_used_when_not_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH
    monkeypatch.delenv("SEAMLINE_AGENT_CLIS", raising=False)
    assert GeminiCliProvider().executable() == str(installed("gemini"))


def test_program_on_path_wins_and_the_extra_folder_is_searched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    extra, on_path = tmp_path / "extra", tmp_path / "bin"
    for folder in (extra, on_path):
        folder.mkdir()
        program = folder / "claude"
        program.write_text("#!/bin/sh\necho 2.1.0\n")
        program.chmod(0o755)
    monkeypatch.setenv("SEAMLINE_AGENT_CLIS", str(extra))
    monkeypatch.setenv("PATH", str(on_path))
    found = ClaudeCodeProvider().locate_executable()
    assert found is not None and found == (str(on_path / "claude"), "on PATH")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    found = ClaudeCodeProvider().locate_executable()
    assert found is not None and found == (str(extra / "claude"), "in $SEAMLINE_AGENT_CLIS")


@pytest.mark.real
def test_providers_check_says_where_the_cli_was_found(
    seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path
) -> None:
    exe = installed("gemini")
    node = shutil.which("node")
    assert node is not None, "the agent CLIs need Node.js"
    only_node = tmp_path / "bin"
    only_node.mkdir()
    (only_node / "node").symlink_to(node)
    env = {**cli_env, "PATH": str(only_node)}  # node, but none of the agent CLIs
    env.pop("SEAMLINE_AGENT_CLIS", None)
    done = subprocess.run(
        [*seamline_cmd, "providers", "check", "gemini-cli", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    report = json.loads(done.stdout)
    executable = next(c for c in report["checks"] if c["name"] == "executable")
    assert executable["ok"] is True, done.stdout
    assert executable["detail"] == f"{exe} (found in the project's .tools (scripts/setup --dev))"
    version = next(c for c in report["checks"] if c["name"] == "version")
    assert version["ok"] is True, version


def test_acp_agents_and_opencode_from_the_set_up_are_found_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from seamline.providers.acp.provider import AcpProvider
    from seamline.providers.opencode.provider import OpenCodeProvider

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("SEAMLINE_AGENT_CLIS", raising=False)
    acp_bin = ROOT / ".tools" / "acp-opencode" / "node_modules" / ".bin"
    if not (acp_bin / "claude-agent-acp").exists():
        pytest.fail(f"the ACP agents are not installed at {acp_bin}; run: bash scripts/system/45-acp-opencode.sh")
    argv = AcpProvider(options={"command": "claude-agent-acp --verbose"}).argv()
    assert argv == [str(acp_bin / "claude-agent-acp"), "--verbose"]
    assert OpenCodeProvider().executable() == str(acp_bin / "opencode")
