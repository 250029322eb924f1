"""Many warm agent-CLI sessions held by one server (issue 44 §2), at a small size: three
warm Claude Code and three warm Codex sessions, the real programs in the envelope (real
bubblewrap) against the fake APIs on 127.0.0.1, served in this test's process. Once they
close, by ``DELETE /v1/sessions/ID`` or by the server's shutdown, nothing may be left:
no process they started, no file descriptor of this process over the baseline, no
runtime folder (sockets, hooks), and after a delete no envelope home.

bench/many_agents.py measures the same at full size (20 + 20 sessions): seamline's own
memory per live session and the delay from a CLI's line to the client's event."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("ag_ui")

from seamline.sandbox import probe
from seamline.server.agents_file import AgentSpec
from tests.leftovers import Leftovers
from tests.providers.agent_cli_support import AgentAnthropic, AgentOpenAI, CliWorld, cli_path, make_world
from tests.server.harness import serve

pytestmark = pytest.mark.real
EACH = 3  # sessions of each CLI
DEADLINE_S = 120.0  # how long a condition may take on a loaded machine before the test fails


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliWorld:
    report = probe("bwrap")
    if not report.ok:
        pytest.fail(f"bubblewrap cannot isolate here (bash scripts/system/20-bubblewrap.sh)\n{report.render()}")
    return make_world(tmp_path, monkeypatch)


@pytest.fixture
def runtime_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short private ``$XDG_RUNTIME_DIR``: the sessions' runtime folders go under its
    ``seamline/`` (socket paths stay under 108 bytes)."""
    made = Path(tempfile.mkdtemp(prefix="slmany-", dir="/tmp"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(made))
    yield made / "seamline"
    shutil.rmtree(made, ignore_errors=True)


def _agents(claude_url: str, codex_url: str) -> dict[str, AgentSpec]:
    return {
        "cc": AgentSpec(
            name="cc",
            provider="claude-code",
            model="claude-sonnet-4-5",
            options={"executable": cli_path("claude"), "base_url": claude_url, "max_retries": "0"},
        ),
        "cx": AgentSpec(
            name="cx",
            provider="codex",
            model="gpt-5.5",
            options={"executable": cli_path("codex"), "base_url": codex_url, "max_retries": "0"},
        ),
    }


def _until(check: Any, what: str, watch: Leftovers | None = None) -> Any:
    """Wait (polling) until ``check()`` is truthy, remembering live processes meanwhile."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        if watch is not None:
            watch.watch()
        if found := check():
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {DEADLINE_S:.0f} s: {what}")
        time.sleep(0.05)


def _warm_sessions(client: Any, watch: Leftovers) -> list[str]:
    """Open EACH sessions of each CLI, run one turn on each at once, and return their ids
    once every turn completed (the warm processes stay)."""
    ids: list[str] = []
    for agent in ("cc", "cx"):
        for _ in range(EACH):
            created = client.post("/v1/sessions", json={"agent": agent})
            assert created.status_code == 201, created.text
            ids.append(str(created.json()["id"]))
    runs: list[str] = []
    for session_id in ids:
        started = client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "say it"})
        assert started.status_code == 201, started.text
        runs.append(str(started.json()["id"]))

    def finished() -> list[dict[str, Any]] | None:
        rows: list[dict[str, Any]] = [client.get(f"/v1/runs/{run_id}").json() for run_id in runs]
        return rows if all(row["status"] != "running" for row in rows) else None

    rows = _until(finished, "every first turn finished", watch)
    assert [row["status"] for row in rows] == ["completed"] * len(runs), rows
    # Each session holds its warm program now: the check below is about something real.
    assert watch.watch() >= 2 * EACH, "the warm programs are not running"
    return ids


def _fakes() -> tuple[AgentAnthropic, AgentOpenAI]:
    claude = AgentAnthropic([{"text": "From Claude."}] * EACH, fallback={"text": "side"})
    codex = AgentOpenAI([{"text": "From Codex."}] * EACH)
    return claude, codex


def _sqlite_deferred(tmp_path: Path) -> dict[str, int]:
    """SQLite does not close a connection's descriptor to a file that another connection of
    the process holds locked (closing it would drop that one's POSIX locks): it keeps it and
    hands it to the next connection that opens the file. The server's own edit journal stays
    open, so each session's journal connection, closed with the session, leaves one such
    descriptor to the same file, reused by the next sessions (a high-water mark, not a
    leak per session). Up to one per session is allowed; nothing else."""
    return {str(tmp_path / "store.edits.db"): 2 * EACH}


def _settle(watch: Leftovers) -> list[str]:
    """The leftovers once the closing is done (processes may take a moment to be reaped)."""
    deadline = time.monotonic() + DEADLINE_S
    while (found := watch.problems()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def test_closed_warm_sessions_leave_no_process_descriptor_or_folder(
    world: CliWorld, tmp_path: Path, runtime_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_home = tmp_path / "data"
    monkeypatch.setenv("XDG_DATA_HOME", str(data_home))
    envelopes = data_home / "seamline" / "envelopes"
    claude, codex = _fakes()
    with claude, codex, serve(tmp_path, agents=_agents(claude.root_url, codex.base_url)) as served:
        with served.client() as client:  # the server's lazily opened files, opened before the baseline
            warm_up = client.post("/v1/sessions", json={"provider": "offline"}).json()["id"]
            assert client.delete(f"/v1/sessions/{warm_up}").status_code == 200
        watch = Leftovers(folders=(runtime_root,), fds_allowed=_sqlite_deferred(tmp_path))
        watch.baseline()
        with served.client() as client:
            ids = _warm_sessions(client, watch)
            assert len(list(runtime_root.iterdir())) >= 2 * EACH  # a runtime folder per live session
            homes = [p for p in envelopes.glob("*/*") if p.is_dir()]
            assert len(homes) >= 2 * EACH, homes
            for session_id in ids:
                removed = client.delete(f"/v1/sessions/{session_id}")
                assert removed.status_code == 200, removed.text
        problems = _settle(watch)
        assert not problems, "\n".join(problems)
        assert [p for p in envelopes.glob("*/*")] == []  # deleted sessions keep no envelope home
    assert len(claude.turn_requests()) == EACH and len(codex.model_requests()) >= EACH


def test_a_server_shut_down_with_warm_sessions_leaves_no_process_descriptor_or_folder(
    world: CliWorld, tmp_path: Path, runtime_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    claude, codex = _fakes()
    watch = Leftovers(folders=(runtime_root,))
    with claude, codex:
        watch.baseline()  # before the server: its own sockets and files must go too
        with serve(tmp_path, agents=_agents(claude.root_url, codex.base_url)) as served, served.client() as client:
            ids = _warm_sessions(client, watch)
        problems = _settle(watch)
        assert not problems, "\n".join(problems)
    # The sessions stay in the store (a later server resumes them); only their programs ended.
    assert len(ids) == 2 * EACH
