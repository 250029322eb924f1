"""A password inside `base_url` (`http://user:secret@host`) is never written or shown:
not in the raw log, `run --json`, `sessions export`, `providers check`, nor an error
message about an endpoint that does not answer (issue 29)."""

from __future__ import annotations

import socket
import sqlite3
import subprocess
from pathlib import Path

import pytest

from seamline.redact import redact_url, redact_urls, url_host
from tests.fakes.openai_api import FakeOpenAI

pytestmark = pytest.mark.real
SECRET = "PASSW0RD-hunter2"


def _run(cmd: list[str], env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def env(cli_env: dict[str, str]) -> dict[str, str]:
    cli_env.pop("SEAMLINE_BLOCK_REAL_PROVIDERS", None)
    cli_env.pop("OPENAI_BASE_URL", None)
    cli_env["OPENAI_API_KEY"] = "sk-test-url-passwords-0123"
    return cli_env


def test_a_base_url_password_is_never_written_or_shown(
    tmp_path: Path, seamline_cmd: list[str], env: dict[str, str]
) -> None:
    store = tmp_path / "s.db"
    with FakeOpenAI([{"text": "hello"}] * 3) as fake:
        url = fake.base_url.replace("http://", f"http://alice:{SECRET}@")
        option = f"base_url={url}"
        ran = _run(seamline_cmd, env, "run", "--json", "--store", str(store), "-p", "openai", "-m", "gpt-4o",
                   "-o", option, "-w", str(tmp_path), "hi")  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        assert "alice@127.0.0.1" in ran.stdout or "127.0.0.1" in ran.stdout
        checked = _run(seamline_cmd, env, "providers", "check", "openai", "-o", option)
        assert "reachable" in checked.stdout, checked.stdout + checked.stderr
    with sqlite3.connect(store) as db:
        rows = [str(r) for table in ("sessions", "raw_log") for r in db.execute(f"SELECT * FROM {table}")]
        (session_id,) = db.execute("SELECT id FROM sessions").fetchone()
    assert rows and not [r for r in rows if SECRET in r]
    exported = _run(seamline_cmd, env, "sessions", "export", session_id, "--store", str(store))
    assert exported.returncode == 0 and session_id in exported.stdout, exported.stderr
    for shown in (ran.stdout, ran.stderr, checked.stdout, checked.stderr, exported.stdout, exported.stderr):
        assert SECRET not in shown


def test_an_unreachable_endpoint_is_named_without_its_password(
    tmp_path: Path, seamline_cmd: list[str], env: dict[str, str]
) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # nothing listens once the socket closes
    option = f"base_url=http://alice:{SECRET}@127.0.0.1:{port}/v1"
    ran = _run(seamline_cmd, env, "run", "--json", "--store", str(tmp_path / "s.db"), "-p", "openai",
               "-m", "gpt-4o", "-o", option, "-o", "max_retries=0", "-w", str(tmp_path), "hi")  # fmt: skip
    assert ran.returncode != 0
    checked = _run(seamline_cmd, env, "providers", "check", "openai", "-o", option)
    for shown in (ran.stdout, ran.stderr, checked.stdout, checked.stderr):
        assert SECRET not in shown


def test_the_redaction_functions() -> None:
    assert redact_url(f"http://alice:{SECRET}@h.example:8/v1") == "http://alice@h.example:8/v1"
    assert redact_url("http://h.example/v1?a=b@c") == "http://h.example/v1?a=b@c"
    text = f"failed: POST https://u:{SECRET}@api.example/v1 and postgresql://me:{SECRET}@db/x"
    assert SECRET not in redact_urls(text) and "https://u@api.example/v1" in redact_urls(text)
    assert url_host(f"http://alice:{SECRET}@127.0.0.1:9/v1") == "127.0.0.1:9"
    assert url_host("http://[::1]:9/") == "[::1]:9"
