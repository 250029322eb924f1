"""Resume and fork keep what the session was started with; a flag given again overrides."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import seamline
from seamline.providers.base import BLOCK_ENV
from seamline.sessions.sqlite_store import SQLiteStore
from tests.fakes.openai_api import FakeOpenAI

KEY = "sk-test-resume-SECRET-k3y-777"
FAST = {"retry_base_delay": "0.01", "retry_max_delay": "0.05", "max_retries": "1"}


def sh(cmd: list[str], env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=120)


def session_of(stdout: str) -> str:
    return str(json.loads(stdout.splitlines()[0])["session_id"])


def record(store: Path, session_id: str) -> dict[str, object]:
    opened = SQLiteStore(store)
    try:
        return opened.require(session_id).run_options
    finally:
        opened.close()


def test_resume_and_fork_keep_provider_options_system_prompt_and_allowlist(
    seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(BLOCK_ENV, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    # A forgotten base_url falls back to this dead local port, never to the vendor.
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    env = {k: v for k, v in cli_env.items() if k != BLOCK_ENV}
    env.update(OPENAI_API_KEY=KEY, OPENAI_BASE_URL="http://127.0.0.1:9/v1")
    store = tmp_path / "s.db"
    ws = tmp_path / "ws"
    ws.mkdir()
    script = [{"text": word} for word in ("un", "deux", "trois", "quatre")]
    with FakeOpenAI(script, api_key=KEY) as fake:
        first = seamline.run_sync(
            "first",
            provider="openai",
            model="gpt-4o",
            options={"base_url": fake.base_url, **FAST},
            workspace=ws,
            store=str(store),
            instructions="Answer in French",
            allow=["read_file"],
        )
        assert first.outcome == "completed"
        sid = first.session_id
        resumed = sh(seamline_cmd, env, "sessions", "resume", sid, "second", "--json", "--store", str(store))
        assert resumed.returncode == 0, resumed.stderr
        forked = sh(seamline_cmd, env, "sessions", "fork", sid, "--prompt", "third", "--json", "--store", str(store))
        assert forked.returncode == 0, forked.stderr
        again = sh(
            seamline_cmd, env, "run", "--session", sid, "--json", "--store", str(store), "-o", "temperature=0.5",
            "fourth",
        )  # fmt: skip
        assert again.returncode == 0, again.stderr
        bodies = [r.body for r in fake.model_requests()]
    assert len(bodies) == 4
    for body in bodies:
        assert body["messages"][0] == {"role": "system", "content": "Answer in French"}
        assert [t["function"]["name"] for t in body["tools"]] == ["read_file"]
    assert "temperature" not in bodies[1] and bodies[3]["temperature"] == 0.5
    kept = record(store, sid)
    assert kept["provider_options"] == {"base_url": fake.base_url, **FAST, "temperature": "0.5"}
    assert kept["system_prompt"] == "Answer in French" and kept["allow"] == ["read_file"]
    fork_id = session_of(forked.stdout)
    assert record(store, fork_id)["provider_options"] == {"base_url": fake.base_url, **FAST}
    assert KEY not in json.dumps(kept)


def test_secrets_and_url_passwords_are_never_kept(tmp_path: Path) -> None:
    from seamline.providers.registry import create_provider
    from seamline.runner import public_options

    provider = create_provider(
        "openai", options={"base_url": "http://me:hunter2@127.0.0.1:9/v1", "api_key_env": "MY_KEY", "route": "chat"}
    )
    assert public_options(provider) == {"base_url": "http://me@127.0.0.1:9/v1", "api_key_env": "MY_KEY"}


def test_resume_keeps_the_budget_and_a_new_one_overrides(
    seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path
) -> None:
    cheap = tmp_path / "cheap.json"
    cheap.write_text('[{"text": "ok", "usage": {"input_tokens": 1, "output_tokens": 1, "cost_usd": 0.01}}]')
    costly = tmp_path / "costly.json"
    costly.write_text('[{"text": "big", "usage": {"input_tokens": 1, "output_tokens": 1, "cost_usd": 1.0}}]')
    store = tmp_path / "s.db"
    first = sh(
        seamline_cmd, cli_env, "run", "--json", "--store", str(store), "-p", "scripted", "-o", f"script={cheap}",
        "--budget-usd", "0.5", "-w", str(tmp_path), "hi",
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    sid = session_of(first.stdout)
    over = sh(
        seamline_cmd, cli_env, "sessions", "resume", sid, "more", "--json", "--store", str(store),
        "-o", f"script={costly}",
    )  # fmt: skip
    assert over.returncode == 3, over.stderr
    raised = sh(
        seamline_cmd, cli_env, "run", "--session", sid, "--json", "--store", str(store), "-o", f"script={costly}",
        "--budget-usd", "5", "-m", "other-model", "more",
    )  # fmt: skip
    assert raised.returncode == 0, raised.stderr
    kept = record(store, sid)
    assert kept["budget_usd"] == 5.0 and kept["model"] == "other-model"
    again = sh(
        seamline_cmd, cli_env, "sessions", "resume", sid, "last", "--json", "--store", str(store),
        "-o", f"script={cheap}",
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout.splitlines()[0])["model"] == "other-model"
    assert kept["provider_options"] == {"script": str(costly)}


def test_resume_keeps_the_sandbox(seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path) -> None:
    hello = tmp_path / "hello.json"
    hello.write_text('[{"text": "hello"}]')
    write = tmp_path / "write.json"
    write.write_text(
        '[{"tool_calls": [{"name": "write_file", "arguments": {"path": "o.txt", "content": "hi"}}]}, {"text": "ok"}]'
    )
    ws = tmp_path / "ws"
    ws.mkdir()
    store = tmp_path / "s.db"
    first = sh(
        seamline_cmd, cli_env, "run", "--json", "--store", str(store), "--sandbox", "container", "-p", "scripted",
        "-o", f"script={hello}", "-w", str(ws), "hi",
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    sid = session_of(first.stdout)
    # Under the sandbox, writes need no --yes, and they are journaled for `seamline revert`.
    resumed = sh(
        seamline_cmd, cli_env, "sessions", "resume", sid, "write", "--json", "--store", str(store),
        "-o", f"script={write}",
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert (ws / "o.txt").read_text() == "hi"
    assert record(store, sid)["sandbox"] == "container"
