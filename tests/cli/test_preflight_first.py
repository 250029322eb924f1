"""A run on an agent CLI with no credentials fails at once as ``auth`` with the fix, before
the program starts and before anything is recorded (it used to retry for 33 s as
``transport``)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

CASES = [
    ("codex", "OPENAI_API_KEY", "codex_home"),
    ("claude-code", "ANTHROPIC_API_KEY", "config_dir"),
    ("gemini-cli", "GEMINI_API_KEY", "gemini_home"),
]


@pytest.mark.parametrize(("provider", "key", "home_option"), CASES)
def test_no_credentials_fails_before_the_program_starts(
    provider: str, key: str, home_option: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    marker = tmp_path / "started"
    program = tmp_path / "cli"
    program.write_text(f"#!{sys.executable}\nopen({str(marker)!r}, 'w').write('ran')\n")
    program.chmod(0o755)
    empty_home = tmp_path / "home"  # no stored login there
    empty_home.mkdir()
    env = {k: v for k, v in cli_env.items() if k not in (key, "GOOGLE_API_KEY", "ANTHROPIC_AUTH_TOKEN")}
    env.pop("SEAMLINE_BLOCK_REAL_PROVIDERS", None)
    store = tmp_path / "store.db"
    argv = [
        sys.executable, "-m", "seamline", "run", "--store", str(store), "--provider", provider,
        "-o", f"executable={program}", "-o", f"{home_option}={empty_home}", "hi",
    ]  # fmt: skip
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert done.stderr.startswith("seamline: auth error: ") and key in done.stderr and "fix:" in done.stderr
    assert not marker.exists()  # the program never ran
    if store.exists():
        with sqlite3.connect(store) as conn:
            assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (0,)  # no 'interrupted' leftover


@pytest.mark.parametrize(
    ("model", "hint"),
    [("gpt-4o", "--provider openai"), ("claude-sonnet-4-6", "--provider anthropic"), ("x1", "--provider NAME")],
)
def test_a_model_without_its_provider_is_a_usage_error(model: str, hint: str, cli_env: dict[str, str]) -> None:
    argv = [sys.executable, "-m", "seamline", "run", "--model", model, "hi"]
    done = subprocess.run(argv, env=cli_env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and done.stdout == ""  # it used to answer offline and exit 0
    assert f"not {model!r}" in done.stderr and hint in done.stderr


def test_forking_gemini_without_a_key_says_it_cannot_fork_first(cli_env: dict[str, str], tmp_path: Path) -> None:
    # The Gemini CLI cannot fork: a user without a key heard about the key first, set it, and
    # only then learned that the fork could never work.
    from seamline.sessions.sqlite_store import open_store

    marker = tmp_path / "started"
    program = tmp_path / "gemini"
    program.write_text(f"#!{sys.executable}\nopen({str(marker)!r}, 'w').write('ran')\n")
    program.chmod(0o755)
    empty_home = tmp_path / "home"  # no stored login there
    empty_home.mkdir()
    store = tmp_path / "store.db"
    opened = open_store(store)
    try:
        opened.create_session("5e551011ab", provider="gemini-cli", model="gemini-2.5-flash", workspace=str(tmp_path))
    finally:
        opened.close()
    env = {k: v for k, v in cli_env.items() if k not in ("GEMINI_API_KEY", "GOOGLE_API_KEY")}
    env.pop("SEAMLINE_BLOCK_REAL_PROVIDERS", None)
    env["GEMINI_CLI_HOME"] = str(empty_home)
    argv = [
        sys.executable, "-m", "seamline", "sessions", "fork", "5e551011ab", "--store", str(store),
        "-o", f"executable={program}", "--prompt", "hi",
    ]  # fmt: skip
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert "gemini-cli cannot fork" in done.stderr and "GEMINI_API_KEY" not in done.stderr
    # and what to do instead: continue it, or fork it on a provider that can
    assert "seamline run --session 5e551011ab" in done.stderr and "sessions fork 5e551011ab --provider" in done.stderr
    assert not marker.exists()
    with sqlite3.connect(store) as conn:
        assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (1,)  # no fork recorded
