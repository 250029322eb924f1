"""Shared pieces of the model-API provider tests (openai, anthropic) against the local fakes.

The suite blocks real providers (``SEAMLINE_BLOCK_REAL_PROVIDERS=1``); these tests point
the providers at a fake on 127.0.0.1 and lift the switch deliberately with the
``model_api_env`` fixture, which also sets test keys.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

import seamline
from seamline.events import Event, encode_event
from seamline.providers.base import BLOCK_ENV
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.tools import Toolset, tool
from tests.fakes._http import FakeAPI

OPENAI_KEY = "sk-test-0penai-SECRET-k3y-123456"
ANTHROPIC_KEY = "sk-ant-test-SECRET-k3y-654321"
ROOT = Path(__file__).resolve().parents[2]

# Retries fast enough for tests; the policy itself is what is under test.
FAST = {"retry_base_delay": "0.01", "retry_max_delay": "0.05", "max_retries": "2"}


@pytest.fixture
def model_api_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Allow the real providers (they only reach 127.0.0.1 here) and give them test keys."""
    monkeypatch.delenv(BLOCK_ENV, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    yield


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def run_turn(
    provider: str,
    fake: FakeAPI,
    *,
    model: str,
    options: Mapping[str, str] | None = None,
    store: SQLiteStore | None = None,
    prompt: str = "go",
) -> seamline.RunResult:
    """One turn of ``provider`` against ``fake`` with the ``lookup`` tool."""
    opts = {"base_url": fake.base_url, **FAST, **dict(options or {})}
    return seamline.run_sync(prompt, provider=provider, model=model, options=opts, tools=Toolset([lookup]), store=store)


def of_type(events: Sequence[Event], name: str) -> list[Any]:
    return [e for e in events if e.type == name]


def raw_log(store: SQLiteStore, session_id: str) -> list[tuple[str, str]]:
    store.flush()
    return [(row.source, row.payload) for row in store.raw_rows(session_id)]


def dump_everything(events: Sequence[Event], store_path: Path | None) -> str:
    """Every byte a leak could hide in: events as JSON and the whole store file's rows."""
    text = "\n".join(encode_event(e).decode() for e in events)
    if store_path is not None:
        with sqlite3.connect(store_path) as db:
            for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'"):
                for row in db.execute(f"SELECT * FROM {name}"):
                    text += "\n" + json.dumps(row, default=str)
        text += store_path.read_bytes().decode("latin-1")
    return text


def cli_run(
    args: Sequence[str], *, env: Mapping[str, str], cwd: Path, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``python -m seamline ARGS`` in a child process (ended before this returns)."""
    full_env = dict(env)
    full_env["PYTHONPATH"] = str(ROOT / "src")
    full_env.pop(BLOCK_ENV, None)
    return subprocess.run(
        [sys.executable, "-m", "seamline", *args],
        env=full_env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def json_events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def cli_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["SEAMLINE_STORE"] = str(tmp_path / "cli-store.db")
    env["OPENAI_API_KEY"] = OPENAI_KEY
    env["ANTHROPIC_API_KEY"] = ANTHROPIC_KEY
    return env


def tool_step(*calls: tuple[str, dict[str, Any]], text: str = "", **usage: int) -> dict[str, Any]:
    """A script entry that asks for tools (parallel when several)."""
    entry: dict[str, Any] = {"tool_calls": [{"name": n, "arguments": a} for n, a in calls]}
    if text:
        entry["text"] = text
    if usage:
        entry["usage"] = usage
    return entry
