"""What an HTTP client of `seamline serve` may start: no program, path or endpoint of its
choosing, no `yes`, no folder outside the server's; the operator's `--agents FILE` declares
anything more (issue 29)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("ag_ui")
pytest.importorskip("uvicorn")

from seamline.server.agents_file import AgentsFileError, AgentSpec, ServePolicy, load_agents
from tests.fakes.openai_api import FakeOpenAI
from tests.server.harness import TOOL_TURN, serve, sse_frames


def _refused(reply: Any, *words: str) -> str:
    assert reply.status_code == 403, reply.text
    body = reply.json()["error"]
    assert body["kind"] == "permission"
    for word in words:
        assert word in body["message"], body["message"]
    return str(body["message"])


def _wait_done(client: Any, run_id: str) -> dict[str, Any]:
    with client.stream("GET", f"/v1/runs/{run_id}/events", params={"format": "seamline"}) as response:
        list(sse_frames(response.iter_lines()))
    run: dict[str, Any] = client.get(f"/v1/runs/{run_id}").json()
    return run


@pytest.mark.parametrize(
    ("provider", "option", "value"),
    [
        ("acp", "command", "sh -c 'touch /tmp/pwned'"),
        ("claude-code", "executable", "/bin/sh"),
        ("codex", "executable", "/bin/sh"),
        ("gemini-cli", "executable", "/bin/sh"),
        ("opencode", "executable", "/bin/sh"),
        ("claude-code", "config_dir", "/tmp"),
        ("openai", "base_url", "http://evil.example/v1"),
        ("anthropic", "api_key_env", "AWS_SECRET_ACCESS_KEY"),
    ],
)
def test_a_client_cannot_name_a_program_path_or_endpoint(
    tmp_path: Path, provider: str, option: str, value: str
) -> None:
    with serve(tmp_path) as served, served.client() as client:
        body = {"provider": provider, "options": {option: value}}
        _refused(client.post("/v1/sessions", json=body), repr(option), "--agents")
        _refused(client.post("/v1/pipelines/single/runs", json={"prompt": "go", **body}), repr(option))
        assert client.get("/v1/sessions").json()["sessions"] == []


def test_run_and_fork_options_are_checked_too(tmp_path: Path) -> None:
    with serve(tmp_path) as served, served.client() as client:
        served.store.create_session("0be0a10000000001", provider="openai", model="gpt-4o", workspace=None)
        session_id = "0be0a10000000001"
        bad = {"options": {"base_url": "http://evil.example"}}
        _refused(client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "hi", **bad}), "'base_url'")
        _refused(client.post(f"/v1/sessions/{session_id}/fork", json=bad), "'base_url'")
        # A session another surface stored with a program-running provider: its client may not
        # choose the sandbox either.
        served.store.create_session(
            "c1aude0000000001", provider="claude-code", model=None, workspace=str(served.workspace)
        )
        sandbox_off = {"prompt": "hi", "options": {"sandbox": "none"}}
        _refused(client.post("/v1/sessions/c1aude0000000001/runs", json=sandbox_off), "'sandbox'")


@pytest.mark.parametrize("provider", ["claude-code", "codex", "gemini-cli", "acp", "opencode"])
def test_a_program_running_provider_runs_in_the_envelope_without_an_agents_file(tmp_path: Path, provider: str) -> None:
    policy = ServePolicy(tmp_path)  # serve's default: --sandbox auto
    assert policy.plan(provider=provider, model=None, options={}, workspace=None, yes=False, agent=None).options == {
        "sandbox": "auto"
    }
    record = SimpleNamespace(id="s1", provider=provider, model=None, workspace=str(tmp_path), metadata={})
    assert policy.stored(record, {}, yes=False).options == {"sandbox": "auto"}
    strict = ServePolicy(tmp_path, sandbox="bwrap")
    assert strict.plan(provider=provider, model=None, options={}, workspace=None, yes=False, agent=None).options == {
        "sandbox": "bwrap"
    }
    # The operator turned the envelope off (serve --sandbox none), and the plan says so.
    off = ServePolicy(tmp_path, sandbox="none")
    assert off.plan(provider=provider, model=None, options={}, workspace=None, yes=False, agent=None).options == {
        "sandbox": "none"
    }
    # A model API runs no program: nothing is added.
    assert policy.plan(provider="openai", model=None, options={}, workspace=None, yes=False, agent=None).options == {}
    with serve(tmp_path) as served, served.client() as client:
        _refused(client.post("/v1/sessions", json={"provider": provider, "options": {"sandbox": "none"}}), "'sandbox'")


def test_yes_from_a_client_is_refused_unless_its_agent_allows_it(tmp_path: Path) -> None:
    agents = {
        "careful": AgentSpec(name="careful", provider="scripted", client_options=("script",)),
        "trusted": AgentSpec(name="trusted", provider="scripted", yes=True, client_options=("script",)),
    }
    with serve(tmp_path, agents=agents) as served, served.client() as client:
        script = {"script": served.script("tool", [*TOOL_TURN, *TOOL_TURN])}
        _refused(client.post("/v1/sessions", json={"provider": "offline", "yes": True}), "yes: true")
        _refused(client.post("/v1/sessions", json={"agent": "careful", "options": script, "yes": True}), "careful")
        _refused(client.post("/v1/pipelines/single/runs", json={"prompt": "go", "yes": True}), "yes: true")
        plain = client.post("/v1/sessions", json={"provider": "offline"}).json()["id"]
        _refused(client.post(f"/v1/sessions/{plain}/runs", json={"prompt": "hi", "yes": True}), "yes: true")
        _refused(client.post(f"/v1/sessions/{plain}/fork", json={"yes": True}), "yes: true")
        trusted = client.post("/v1/sessions", json={"agent": "trusted", "options": script, "yes": True})
        assert trusted.status_code == 201, trusted.text
        run = client.post(f"/v1/sessions/{trusted.json()['id']}/runs", json={"prompt": "write", "yes": True})
        assert _wait_done(client, run.json()["id"])["status"] == "completed"
        assert (served.workspace / "hello.txt").read_text() == "hi\n"


def test_a_workspace_outside_the_servers_folder_is_refused(tmp_path: Path) -> None:
    with serve(tmp_path) as served, served.client() as client:
        (served.workspace / "sub").mkdir()
        (served.workspace / "out").symlink_to(tmp_path)
        for folder in ("/", "~", "..", "sub/../..", str(tmp_path), "out"):
            _refused(client.post("/v1/sessions", json={"workspace": folder}), "outside")
            _refused(client.post("/v1/pipelines/single/runs", json={"prompt": "x", "workspace": folder}), "outside")
        for folder in ("sub", str(served.workspace / "sub"), str(served.workspace)):
            reply = client.post("/v1/sessions", json={"workspace": folder})
            assert reply.status_code == 201, reply.text
        assert client.post("/v1/sessions", json={"workspace": "nope"}).status_code == 400
        # A stored session whose folder is elsewhere is not revived there.
        served.store.create_session("e15e000000000001", provider="offline", model=None, workspace="/")
        _refused(client.post("/v1/sessions/e15e000000000001/runs", json={"prompt": "hi"}), "outside")
        _refused(client.post("/v1/sessions/e15e000000000001/revert", json={}), "outside")
        _refused(client.post("/v1/sessions/e15e000000000001/fork", json={}), "outside")


def test_a_declared_agent_runs_with_the_operators_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEAMLINE_BLOCK_REAL_PROVIDERS", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-serve-agent")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    root = tmp_path / "repos"
    (root / "one").mkdir(parents=True)
    script = [{"text": "from the fake", "usage": {"input_tokens": 3, "output_tokens": 2}}] * 3
    with FakeOpenAI(script) as fake:
        agents_file = tmp_path / "agents.toml"
        agents_file.write_text(
            f"""
[agents.reviewer]
provider = "openai"
model = "gpt-4o"
options = {{ base_url = "{fake.base_url}" }}
budget_usd = 2.0
workspaces = ["{root}"]
"""
        )
        agents = load_agents(agents_file, default_workspace=tmp_path)
        with serve(tmp_path, agents=agents) as served, served.client() as client:
            listed = client.get("/v1/agents").json()["agents"]
            assert listed == [
                {
                    "name": "reviewer",
                    "description": "",
                    "provider": "openai",
                    "model": "gpt-4o",
                    "workspaces": [str(root)],
                    "sandbox": "bwrap",
                    "budget_usd": 2.0,
                    "on_budget": "fail",
                    "yes": False,
                    "client_options": [],
                }
            ]
            assert fake.base_url not in client.get("/v1/agents").text
            _refused(client.post("/v1/sessions", json={"agent": "reviewer", "workspace": str(served.workspace)}))
            _refused(client.post("/v1/sessions", json={"agent": "reviewer", "options": {"temperature": "1"}}))
            _refused(client.post("/v1/sessions", json={"agent": "reviewer", "model": "gpt-5"}), "model")
            assert client.post("/v1/sessions", json={"agent": "nobody"}).status_code == 404
            created = client.post("/v1/sessions", json={"agent": "reviewer", "workspace": "one"})
            assert created.status_code == 201, created.text
            row = created.json()
            assert row["metadata"]["agent"] == "reviewer" and row["workspace"] == str(root / "one")
            run = client.post(f"/v1/sessions/{row['id']}/runs", json={"prompt": "review"}).json()
            assert _wait_done(client, run["id"])["status"] == "completed"
            assert len(fake.model_requests()) == 1  # the operator's endpoint, not the vendor's
            fork = client.post(f"/v1/sessions/{row['id']}/fork", json={})
            assert fork.status_code == 201, fork.text
            assert client.get(f"/v1/sessions/{fork.json()['id']}").json()["metadata"]["agent"] == "reviewer"
            run = client.post(f"/v1/sessions/{fork.json()['id']}/runs", json={"prompt": "again"}).json()
            assert _wait_done(client, run["id"])["status"] == "completed"
            assert len(fake.model_requests()) == 2
            # A client cannot claim an agent through metadata.
            spoof = client.post("/v1/sessions", json={"provider": "offline", "metadata": {"agent": "reviewer"}})
            assert spoof.status_code == 400


def test_an_agent_cli_is_started_only_as_its_agent_declares(tmp_path: Path) -> None:
    agents = {
        "boxed": AgentSpec(name="boxed", provider="claude-code"),  # sandbox = "bwrap" by default
        "other": AgentSpec(name="other", provider="offline"),
    }
    policy = ServePolicy(tmp_path, agents)
    plan = policy.plan(provider=None, model=None, options={}, workspace=None, yes=False, agent="boxed")
    assert plan.options == {"sandbox": "bwrap"} and plan.provider == "claude-code"
    with serve(tmp_path, agents=agents) as served, served.client() as client:
        _refused(client.post("/v1/sessions", json={"agent": "boxed", "options": {"sandbox": "none"}}), "'sandbox'")
        assert client.post("/v1/sessions", json={"agent": "other", "provider": "scripted"}).status_code == 400


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("[agents.a]\nprovider = 'offline'\nbudget_usd = -1\n", "agents.a.budget_usd"),
        ("[agents.a]\nprovider = 'nope'\n", "agents.a.provider"),
        ("[agents.a]\nprovider = 'offline'\nsandbox = 'chroot'\n", "agents.a.sandbox"),
        ("[agents.a]\nprovider = 'offline'\nworkspaces = ['/no/such/dir']\n", "agents.a.workspaces"),
        ("[agents.a]\nprovider = 'openai'\noptions = { base_url = 'ftp://x' }\n", "agents.a.options.base_url"),
        ("[agents.a]\nprovider = 'offline'\ncolour = 'red'\n", "agents.a.colour"),
        ("[agents.a]\nprovider = 'acp'\nclient_options = ['command']\n", "agents.a.client_options"),
        ("[agents.a]\nprovider = 'offline'\nyes = 'sure'\n", "agents.a.yes"),
        ("[agents.a\nprovider = 'offline'\n", "line 1"),
        ("", "declares no agents"),
    ],
)
def test_a_bad_agents_file_names_the_key_or_line(tmp_path: Path, text: str, names: str) -> None:
    path = tmp_path / "agents.toml"
    path.write_text(text)
    with pytest.raises(AgentsFileError, match=names.replace(".", r"\.")):
        load_agents(path, default_workspace=tmp_path)


def test_serve_exits_2_on_a_bad_agents_file(tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]) -> None:
    path = tmp_path / "agents.toml"
    path.write_text("[agents.a]\nprovider = 'offline'\nbudget_usd = 'lots'\n")
    done = subprocess.run(
        [*seamline_cmd, "serve", "--port", "0", "--agents", str(path), "--store", str(tmp_path / "s.db")],
        env={**cli_env, "HOME": os.environ.get("HOME", "/tmp")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "agents.a.budget_usd" in done.stderr
