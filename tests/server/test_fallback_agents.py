"""An agents file's ``fallback``: a declared agent whose backend is overloaded finishes the
run on its fallback, over HTTP, with the handoff in the run's events and the store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ag_ui")
pytest.importorskip("uvicorn")

from seamline.server.agents_file import AgentsFileError, load_agents
from seamline.sessions.handoffs import handoffs_of
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.openai_api import FakeOpenAI
from tests.server.harness import serve, sse_frames


def _events(client: Any, run_id: str) -> list[dict[str, Any]]:
    with client.stream("GET", f"/v1/runs/{run_id}/events", params={"format": "seamline"}) as response:
        return [json.loads(frame["data"]) for frame in sse_frames(response.iter_lines())]


def test_a_declared_agent_fails_over_to_its_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEAMLINE_BLOCK_REAL_PROVIDERS", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-serve-fallback")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-serve-fallback")
    for key in ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(key, raising=False)
    with (
        FakeAnthropic([], fallback={"status": 529}) as anthropic,
        FakeOpenAI([{"text": "from the fallback"}]) as openai,
    ):
        agents_file = tmp_path / "agents.toml"
        agents_file.write_text(
            f"""
[agents.writer]
provider = "anthropic"
model = "claude-sonnet-4-6"
options = {{ base_url = "{anthropic.base_url}", max_retries = "0" }}
fallback = [{{ provider = "openai", model = "gpt-4o-mini", options = {{ base_url = "{openai.base_url}" }} }}]
"""
        )
        agents = load_agents(agents_file, default_workspace=tmp_path)
        assert [(f.provider, f.model) for f in agents["writer"].fallback] == [("openai", "gpt-4o-mini")]
        with serve(tmp_path, agents=agents) as served, served.client() as client:
            created = client.post("/v1/sessions", json={"agent": "writer"})
            assert created.status_code == 201, created.text
            session_id = created.json()["id"]
            run = client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "write"}).json()
            events = _events(client, run["id"])
            assert client.get(f"/v1/runs/{run['id']}").json()["status"] == "completed"
            record = served.store.require(session_id)
        asked = openai.model_requests()
    assert len(asked) == 1
    types = [e.get("type") for e in events]
    assert types.count("complete") == 1 and events[-1]["text"] == "from the fallback"
    (switch,) = [e["payload"] for e in events if e.get("type") == "raw" and e.get("source") == "handoff"]
    assert (switch["from"], switch["to"], switch["reason"]) == ("anthropic", "openai", "provider")
    assert record.provider == "openai"
    assert [(h["to"], h["reason"]) for h in handoffs_of(record.metadata)] == [("openai", "provider")]


@pytest.mark.parametrize(
    ("fallback", "names"),
    [
        ("['nope:x']", "agents.a.fallback.0: unknown provider 'nope'"),
        ("'offline'", "agents.a.fallback"),
        ("[{ provider = 'openai', options = { base_url = 'ftp://x' } }]", "agents.a.fallback.0.options.base_url"),
        ("[{ provider = 'offline', colour = 'red' }]", "agents.a.fallback.0.colour"),
        ("[3]", "agents.a.fallback.0"),
    ],
)
def test_a_bad_fallback_in_the_agents_file_names_its_key(tmp_path: Path, fallback: str, names: str) -> None:
    path = tmp_path / "agents.toml"
    path.write_text(f"[agents.a]\nprovider = 'offline'\nfallback = {fallback}\n")
    with pytest.raises(AgentsFileError, match=names.replace(".", r"\.").replace("'", ".")):
        load_agents(path, default_workspace=tmp_path)
