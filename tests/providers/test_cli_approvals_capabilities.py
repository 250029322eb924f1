"""`providers list` says, per backend, which of an agent's own tool calls seamline decides."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.providers.agent_cli_support import ROOT


def test_providers_list_names_the_approval_path_of_each_backend() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "seamline", "providers", "list", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in map(json.loads, done.stdout.splitlines())}
    approval = {name: row["capabilities"]["tool_approval"] for name, row in rows.items()}
    assert approval["claude-code"] == "every_call" and approval["openai"] == "every_call"
    assert approval["acp"] == "asked" and approval["opencode"] == "asked"
    assert approval["codex"] == "every_call" and approval["gemini-cli"] == "every_call"
    assert approval["a2a"] == "sandbox"  # a remote agent's tools run where it runs: none is asked of seamline


def test_providers_list_says_where_each_backends_key_is() -> None:
    # What issue 43 has done and what remains: only the gateway keeps the key out of a program.
    listed = subprocess.run(
        [sys.executable, "-m", "seamline", "providers", "list", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
    keys = {row["name"]: row["capabilities"]["keys"] for row in map(json.loads, listed.stdout.splitlines())}
    assert keys == {
        "offline": "none",
        "scripted": "none",
        "claude-code": "gateway",
        "codex": "gateway",
        "gemini-cli": "gateway",
        "openai": "in_process",
        "anthropic": "in_process",
        "acp": "gateway_or_environment",
        "opencode": "gateway_or_environment",
        "a2a": "in_process",  # the token stays in seamline's process; the agent's own keys are its own
    }
    text = subprocess.run(
        [sys.executable, "-m", "seamline", "providers", "list"], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert "keys=gateway\n" in text.stdout and "keys=gateway_or_environment" in text.stdout
