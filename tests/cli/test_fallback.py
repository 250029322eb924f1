"""``seamline run --fallback PROVIDER[:MODEL]``: a turn the backend cannot take (529, a
rate limit past the retries, no quota) finishes on the next backend, with one transcript
and the handoff recorded with its reason; anything else is not retried elsewhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.openai_api import FakeOpenAI
from tests.providers.agent_cli_support import cli_path
from tests.providers.model_api_support import cli_env, cli_run, json_events


def _shown(session_id: str, env: dict[str, str], cwd: Path) -> dict[str, Any]:
    done = cli_run(["sessions", "show", session_id, "--json"], env=env, cwd=cwd)
    assert done.returncode == 0, done.stderr
    shown: dict[str, Any] = json.loads(done.stdout)
    return shown


def _said(shown: dict[str, Any]) -> list[tuple[int, str, str]]:
    return [(e["turn"], e["role"], e["content"]) for e in shown["transcript"] if e["kind"] in ("user", "assistant")]


def test_an_overloaded_model_api_finishes_on_the_fallback(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    with (
        FakeAnthropic([], fallback={"status": 529}) as anthropic,
        FakeOpenAI([{"text": "The backup answers."}]) as openai,
    ):
        done = cli_run(
            [
                "run", "--json", "-p", "anthropic", "-m", "claude-sonnet-4-6",
                "-o", f"base_url={anthropic.base_url}", "-o", "max_retries=0",
                "--fallback", "openai:gpt-4o-mini", "--fallback-option", f"base_url={openai.base_url}",
                "--fallback-option", "max_retries=0",
                "Which bird?",
            ],
            env=env,
            cwd=tmp_path,
        )  # fmt: skip
        asked = [json.dumps(r.body) for r in openai.model_requests()]
    assert done.returncode == 0, done.stderr
    events = json_events(done.stdout)
    assert events[0]["type"] == "session" and events[0]["provider"] == "anthropic"
    assert [e["type"] for e in events].count("complete") == 1 and events[-1]["type"] == "complete"
    assert (events[-1]["outcome"], events[-1]["text"]) == ("completed", "The backup answers.")
    (switch,) = [e["payload"] for e in events if e["type"] == "raw" and e["source"] == "handoff"]
    assert (switch["from"], switch["to"], switch["to_model"], switch["reason"]) == (
        "anthropic",
        "openai",
        "gpt-4o-mini",
        "provider",
    )
    assert len(asked) == 1 and asked[0].count("Which bird?") == 1
    shown = _shown(events[0]["session_id"], env, tmp_path)
    assert _said(shown) == [(1, "user", "Which bird?"), (1, "assistant", "The backup answers.")]
    assert (shown["session"]["provider"], shown["session"]["model"]) == ("openai", "gpt-4o-mini")
    (entry,) = shown["session"]["metadata"]["handoffs"]
    assert (entry["from"], entry["to"], entry["reason"], entry["failover"]) == ("anthropic", "openai", "provider", True)
    assert [b["provider"] for b in shown["backends"]] == ["openai"]  # anthropic answered no turn


def test_a_rate_limit_past_the_retries_goes_on_and_the_terminal_says_so(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    with (
        FakeOpenAI([], fallback={"status": 429, "message": "slow down"}) as limited,
        FakeOpenAI([{"text": "Answered."}]) as other,
    ):
        done = cli_run(
            [
                "run", "-p", "openai", "-m", "gpt-4o", "-o", f"base_url={limited.base_url}", "-o", "max_retries=0",
                "--fallback", "openai:gpt-4o-mini", "--fallback-option", f"base_url={other.base_url}", "Go",
            ],
            env=env,
            cwd=tmp_path,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Answered."
    assert "quota error" in done.stderr and "handed over to openai (gpt-4o-mini)" in done.stderr


def test_an_invalid_request_fails_without_a_handoff(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    with (
        FakeAnthropic([], fallback={"status": 400, "message": "bad field"}) as anthropic,
        FakeOpenAI([{"text": "never"}]) as openai,
    ):
        done = cli_run(
            [
                "run", "--json", "-p", "anthropic", "-m", "claude-sonnet-4-6",
                "-o", f"base_url={anthropic.base_url}", "-o", "max_retries=0",
                "--fallback", "openai:gpt-4o-mini", "--fallback-option", f"base_url={openai.base_url}", "Go",
            ],
            env=env,
            cwd=tmp_path,
        )  # fmt: skip
        asked = openai.model_requests()
    assert done.returncode == 1, done.stderr
    events = json_events(done.stdout)
    assert (events[-1]["outcome"], events[-1]["stop_reason"]) == ("failed", "invalid_request")
    assert asked == [] and not [e for e in events if e["type"] == "raw" and e["source"] == "handoff"]
    shown = _shown(events[0]["session_id"], env, tmp_path)
    assert shown["session"]["provider"] == "anthropic" and "handoffs" not in shown["session"]["metadata"]


def test_when_every_fallback_fails_the_run_fails_with_the_last_error(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    with (
        FakeAnthropic([], fallback={"status": 529}) as anthropic,
        FakeOpenAI([], fallback={"status": 429, "error_type": "insufficient_quota", "message": "no credit"}) as openai,
    ):
        done = cli_run(
            [
                "run", "--json", "-p", "anthropic", "-m", "claude-sonnet-4-6",
                "-o", f"base_url={anthropic.base_url}", "-o", "max_retries=0",
                "--fallback", "openai:gpt-4o-mini", "--fallback-option", f"base_url={openai.base_url}",
                "--fallback-option", "max_retries=0", "Go",
            ],
            env=env,
            cwd=tmp_path,
        )  # fmt: skip
        asked = openai.model_requests()
    assert done.returncode == 1, done.stderr
    events = json_events(done.stdout)
    assert [e["type"] for e in events].count("complete") == 1
    assert (events[-1]["outcome"], events[-1]["stop_reason"]) == ("failed", "quota")
    errors = [e for e in events if e["type"] == "error"]
    assert "no credit" in errors[-1]["message"] and len(asked) == 1  # the fallback was tried once
    shown = _shown(events[0]["session_id"], env, tmp_path)
    assert _said(shown) == [(1, "user", "Go")]


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--fallback", "nope:model"], "--fallback nope:model: unknown provider 'nope'"),
        (["--fallback-option", "base_url=x"], "goes after the --fallback it is for"),
        (["--fallback", "offline", "--fallback-option", "base_url"], "--fallback-option takes KEY=VALUE"),
        (["--fallback", "offline", "--no-store"], "--fallback does not go with --no-store"),
        (["--fallback", "offline", "--pipeline", "single"], "--fallback does not go with --pipeline"),
        (["--fallback", "offline", "--fallback-option", "nope=1"], "nope"),
    ],
)
def test_a_bad_fallback_is_a_usage_error_before_anything_runs(tmp_path: Path, flags: list[str], said: str) -> None:
    env = cli_env(tmp_path)
    done = cli_run(["run", *flags, "Go"], env=env, cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert said in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""
    assert (
        not (tmp_path / "cli-store.db").exists()
        or "Go" not in cli_run(["sessions", "list"], env=env, cwd=tmp_path).stdout
    )


def test_a_continued_session_fails_over_with_its_history(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    (tmp_path / "notes.txt").write_text("the bird is a heron\n")
    first = cli_run(["run", "--json", "What is the bird?"], env=env, cwd=tmp_path)  # offline
    assert first.returncode == 0, first.stderr
    session_id = json_events(first.stdout)[0]["session_id"]
    with (
        FakeAnthropic([], fallback={"status": 529}) as anthropic,
        FakeOpenAI([{"text": "Still a heron."}]) as openai,
    ):
        done = cli_run(
            [
                "run", "--json", "--session", session_id, "-p", "anthropic", "-m", "claude-sonnet-4-6",
                "-o", f"base_url={anthropic.base_url}", "-o", "max_retries=0",
                "--fallback", "openai:gpt-4o-mini", "--fallback-option", f"base_url={openai.base_url}", "And now?",
            ],
            env=env,
            cwd=tmp_path,
        )  # fmt: skip
        (asked,) = [json.dumps(r.body) for r in openai.model_requests()]
    assert done.returncode == 0, done.stderr
    events = json_events(done.stdout)
    assert events[-1]["text"] == "Still a heron." and [e["type"] for e in events].count("complete") == 1
    assert "What is the bird?" in asked and asked.count("And now?") == 1  # the history, and the prompt once
    shown = _shown(session_id, env, tmp_path)
    assert [(t, r) for t, r, _ in _said(shown)] == [(1, "user"), (1, "assistant"), (2, "user"), (2, "assistant")]
    switches = shown["session"]["metadata"]["handoffs"]
    assert [(h["from"], h["to"], h.get("reason")) for h in switches] == [
        ("offline", "anthropic", None),  # the handoff asked for
        ("anthropic", "openai", "provider"),  # the failover
    ]
    assert [b["provider"] for b in shown["backends"]] == ["offline", "openai"]
    text = cli_run(["sessions", "show", session_id], env=env, cwd=tmp_path).stdout
    assert "failover  turn 2: anthropic → openai (provider: anthropic API 529" in text


@pytest.mark.real
def test_claude_code_overloaded_finishes_on_the_fallback(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    home, workspace = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    workspace.mkdir()
    (workspace / "notes.txt").write_text("the secret word is pelican\n")
    for key in ("ANTHROPIC_BASE_URL", "CLAUDE_CONFIG_DIR", "CLAUDECODE"):
        env.pop(key, None)
    env.update(HOME=str(home), DISABLE_AUTOUPDATER="1", NO_COLOR="1")
    with FakeAnthropic([], fallback={"status": 529}) as anthropic:
        done = cli_run(
            [
                "run", "--json", "-p", "claude-code", "-m", "claude-sonnet-4-6", "-w", str(workspace),
                "-o", f"executable={cli_path('claude')}", "-o", f"base_url={anthropic.root_url}", "-o", "max_retries=0",
                "--fallback", "offline", "What is the secret word?",
            ],
            env=env,
            cwd=tmp_path,
            timeout=180,
        )  # fmt: skip
        reached = len(anthropic.model_requests())
    assert done.returncode == 0, done.stderr
    assert reached >= 1  # Claude Code asked, and got its 529
    events = json_events(done.stdout)
    assert [e["type"] for e in events].count("complete") == 1
    assert events[-1]["outcome"] == "completed" and "pelican" in events[-1]["text"]
    (switch,) = [e["payload"] for e in events if e["type"] == "raw" and e["source"] == "handoff"]
    assert (switch["from"], switch["to"], switch["reason"]) == ("claude-code", "offline", "provider")
    assert "529" in switch["message"]
    shown = _shown(events[0]["session_id"], env, tmp_path)
    said = _said(shown)
    assert [(t, r) for t, r, _ in said] == [(1, "user"), (1, "assistant")] and "pelican" in said[1][2]
    assert shown["session"]["provider"] == "offline"
    assert shown["session"]["metadata"]["handoffs"][0]["reason"] == "provider"
