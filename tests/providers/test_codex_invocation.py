"""codex without the real program: argv dialect, capabilities, preflight, seeding, transcripts."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from seamline.providers.agent_clis.codex import CodexProvider
from seamline.providers.base import ProviderSession


def session_of(provider: CodexProvider, tmp_path: Path) -> ProviderSession:
    return ProviderSession(provider=provider, session_id="s1", workspace=tmp_path, store=None, tools=None)  # type: ignore[arg-type]


def test_capabilities_are_truthful() -> None:
    caps = CodexProvider.capabilities()
    assert (caps.forking, caps.session_ids, caps.cost_source, caps.budget) == (
        "native",
        "provider",
        "priced",
        "seamline",
    )


def test_argv_for_fresh_resumed_and_forked_threads(tmp_path: Path) -> None:
    provider = CodexProvider(
        model="gpt-5.5",
        options={"effort": "low", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "FAKE_KEY", "max_retries": "1"},
    )
    session = session_of(provider, tmp_path)
    fresh = provider._invocation(session=session, prompt="hi", executable="codex", mode="fresh", target=None)
    flags = fresh.argv[4:-1]
    config = [flags[i + 1] for i in range(0, len(flags), 2)]
    assert fresh.argv[:4] == ["codex", "exec", "--json", "--skip-git-repo-check"] and fresh.argv[-1] == "hi"
    assert set(flags[::2]) == {"-c"}
    assert 'model="gpt-5.5"' in config and 'model_reasoning_effort="low"' in config
    assert 'approval_policy="never"' in config and 'sandbox_mode="workspace-write"' in config
    assert 'model_provider="seamline"' in config
    table = next(c for c in config if c.startswith("model_providers.seamline="))
    assert 'base_url="http://127.0.0.1:9/v1"' in table and 'env_key="FAKE_KEY"' in table
    assert 'wire_api="responses"' in table and "request_max_retries=1" in table and "stream_max_retries=1" in table
    assert table.endswith(",supports_websockets=false}")  # HTTP only unless asked
    on = CodexProvider(options={"base_url": "http://127.0.0.1:9/v1", "websockets": "true"})
    argv = on._invocation(session=session, prompt="hi", executable="codex", mode="fresh", target=None).argv
    assert any(a.startswith("model_providers.seamline=") and "supports_websockets=true" in a for a in argv)
    resumed = provider._invocation(session=session, prompt="hi", executable="codex", mode="resume", target="T1")
    assert resumed.argv[4] == "resume" and resumed.argv[-2:] == ["T1", "hi"] and resumed.argv[5:-2] == flags
    forked = provider._invocation(session=session, prompt="hi", executable="codex", mode="fork", target="T1")
    assert forked.argv[4] == "fork" and forked.argv[-2:] == ["T1", "hi"]


def test_without_base_url_codex_keeps_its_own_provider(tmp_path: Path) -> None:
    provider = CodexProvider()
    argv = provider._invocation(
        session=session_of(provider, tmp_path), prompt="x", executable="codex", mode="fresh", target=None
    ).argv
    assert not any("model_provider" in a for a in argv)


def test_preflight_missing_names_the_install_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("seamline.providers.programs.lookup._places", list)  # not the project's .tools either
    checks = asyncio.run(CodexProvider().preflight())
    assert checks[0].fix == "npm install -g @openai/codex@0.171.0"


def test_seeding_carries_the_instructions_file_the_config_names(tmp_path: Path) -> None:
    parent = tmp_path / "parent" / ".codex"
    (parent / "prompts").mkdir(parents=True)
    (parent / "sessions" / "2026").mkdir(parents=True)
    (parent / "prompts" / "rules.md").write_text("be brief\n")
    (tmp_path / "parent" / "AGENTS.md").write_text("shared rules\n")
    (tmp_path / "secret.txt").write_text("outside the parent node\n")
    (parent / "config.toml").write_text(
        'model = "gpt-5.5"\nmodel_instructions_file = "prompts/rules.md"\n'
        '[profiles.team]\nexperimental_instructions_file = "../AGENTS.md"\n'
        '[profiles.bad]\nexperimental_instructions_file = "../../secret.txt"\n'
    )
    node = tmp_path / "node"
    CodexProvider().seed(node, tmp_path / "parent")
    assert (node / ".codex" / "prompts" / "rules.md").read_text() == "be brief\n"
    assert (node / "AGENTS.md").read_text() == "shared rules\n"  # beside the config, as in the parent
    assert not any(p.name == "secret.txt" for p in node.rglob("*"))  # outside the parent: left alone
    assert (node / ".codex" / "config.toml").is_file() and not (node / ".codex" / "sessions").exists()


def test_transcript_is_found_by_thread_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "ch"))
    provider = CodexProvider()
    rollout = tmp_path / "ch" / "sessions" / "2026" / "12" / "02" / "rollout-2026-12-02T10-00-00-T-123.jsonl"
    rollout.parent.mkdir(parents=True)
    rollout.write_text(
        '{"type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":40}}}}\n'
    )
    session = session_of(provider, tmp_path)
    session.provider_session_id = "T-123"
    assert provider.transcript_location(session) == rollout
    assert provider._thread_totals("T-123") == {"input_tokens": 40}
    session.provider_session_id = "T-999"
    assert provider.transcript_location(session) is None


def test_providers_check_prints_the_install_command(
    tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]
) -> None:
    import subprocess

    argv = [*seamline_cmd, "providers", "check", "codex", "-o", f"executable={tmp_path / 'missing-codex'}"]
    done = subprocess.run(argv, capture_output=True, text=True, env=cli_env, timeout=60, check=False)
    assert done.returncode == 1
    assert "FAIL codex: executable" in done.stdout
    assert "fix: npm install -g @openai/codex@0.171.0" in done.stdout
