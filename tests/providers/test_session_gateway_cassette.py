"""A session's gateway with a cassette (no program started): a replay opens without a key
and puts its placeholder in the variable the recorded run's key was in; recording without
a key, or with the gateway off, is refused naming the cassette."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from seamline.errors import InvalidRequest
from seamline.gateway.cassette import CassetteRecorder, CassetteUse
from seamline.providers.base import ProviderSession
from seamline.providers.programs.model_gateway import (
    GatewayRoute,
    close_session_gateway,
    open_session_gateway,
)
from seamline.providers.registry import create_provider
from seamline.tools.base import Toolset

ROUTE = GatewayRoute(
    vendor="anthropic",
    key_vars=("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"),
    base_url_var="ANTHROPIC_BASE_URL",
    default_base_url="https://api.anthropic.com",
)


def session_with(use: CassetteUse, tmp_path: Path) -> ProviderSession:
    provider = create_provider("offline", model=None, options=None)
    return ProviderSession(
        provider=provider, session_id="s1", workspace=tmp_path, store=None, tools=Toolset(), cassette=use
    )


def opened_env(session: ProviderSession, options: dict[str, str] | None = None) -> dict[str, str | None]:
    async def go() -> dict[str, str | None]:
        gateway = await open_session_gateway(session, ROUTE, options or {}, rates=lambda _: None, model=None)
        try:
            assert gateway is not None
            return gateway.env()
        finally:
            await close_session_gateway(session)

    return asyncio.run(go())


@pytest.mark.parametrize("recorded_var", ["ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY", None])
def test_a_replay_opens_without_a_key_and_the_placeholder_goes_where_the_key_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recorded_var: str | None
) -> None:
    for name in ROUTE.key_vars:
        monkeypatch.delenv(name, raising=False)
    tape = tmp_path / "t.jsonl"
    CassetteRecorder(tape, vendor="anthropic", places={}, hidden=[], key_var=recorded_var).close()
    env = opened_env(session_with(CassetteUse(tape, "replay"), tmp_path))
    where = recorded_var or "ANTHROPIC_API_KEY"
    assert (env[where] or "").startswith("sl-gw-")
    assert [name for name in ROUTE.key_vars if env.get(name)] == [where]
    assert (env["ANTHROPIC_BASE_URL"] or "").startswith("http://127.0.0.1:")


def test_recording_needs_the_key_and_the_gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ROUTE.key_vars:
        monkeypatch.delenv(name, raising=False)
    tape = tmp_path / "t.jsonl"
    with pytest.raises(InvalidRequest, match=f"cassette {tape}: recording needs the key"):
        opened_env(session_with(CassetteUse(tape, "record"), tmp_path))
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "sk-ant-real")
    with pytest.raises(InvalidRequest, match=f"cassette {tape}: gateway=off"):
        opened_env(session_with(CassetteUse(tape, "record"), tmp_path), {"gateway": "off"})
    env = opened_env(session_with(CassetteUse(tape, "record"), tmp_path))
    assert (env["ANTHROPIC_AUTH_TOKEN"] or "").startswith("sl-gw-")
    assert '"key_var": "ANTHROPIC_AUTH_TOKEN"' in tape.read_text() and "sk-ant-real" not in tape.read_text()
