"""What the ``seamline acp`` tests share: scripts, the agent's command line, its environment."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

WRITE_NOTE: list[dict[str, Any]] = [
    {
        "text": "Writing it.",
        "tool_calls": [{"id": "call-w", "name": "write_file", "arguments": {"path": "note.txt", "content": "hi\n"}}],
        "usage": {"input_tokens": 10, "output_tokens": 5, "cost_usd": 0.001},
    },
    {"text": "Done.", "stream": True, "usage": {"input_tokens": 20, "output_tokens": 2, "cost_usd": 0.002}},
]
# A reading tool call first (seen by the client: the turn is surely running), then a
# model call that would take a minute: a cancel must not wait for it.
SLOW: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "call-l", "name": "list_dir", "arguments": {"path": "."}}]},
    {"text": "never", "delay": 60},
]
FAILING: list[dict[str, Any]] = [{"error": {"kind": "quota", "message": "slow down"}}]


def write_script(folder: Path, name: str, script: list[dict[str, Any]]) -> Path:
    path = folder / f"{name}.json"
    path.write_text(json.dumps(script))
    return path


def agent_argv(script: Path, store: Path, *extra: str) -> list[str]:
    """``seamline acp`` on the scripted provider, as a client starts it."""
    return [
        sys.executable,
        "-m",
        "seamline",
        "acp",
        "--provider",
        "scripted",
        "-o",
        f"script={script}",
        "--store",
        str(store),
        "--cancel-grace",
        "1",
        *extra,
    ]


def agent_command(script: Path, store: Path, *extra: str) -> str:
    return shlex.join(agent_argv(script, store, *extra))


def agent_env(home: Path) -> dict[str, str]:
    """The variables the agent needs (the SDK starts it with a trimmed environment)."""
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "PYTHONPATH": str(ROOT / "src"),
        "SEAMLINE_STORE": str(home / "default-store.db"),
        "XDG_DATA_HOME": str(home / "data"),
    }
