"""One approval path: every entry point (run, sessions, pipelines, run_sync, seamline.Agent,
`seamline serve`, `seamline acp`, `run --on temporal`) applies the hard denials of `run --yes`."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest

import seamline
from seamline.testing import scripted
from tests.durable import conftest as durable
from tests.durable.conftest import DevServer, Processes

RM_OUTSIDE = '[{"tool_calls": [{"name": "shell", "arguments": {"command": "rm -rf ../x"}}]}, {"text": "done"}]'
# The Temporal dev server and worker fixtures of tests/durable, for the `run --on temporal` test.
dev_server = durable.dev_server
shared_dev_server = durable.shared_dev_server
processes = durable.processes
HELLO = '[{"text": "hello"}]'


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Path]:
    victim = tmp_path / "x"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    ws = tmp_path / "ws"
    ws.mkdir()
    rm = tmp_path / "rm.json"
    rm.write_text(RM_OUTSIDE)
    hello = tmp_path / "hello.json"
    hello.write_text(HELLO)
    return {"victim": victim, "ws": ws, "rm": rm, "hello": hello, "store": tmp_path / "s.db"}


def sh(cmd: list[str], env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=120)


def refused(stdout: str) -> bool:
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return any(
        e["type"] == "permission_decision" and e["decision"] == "deny" and "hard denial" in str(e.get("reason"))
        for e in events
    )


def started_session(cmd: list[str], env: dict[str, str], world: dict[str, Path]) -> str:
    done = sh(
        cmd, env, "run", "--json", "--store", str(world["store"]), "-p", "scripted", "-o", f"script={world['hello']}",
        "-w", str(world["ws"]), "hi",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout.splitlines()[0])["session_id"])


def test_run_yes_refuses_a_recursive_delete_outside(
    seamline_cmd: list[str], cli_env: dict[str, str], world: dict[str, Path]
) -> None:
    done = sh(
        seamline_cmd, cli_env, "run", "--json", "--yes", "--store", str(world["store"]), "-p", "scripted",
        "-o", f"script={world['rm']}", "-w", str(world["ws"]), "go",
    )  # fmt: skip
    assert refused(done.stdout), done.stdout + done.stderr
    assert (world["victim"] / "precious.txt").read_text() == "keep me"


def test_run_session_yes_refuses_a_recursive_delete_outside(
    seamline_cmd: list[str], cli_env: dict[str, str], world: dict[str, Path]
) -> None:
    sid = started_session(seamline_cmd, cli_env, world)
    done = sh(
        seamline_cmd, cli_env, "run", "--json", "--yes", "--store", str(world["store"]), "--session", sid,
        "-o", f"script={world['rm']}", "go",
    )  # fmt: skip
    assert refused(done.stdout), done.stdout + done.stderr
    assert (world["victim"] / "precious.txt").read_text() == "keep me"


def test_sessions_resume_and_fork_yes_refuse_a_recursive_delete_outside(
    seamline_cmd: list[str], cli_env: dict[str, str], world: dict[str, Path]
) -> None:
    sid = started_session(seamline_cmd, cli_env, world)
    resumed = sh(
        seamline_cmd, cli_env, "sessions", "resume", sid, "go", "--json", "--yes", "--store", str(world["store"]),
        "-o", f"script={world['rm']}",
    )  # fmt: skip
    assert refused(resumed.stdout), resumed.stdout + resumed.stderr
    forked = sh(
        seamline_cmd, cli_env, "sessions", "fork", sid, "--prompt", "go", "--json", "--yes",
        "--store", str(world["store"]), "-o", f"script={world['rm']}",
    )  # fmt: skip
    assert refused(forked.stdout), forked.stdout + forked.stderr
    assert (world["victim"] / "precious.txt").read_text() == "keep me"


def test_pipeline_yes_refuses_a_recursive_delete_outside(
    seamline_cmd: list[str], cli_env: dict[str, str], world: dict[str, Path]
) -> None:
    done = sh(
        seamline_cmd, cli_env, "run", "--pipeline", "single", "--json", "--yes", "--store", str(world["store"]),
        "-p", "scripted", "-o", f"script={world['rm']}", "-w", str(world["ws"]), "go",
    )  # fmt: skip
    assert refused(done.stdout), done.stdout + done.stderr
    assert (world["victim"] / "precious.txt").read_text() == "keep me"


def test_run_sync_yes_refuses_a_recursive_delete_outside(world: dict[str, Path]) -> None:
    result = seamline.run_sync(
        "go", provider="scripted", options={"script": str(world["rm"])}, workspace=world["ws"], yes=True
    )
    decisions = [e for e in result.events if e.type == "permission_decision"]
    assert decisions and all(d.decision == "deny" and "hard denial" in d.reason for d in decisions)
    assert (world["victim"] / "precious.txt").read_text() == "keep me"


def test_agent_yes_refuses_a_recursive_delete_outside(world: dict[str, Path]) -> None:
    """The Python API: seamline.Agent(..., yes=True)."""
    provider = scripted(json.loads(RM_OUTSIDE))
    agent = seamline.Agent(provider=provider, workspace=world["ws"], workspace_tools=True, yes=True)
    result = agent.run_sync("go")
    decisions = [e for e in result.events if e.type == "permission_decision"]
    assert decisions and all(d.decision == "deny" and "hard denial" in d.reason for d in decisions)
    assert (world["victim"] / "precious.txt").read_text() == "keep me"


def test_serve_yes_refuses_a_recursive_delete_outside(tmp_path: Path) -> None:
    """`seamline serve`: a run started over HTTP with yes=true."""
    from tests.server.harness import serve, sse_frames

    victim = tmp_path / "x"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    from seamline.server.agents_file import AgentSpec

    # yes over HTTP is the operator's to give: a declared agent that allows it.
    agents = {"trusted": AgentSpec(name="trusted", provider="scripted", yes=True, client_options=("script",))}
    with serve(tmp_path, agents=agents) as served, served.client() as client:
        path = served.script("rm", json.loads(RM_OUTSIDE))
        reply = client.post("/v1/sessions", json={"agent": "trusted", "options": {"script": path}, "yes": True})
        assert reply.status_code == 201, reply.text
        run = client.post(f"/v1/sessions/{reply.json()['id']}/runs", json={"prompt": "go", "yes": True})
        assert run.status_code == 201, run.text
        with client.stream("GET", f"/v1/runs/{run.json()['id']}/events", params={"format": "seamline"}) as stream:
            lines = [f["data"] for f in sse_frames(stream.iter_lines()) if f.get("data", "").startswith("{")]
    assert refused("\n".join(lines)), lines
    assert (victim / "precious.txt").read_text() == "keep me"


@pytest.mark.real
def test_acp_yes_refuses_a_recursive_delete_outside(world: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """`seamline acp --yes`, the real subprocess, driven by a client that approves everything."""
    from seamline.events import ToolResult
    from seamline.providers.acp.provider import AcpProvider
    from seamline.tools.approval import YesApproval
    from tests.acp_agent.support import ROOT, agent_command

    monkeypatch.delenv("SEAMLINE_BLOCK_REAL_PROVIDERS", raising=False)  # the program is seamline's own
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src"))
    command = agent_command(world["rm"], world["store"], "--yes")
    provider = AcpProvider(options={"command": command, "grace": "1", "cancel_timeout": "5", "turn_timeout": "60"})

    async def scenario() -> list[object]:
        session = await provider.open(workspace=world["ws"], approval=YesApproval(yes=True))
        try:
            return [e async for e in session.send("go")]
        finally:
            await provider.close(session)

    events = asyncio.run(scenario())
    results = [e for e in events if isinstance(e, ToolResult)]
    assert results and all(r.is_error and "hard denial" in r.output for r in results), results
    assert (world["victim"] / "precious.txt").read_text() == "keep me"


@pytest.mark.real
def test_run_on_temporal_yes_refuses_a_recursive_delete_outside(
    dev_server: DevServer, processes: Processes, world: dict[str, Path]
) -> None:
    """`seamline run --on temporal --yes`: the turn runs on a worker, which applies the hard denial."""
    processes.worker(dev_server.target, "q-deny")
    client = processes.client(
        ["--temporal", dev_server.target, "--task-queue", "q-deny", "--store", str(world["store"]), "--json",
         "--yes", "-p", "scripted", "-o", f"script={world['rm']}", "--workspace", str(world["ws"]), "go"]
    )  # fmt: skip
    out, err = client.communicate(timeout=180)
    assert refused(out.decode()), out.decode() + err.decode()
    assert (world["victim"] / "precious.txt").read_text() == "keep me"
