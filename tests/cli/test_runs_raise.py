"""``seamline run --on-budget pause`` and ``seamline runs raise``, as a user runs them,
against the fake OpenAI server: the paused run exits 3 with status ``paused``; the raise
goes on from the stored conversation, and the fake sees as many model requests as an
unpaused run of the same script; a run that is not paused is refused with exit code 2."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from seamline.events import Usage
from seamline.providers.base import BLOCK_ENV
from seamline.providers.registry import create_provider
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.usage import priced_usage
from tests.fakes.openai_api import FakeOpenAI

KEY = "sk-test-raise-SECRET-k3y-4242"
FAST = ["-o", "retry_base_delay=0.01", "-o", "retry_max_delay=0.05", "-o", "max_retries=1"]
USAGE = {"input_tokens": 1000, "output_tokens": 100}


def step(name: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "read_file", "arguments": {"path": name}}], "usage": USAGE}


SCRIPT = [step("a.txt"), step("b.txt"), step("c.txt"), {"text": "read them all", "usage": USAGE}]


def one_request() -> float:
    rates = create_provider("openai", model="gpt-4o").rates("gpt-4o")
    cost = priced_usage(Usage(**USAGE), model="gpt-4o", rates=rates).cost_usd
    assert cost is not None
    return cost


def events_of(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def status_of(store: Path, session_id: str) -> str:
    opened = SQLiteStore(store)
    try:
        return opened.require(session_id).status
    finally:
        opened.close()


@pytest.fixture
def world(cli_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, str], Path]:
    monkeypatch.delenv(BLOCK_ENV, raising=False)
    env = {k: v for k, v in cli_env.items() if k != BLOCK_ENV}
    env.update(OPENAI_API_KEY=KEY, OPENAI_BASE_URL="http://127.0.0.1:9/v1")  # never the vendor
    ws = tmp_path / "ws"
    ws.mkdir()
    for name in ("a.txt", "b.txt", "c.txt"):
        (ws / name).write_text(f"contents of {name}\n")
    return env, ws


def test_a_paused_run_raised_from_the_cli_sends_what_an_unpaused_run_sends(
    seamline_cmd: list[str], world: tuple[dict[str, str], Path], tmp_path: Path
) -> None:
    env, ws = world

    def sh(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*seamline_cmd, *args], env=env, capture_output=True, text=True, timeout=120, cwd=ws)

    def start(fake: FakeOpenAI, store: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        return sh(
            "run", "-p", "openai", "-m", "gpt-4o", "-o", f"base_url={fake.base_url}", *FAST, "--json",
            "--store", str(store), "--workspace", str(ws), *extra, "read the files",
        )  # fmt: skip

    with FakeOpenAI(SCRIPT, api_key=KEY) as fake:
        plain = start(fake, tmp_path / "plain.db")
        assert plain.returncode == 0, plain.stderr
        unpaused = len(fake.model_requests())
    assert unpaused == 4

    store = tmp_path / "runs.db"
    with FakeOpenAI(SCRIPT, api_key=KEY) as fake:
        paused = start(fake, store, "--budget-usd", str(2 * one_request()), "--on-budget", "pause")
        assert paused.returncode == 3, paused.stderr
        first = events_of(paused.stdout)
        assert first[-1]["type"] == "complete" and first[-1]["stop_reason"] == "paused"
        notice = [e for e in first if e["type"] == "error"][-1]
        assert notice["kind"] == "budget" and "paused:" in notice["message"]
        assert len(fake.model_requests()) == 2
        sid = str(first[0]["session_id"])
        assert status_of(store, sid) == "paused"

        raised = sh("runs", "raise", sid[:12], "--budget-usd", str(10 * one_request()), "--json", "--store", str(store))
        assert raised.returncode == 0, raised.stderr
        later = events_of(raised.stdout)
        assert later[-1]["type"] == "complete" and later[-1]["outcome"] == "completed"
        assert later[-1]["text"] == "read them all"
        sent = fake.model_requests()
        assert len(sent) == unpaused  # nothing that finished ran again
        results = [m["content"] for m in sent[2].body["messages"] if m["role"] == "tool"]
        assert len(results) == 2 and "contents of a.txt" in results[0] and "contents of b.txt" in results[1]
        assert status_of(store, sid) == "completed"

        again = sh("runs", "raise", sid, "--budget-usd", "1", "--store", str(store))
    assert again.returncode == 2
    assert "is not paused at its budget (status: completed)" in again.stderr
    assert len(fake.model_requests()) == unpaused  # the refused raise sent nothing


def test_a_pipeline_run_from_the_cli_cannot_pause(seamline_cmd: list[str], cli_env: dict[str, str]) -> None:
    """Nothing would hold a paused pipeline once this process ends: refused before it starts."""
    cmd = [*seamline_cmd, "run", "--pipeline", "single", "--budget-usd", "1", "--on-budget", "pause", "hi"]
    done = subprocess.run(cmd, env=cli_env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "--on-budget pause is for a run this process holds" in done.stderr
