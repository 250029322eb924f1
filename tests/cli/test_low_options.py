"""Numbers, URLs and budgets are checked before anything starts: a usage error (exit 2,
one line), never a turn that fails minutes later, retries a bad URL, or runs unbounded."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
from pathlib import Path

import pytest

from seamline.errors import InvalidRequest
from seamline.providers.model_apis.openai_api import OpenAIProvider
from seamline.runner import run, run_sync


def sh(cmd: list[str], env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["-p", "offline", "-o", "max_files=abc"], "max_files='abc' for offline: expected a whole number"),
        (["-p", "offline", "-o", "passages=0"], "passages='0' for offline: must be at least 1"),
        (["-p", "claude-code", "-o", "turn_timeout=nan"], "turn_timeout='nan' for claude-code: expected a finite"),
        (["-p", "gemini-cli", "-o", "grace=-1"], "grace='-1' for gemini-cli: must be more than 0"),
        (["-p", "openai", "-o", "timeout=inf"], "timeout='inf' for openai: expected a finite number"),
        (["-p", "anthropic", "-o", "max_retries=2.5"], "max_retries='2.5' for anthropic: expected a whole number"),
        (["-p", "acp", "-o", "request_timeout=NaN"], "request_timeout='NaN' for acp: expected a finite number"),
        (["-p", "openai", "-o", "base_url=htp:/127.0.0.1"], "base_url='htp:/127.0.0.1' for openai: expected an http"),
        (["-p", "codex", "-o", "base_url=http://"], "the URL names no host"),
        (["-p", "openai", "-o", "base_url=http://127.0.0.1:99999/v1"], "not a URL"),
        (["-p", "offline", "--budget-usd", "nan"], "the budget must be a finite amount of USD"),
        (["-p", "offline", "--budget-usd", "-1"], "the budget must be a finite amount of USD, 0 or more"),
        (["-p", "offline", "--budget-usd", "inf"], "the budget must be a finite amount of USD"),
        (["-p", "openai", "-m", "no-such-model-7", "--budget-usd", "1"], "no price is known for model"),
        (["--pipeline", "single", "-p", "openai", "-m", "no-such-model-7", "--budget-usd", "1"], "no price is known"),
        (["--pipeline", "single", "--budget-usd", "nan"], "the budget must be a finite amount of USD"),
    ],
)
def test_bad_numbers_urls_and_budgets_are_usage_errors(
    seamline_cmd: list[str], cli_env: dict[str, str], args: list[str], needle: str
) -> None:
    done = sh(seamline_cmd, cli_env, "run", *args, "hi")
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert needle in lines[0], lines[0]
    # Refused before any session was kept.
    assert "session_id" not in done.stdout


def test_a_budget_on_a_priced_model_is_accepted(seamline_cmd: list[str], cli_env: dict[str, str]) -> None:
    # The price is known, so the budget is kept; the run then stops only because tests
    # forbid real providers.
    done = sh(seamline_cmd, cli_env, "run", "-p", "openai", "-m", "gpt-4o-mini", "--budget-usd", "1", "hi")
    assert "no price is known" not in done.stderr and "permission error" in done.stderr, done.stderr
    done = sh(seamline_cmd, cli_env, "run", "-p", "offline", "--budget-usd", "0.5", "hi")
    assert done.returncode == 0, done.stderr


def test_run_sync_refuses_a_budget_it_cannot_enforce() -> None:
    with pytest.raises(InvalidRequest, match="no price is known for model 'no-such-model-7' of openai"):
        run_sync("hi", provider=OpenAIProvider(model="no-such-model-7"), budget_usd=1.0, store=None)


def test_run_sync_takes_a_store_path(tmp_path: Path) -> None:
    store = tmp_path / "api-store.db"
    result = run_sync("What is a provider?", workspace=str(tmp_path), store=str(store))
    assert result.outcome == "completed"
    with sqlite3.connect(store) as db:
        assert db.execute("SELECT id FROM sessions").fetchall() == [(result.session_id,)]
    with pytest.raises(InvalidRequest, match="store= takes an open store, a path"):
        asyncio.run(run("hi", store=12))  # type: ignore[arg-type]
