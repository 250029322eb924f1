"""`providers list` says where the gateway takes each agent's key from, and that a login the
program keeps in its own files is one the gateway cannot hold: with it alone, the gateway is
off for that session. Checked against the code that decides: the variables are those of the
provider's own route, the file is the one its preflight looks for, and a session with that
file alone opens no gateway (one with a key variable does)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from seamline.providers.base import Provider, ProviderSession
from seamline.providers.programs.model_gateway import (
    STORED_LOGIN_NOTE,
    close_session_gateway,
    open_session_gateway,
)
from seamline.providers.registry import create_provider
from seamline.tools.base import Toolset
from tests.providers.agent_cli_support import ROOT, cli_path, make_world

# Each agent CLI, its program, and the file its preflight takes as a stored login.
LOGINS = {
    "claude-code": ("claude", ".claude/.credentials.json"),
    "codex": ("codex", ".codex/auth.json"),
    "gemini-cli": ("gemini", ".gemini/oauth_creds.json"),
}


def _listed(*extra: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "seamline", "providers", "list", *extra],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_list_names_the_keys_the_gateway_holds_and_the_logins_it_cannot() -> None:
    rows = {row["name"]: row for row in map(json.loads, _listed("--json").splitlines())}
    for name, (program, login_file) in LOGINS.items():
        gateway = rows[name]["gateway"]
        provider = create_provider(name, options={"executable": cli_path(program)})
        route = provider._gateway_route()  # pyright: ignore[reportAttributeAccessIssue]
        assert gateway["key_vars"] == list(route.key_vars), name  # what the session's gateway reads
        assert Path(login_file).name in gateway["stored_login"], name  # what its preflight reads
        assert gateway["with_stored_login"] == "off", name
    for name in ("acp", "opencode"):
        assert rows[name]["gateway"]["with_stored_login"] == "off", name
    for name in ("openai", "anthropic", "offline", "scripted"):
        assert rows[name]["gateway"] is None, name  # no program, no login of its own
    text = _listed()
    block = text[text.index("\nclaude-code ") : text.index("\ncodex ")]
    assert "gateway: holds the key of ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN or CLAUDE_CODE_OAUTH_TOKEN" in block
    assert "gateway off with a stored login alone (`claude /login`, kept in ~/.claude/.credentials.json" in block
    assert STORED_LOGIN_NOTE in block


def _opens_a_gateway(provider: Provider, tmp_path: Path) -> bool:
    session = ProviderSession(provider=provider, session_id="s1", workspace=tmp_path, store=None, tools=Toolset())
    route = provider._gateway_route()  # pyright: ignore[reportAttributeAccessIssue]

    async def go() -> bool:
        gateway = await open_session_gateway(session, route, {}, rates=lambda _: None, model=None)
        await close_session_gateway(session)
        return gateway is not None

    return asyncio.run(go())


@pytest.mark.parametrize("name", list(LOGINS))
def test_with_a_stored_login_alone_the_gateway_is_off_as_listed(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = make_world(tmp_path, monkeypatch)  # sets a key for each vendor: taken away below
    program, login_file = LOGINS[name]
    provider = create_provider(name, options={"executable": cli_path(program)})
    key_vars = provider.gateway_key_vars
    for var in key_vars:
        monkeypatch.delenv(var, raising=False)
    stored = world.home / login_file
    stored.parent.mkdir(parents=True, exist_ok=True)
    stored.write_text('{"tokens": "stored-login"}')
    checks = {c.name: c for c in asyncio.run(provider.preflight())}
    assert checks["credentials"].ok, checks
    assert checks["credentials"].detail == f"login stored in {stored} ({STORED_LOGIN_NOTE})"
    assert not _opens_a_gateway(provider, tmp_path)  # the login alone: the gateway is off …
    monkeypatch.setenv(key_vars[0], "sk-real-key-in-env")
    assert _opens_a_gateway(provider, tmp_path)  # … a key in the environment: it holds that
