"""Servers default to the envelope: `seamline serve` and `seamline acp` run a backend that runs
programs inside bubblewrap whatever a client asks, unless the operator turned it off; where it
cannot be isolated the turn (serve) or the start (acp) is refused, never run unisolated."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from seamline.providers.agent_clis.claude_code import ClaudeCodeProvider
from seamline.providers.model_apis.openai_api import OpenAIProvider
from seamline.providers.programs.envelope_launch import operator_envelope
from tests.providers.agent_cli_support import ROOT, AgentAnthropic, CliWorld, cli_path, make_world
from tests.server.harness import serve
from tests.server.test_api import _read, _run, _wait_done


def test_operator_mode_wins_over_what_a_client_asks() -> None:
    asked = {"sandbox": "none", "allow_hosts": "a.example"}
    merged = operator_envelope(ClaudeCodeProvider, asked, mode="auto", allow_hosts=("b.example",))
    assert merged["sandbox"] == "auto" and merged["allow_hosts"] == "a.example,b.example"
    assert operator_envelope(ClaudeCodeProvider, asked, mode="none") == asked  # turned off by the operator
    assert operator_envelope(OpenAIProvider, {"route": "chat"}, mode="auto") == {"route": "chat"}


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliWorld:
    return make_world(tmp_path, monkeypatch)


def _claude_on_path(monkeypatch: pytest.MonkeyPatch, base_url: str) -> None:
    # A client of serve may not name the program or its endpoint (they are the operator's):
    # the program is found on PATH and the endpoint in the server's environment.
    monkeypatch.setenv("PATH", f"{Path(cli_path('claude')).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", base_url)


@pytest.mark.real
def test_serve_runs_an_agent_cli_in_the_envelope_by_default(
    world: CliWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No bubblewrap here: an enveloped turn is refused, so a refusal proves the envelope was asked.
    monkeypatch.setenv("SEAMLINE_BWRAP", str(tmp_path / "no-bwrap"))
    (tmp_path / "srv-dir").mkdir()
    with AgentAnthropic([{"text": "never"}], fallback={"text": "side"}) as fake:
        _claude_on_path(monkeypatch, fake.root_url)
        options: dict[str, str] = {}
        with serve(world.workspace.parent / "srv-dir") as served, served.client() as client:
            off = client.post(
                "/v1/sessions", json={"provider": "claude-code", "options": {**options, "sandbox": "none"}}
            )
            assert off.status_code == 403 and "'sandbox'" in off.text, off.text  # a client cannot turn it off
            reply = client.post("/v1/sessions", json={"provider": "claude-code", "options": options})
            assert reply.status_code == 201, reply.text
            run_id = _run(client, reply.json()["id"], prompt="hello")
            run = _wait_done(client, run_id)
            frames = _read(client, run_id, fmt="seamline")
        seen = fake.model_requests()
    assert run["status"] == "failed", run
    errors = [json.loads(f["data"]) for f in frames if '"type":"error"' in f["data"].replace(" ", "")]
    assert errors and errors[0]["kind"] == "sandbox" and "cannot isolate" in errors[0]["message"], frames
    assert seen == []


@pytest.mark.real
def test_serve_with_sandbox_none_runs_the_agent_cli_as_asked(
    world: CliWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "srv-dir").mkdir()
    with AgentAnthropic([{"text": "Hello there."}], fallback={"text": "side"}) as fake:
        _claude_on_path(monkeypatch, fake.root_url)
        options = {"max_retries": "0"}
        with serve(world.workspace.parent / "srv-dir", sandbox="none") as served, served.client() as client:
            reply = client.post("/v1/sessions", json={"provider": "claude-code", "options": options})
            assert reply.status_code == 201, reply.text
            run = _wait_done(client, _run(client, reply.json()["id"], prompt="hello"))
    assert run["status"] == "completed", run


def test_seamline_acp_refuses_to_start_a_program_backend_it_cannot_isolate(world: CliWorld, tmp_path: Path) -> None:
    env = {**os.environ, "SEAMLINE_BWRAP": str(tmp_path / "no-bwrap")}
    argv = [sys.executable, "-m", "seamline", "acp", "--provider", "claude-code", "--no-store"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=ROOT, env=env, input="", check=False)
    assert done.returncode == 2, done.stderr
    assert "cannot isolate" in done.stderr and "-o sandbox=none" in done.stderr and "Traceback" not in done.stderr
    off = subprocess.run(
        [*argv, "-o", "sandbox=none"], capture_output=True, text=True, timeout=60, cwd=ROOT, env=env, input=""
    )
    assert off.returncode == 0, off.stderr
