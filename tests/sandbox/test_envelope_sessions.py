"""The envelope across a session's life (Claude Code, the real program, real bubblewrap):
a second turn resumes from the private home, a fork carries the conversation into its own
home, abort ends the whole sandbox (bwrap, its pid namespace, the CLI) of a process per
turn, a warm one lives across turns in one envelope, and the gate's sockets are gone
afterwards."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from seamline.events import Error, Event, Raw, Session
from seamline.providers.agent_clis.claude_code import ClaudeCodeProvider
from seamline.providers.programs.envelope_launch import envelope_home
from tests.providers.agent_cli_support import (
    ROOT,
    AgentAnthropic,
    CliWorld,
    abort_when,
    assert_group_gone,
    cli_path,
    collect,
    make_world,
    one_complete,
    run_async,
)
from tests.sandbox.envelope_support import reach_command, second_server

pytestmark = pytest.mark.real
MODEL = "claude-sonnet-4-5"


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bwrap_ready: None) -> CliWorld:
    return make_world(tmp_path, monkeypatch)


def provider(fake: AgentAnthropic, **options: str) -> ClaudeCodeProvider:
    merged = {"executable": cli_path("claude"), "base_url": fake.root_url, "max_retries": "0", "sandbox": "bwrap"}
    return ClaudeCodeProvider(model=MODEL, options={**merged, **options})


@run_async
async def test_second_turn_resumes_and_a_fork_carries_the_history(world: CliWorld) -> None:
    script = [{"text": "One."}, {"text": "Two."}, {"text": "Child."}]
    with AgentAnthropic(script, fallback={"text": "side"}) as fake:
        claude = provider(fake)
        session = await claude.open(workspace=world.workspace)
        await collect(session, "alpha-marker")
        second = await collect(session, "beta-marker")
        child = await claude.open_forked(session, workspace=world.workspace)
        forked = await collect(child, "child-marker")
        requests = fake.turn_requests()
    assert one_complete(second).text == "Two." and one_complete(forked).text == "Child."
    assert "alpha-marker" in json.dumps(requests[1].body["messages"])
    assert "beta-marker" in json.dumps(requests[2].body["messages"])
    transcript = claude.transcript_location(session)
    home = envelope_home("claude-code", session.session_id)
    assert transcript is not None and transcript.is_file() and transcript.is_relative_to(home)
    assert not (world.home / ".claude" / "projects").exists()  # nothing in the host's home
    assert child.provider_session_id != session.provider_session_id


@run_async
async def test_abort_ends_the_whole_sandbox(world: CliWorld) -> None:
    # A process per turn: abort ends bwrap, its pid namespace and the CLI.
    with AgentAnthropic([{"text": "slow", "delay": 30}], fallback={"text": "side"}) as fake:
        claude = provider(fake, grace="2", warm="false")
        session = await claude.open(workspace=world.workspace)
        events = await abort_when(
            claude, session, "hi", lambda e: isinstance(e, Session) and bool(e.provider_session_id)
        )
    final = one_complete(events)
    assert final.outcome == "aborted" and not [e for e in events if isinstance(e, Error)]
    assert_group_gone(session)
    runtime = session.state["runtime_dir"]
    assert not list(runtime.glob("egress-*.sock"))


@run_async
async def test_a_warm_sandbox_lives_across_turns_and_reports_each_turns_refusals(world: CliWorld) -> None:
    # One warm CLI in one envelope for the session: abort ends only the turn, the egress
    # refusals of turn 3 are turn 3's, and close ends the whole sandbox.
    with second_server() as (port, hits):
        script = [
            {"text": "One."},
            {"text": "slow", "delay": 30},
            {"tool_calls": [{"name": "Bash", "arguments": {"command": reach_command(port)}}]},
            {"text": "Three."},
        ]
        with AgentAnthropic(script, fallback={"text": "side"}) as fake:
            claude = provider(fake, grace="5")
            session = await claude.open(workspace=world.workspace)
            first = await collect(session, "one")
            pid = session.state["cli_process"].pid

            async def abort_once_asked() -> None:
                while len(fake.turn_requests()) < 2:
                    await asyncio.sleep(0.05)
                await claude.abort(session)

            aborting = asyncio.create_task(abort_once_asked())
            second = await asyncio.wait_for(collect(session, "two"), timeout=60)
            await aborting
            third = await collect(session, "three")
            assert session.state["cli_process"].pid == pid
            runtime = session.state["runtime_dir"]
            assert list(runtime.glob("egress-*.sock"))  # the gate serves the live process
            gate = session.state["cli_warm"].envelope.gate  # type: ignore[attr-defined]
            await claude.close(session)
            assert gate._servers == []  # closed with the process
    assert one_complete(first).text == "One." and one_complete(second).outcome == "aborted"
    assert one_complete(third).text == "Three." and hits == []

    def refusals(events: list[Event]) -> list[dict[str, object]]:
        return [e.payload for e in events if isinstance(e, Raw) and e.payload.get("egress") == "refused"]

    def summaries(events: list[Event]) -> list[int]:
        return [e.payload["egress_refused"] for e in events if isinstance(e, Raw) and "egress_refused" in e.payload]

    # Each turn's summary counts that turn's refusals (the CLI's own start-up calls are turn 1's).
    assert [summaries(t) for t in (first, second, third)] == [[len(refusals(t))] for t in (first, second, third)]
    assert [r["port"] for r in refusals(third)] == [port] and not [r for r in refusals(first) if r["port"] == port]
    assert_group_gone(session)
    assert not list(runtime.glob("egress-*.sock"))


@run_async
async def test_close_removes_the_runtime_folder(world: CliWorld) -> None:
    with AgentAnthropic([{"text": "One."}], fallback={"text": "side"}) as fake:
        claude = provider(fake)
        session = await claude.open(workspace=world.workspace)
        await collect(session, "hello")
        runtime = session.state["runtime_dir"]
        assert runtime.is_dir()
        await claude.close(session)
    assert not runtime.exists()


def test_removing_a_session_removes_its_envelope_home(world: CliWorld) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "SEAMLINE_STORE": str(world.home / "s.db")}
    with AgentAnthropic([{"text": "One."}], fallback={"text": "side"}) as fake:
        argv = [
            sys.executable, "-m", "seamline", "run", "--provider", "claude-code", "--model", MODEL, "--json",
            "--sandbox", "bwrap", "-o", f"executable={cli_path('claude')}", "-o", f"base_url={fake.root_url}",
            "-o", "max_retries=0", "--workspace", str(world.workspace), "hello",
        ]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr
    session_id = json.loads(done.stdout.splitlines()[0])["session_id"]
    home = envelope_home("claude-code", session_id)
    assert home.is_dir() and any(home.rglob("*.jsonl")), home  # the CLI's transcript lives there
    removed = subprocess.run(
        [sys.executable, "-m", "seamline", "sessions", "rm", session_id],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    assert removed.returncode == 0, removed.stderr
    assert not home.exists()
