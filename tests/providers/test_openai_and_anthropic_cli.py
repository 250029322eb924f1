"""Acceptance through the command line: `seamline run --provider openai|anthropic --json`
against the fakes, a multi-step tool-using run with usage and cost; and the API key never
reaching the store, the raw log, the events, an error message or the output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import seamline
from seamline.sessions.sqlite_store import SQLiteStore
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.openai_api import FakeOpenAI
from tests.providers.model_api_support import (
    ANTHROPIC_KEY,
    FAST,
    OPENAI_KEY,
    cli_env,
    cli_run,
    dump_everything,
    json_events,
    model_api_env,
    of_type,
)

__all__ = ["model_api_env"]

pytestmark = pytest.mark.usefixtures("model_api_env")

CASES = [
    ("openai", "chat", "gpt-4o", FakeOpenAI, OPENAI_KEY),
    ("openai", "responses", "gpt-4o", FakeOpenAI, OPENAI_KEY),
    ("anthropic", None, "claude-sonnet-4-6", FakeAnthropic, ANTHROPIC_KEY),
]


def _script() -> list[dict]:
    return [
        {
            "text": "I will read both files.",
            "tool_calls": [
                {"name": "read_file", "arguments": {"path": "notes.txt"}},
                {"name": "list_dir", "arguments": {"path": "."}},
            ],
            "usage": {"input_tokens": 300, "output_tokens": 25},
        },
        {
            "tool_calls": [{"name": "grep", "arguments": {"pattern": "blue"}}],
            "usage": {"input_tokens": 400, "output_tokens": 9},
        },
        {"text": "The sky is blue.", "usage": {"input_tokens": 500, "output_tokens": 6, "cache_read_tokens": 256}},
    ]


@pytest.mark.parametrize(
    ("provider", "route", "model", "fake_cls", "key"), CASES, ids=["openai-chat", "openai-responses", "anthropic"]
)
def test_cli_multi_step_tool_run_with_usage_and_cost(
    provider: str, route: str | None, model: str, fake_cls: type, key: str, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("the sky is blue\n")
    with fake_cls(_script(), api_key=key) as fake:
        args = ["run", "--provider", provider, "--provider-option", f"base_url={fake.base_url}", "--model", model]
        if route:
            args += ["--provider-option", f"route={route}"]
        args += ["--workspace", str(workspace), "--json", "What colour is the sky?"]
        out = cli_run(args, env=cli_env(tmp_path), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    events = json_events(out.stdout)
    types = [e["type"] for e in events]
    assert types[0] == "session" and types[-1] == "complete" and types.count("complete") == 1
    assert events[-1]["outcome"] == "completed" and events[-1]["text"] == "The sky is blue."
    calls = [e for e in events if e["type"] == "tool_call"]
    results = [e for e in events if e["type"] == "tool_result"]
    assert [c["name"] for c in calls] == ["read_file", "list_dir", "grep"]
    assert [r["call_id"] for r in results] == [c["call_id"] for c in calls]
    assert "the sky is blue" in results[0]["output"] and not any(r["is_error"] for r in results)
    usages = [e for e in events if e["type"] == "usage"]
    assert [u["input_tokens"] for u in usages] == [300, 400, 500]
    assert usages[2]["cache_read_tokens"] == 256
    assert all(u["priced"] and u["cost_usd"] > 0 for u in usages)
    assert len(fake.model_requests()) == 3
    assert key not in out.stdout + out.stderr


def test_cli_unknown_model_shows_priced_false(tmp_path: Path) -> None:
    with FakeOpenAI([{"text": "hi", "usage": {"input_tokens": 9, "output_tokens": 2}}]) as fake:
        args = ["run", "-p", "openai", "-o", f"base_url={fake.base_url}", "-m", "qwen-local-test", "--json", "hi"]
        out = cli_run(args, env=cli_env(tmp_path), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    (usage,) = [e for e in json_events(out.stdout) if e["type"] == "usage"]
    assert usage["priced"] is False and usage["cost_usd"] is None


@pytest.mark.parametrize(
    ("provider", "route", "model", "fake_cls", "key"), CASES, ids=["openai-chat", "openai-responses", "anthropic"]
)
def test_api_key_never_leaks(
    provider: str, route: str | None, model: str, fake_cls: type, key: str, tmp_path: Path
) -> None:
    # The server echoes the key in its error (as real APIs echo part of it); seamline must not.
    echo = f"Incorrect API key provided: {key}"
    script = [
        {"status": 500, "message": echo},
        {"text": "ok then", "tool_calls": [{"name": "lookup", "arguments": {"key": "a"}}]},
        {"text": "before the cut", "error_after": 3, "message": echo},
    ]
    store_path = tmp_path / "store.db"
    store = SQLiteStore(store_path)
    options: dict[str, str] = dict(FAST)
    if route:
        options["route"] = route
    with fake_cls(script, api_key=key) as fake:
        options["base_url"] = fake.base_url
        result = seamline.run_sync(
            "hi", provider=provider, model=model, options=options, store=store, tools=_lookup_tools()
        )
        # an auth failure whose body carries the key
        bad = fake_cls([{"status": 401, "message": echo}])
        with bad:
            failed = seamline.run_sync(
                "hi", provider=provider, model=model, options={**options, "base_url": bad.base_url}, store=store
            )
    store.close()
    errors = of_type(result.events, "error") + of_type(failed.events, "error")
    assert {e.kind for e in errors} >= {"provider", "auth"}
    assert any("***" in e.message for e in errors)  # the echo was there, masked
    # the key did reach the server (so it was really in play)...
    assert any(key in json.dumps(r.headers) for r in fake.requests)
    # ...and nowhere on our side
    everything = dump_everything(result.events + failed.events, store_path)
    assert key not in everything
    assert key[-12:] not in everything
    # and through the CLI: stdout (--json) and stderr
    with fake_cls([{"status": 401, "message": echo}], api_key=key) as fake:
        args = ["run", "-p", provider, "-o", f"base_url={fake.base_url}", "-m", model, "--json", "hi"]
        out = cli_run(args, env=cli_env(tmp_path), cwd=tmp_path)
    assert out.returncode == 1
    assert key not in out.stdout + out.stderr and "auth" in out.stdout
    assert key not in (tmp_path / "cli-store.db").read_bytes().decode("latin-1")


def _lookup_tools():  # type: ignore[no-untyped-def]
    from seamline.tools import Toolset
    from tests.providers.model_api_support import lookup

    return Toolset([lookup])


def test_cli_providers_check_against_the_fake(tmp_path: Path) -> None:
    with FakeOpenAI(api_key=OPENAI_KEY, models=["gpt-4o"]) as fake:
        ok = cli_run(
            ["providers", "check", "openai", "-m", "gpt-4o", "-o", f"base_url={fake.base_url}"],
            env=cli_env(tmp_path),
            cwd=tmp_path,
        )
        missing = cli_run(
            ["providers", "check", "openai", "-m", "gpt-5-x", "-o", f"base_url={fake.base_url}"],
            env=cli_env(tmp_path),
            cwd=tmp_path,
        )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "1 models listed" in ok.stdout and "gpt-4o is listed" in ok.stdout
    assert missing.returncode == 1 and "gpt-5-x is not listed" in missing.stdout + missing.stderr
    assert OPENAI_KEY not in ok.stdout + ok.stderr + missing.stdout + missing.stderr
