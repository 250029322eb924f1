"""`seamline watch`'s Textual app, driven as a person would by Textual's headless pilot:
against a real `seamline serve` on 127.0.0.1 (in a thread of this process) it approves a
run's waiting permission request, cancels a live run, and shows the diff of and discards a
worktree run over the server's routes; on the store it shows the diff of and merges a
worktree run, and says that approving needs a server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("textual")
pytest.importorskip("starlette")

from textual.pilot import Pilot
from textual.widgets import Log

from seamline.cli.watch_app import DiffScreen, FleetApp
from seamline.cli.watch_sources import ServerSource, StoreSource
from seamline.sessions.sqlite_store import open_store
from tests.server.harness import TOOL_TURN, Served, serve
from tests.worktrees.git_repo import git, git_home, make_repo, worktree_run

SIZE = (200, 50)


async def until(pilot: Pilot[None], done: Callable[[], bool], what: str, *, timeout: float = 60.0) -> None:
    """Let the app run until ``done()``; fail after ``timeout`` seconds saying ``what``."""
    end = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        await pilot.pause(0.05)


async def select(pilot: Pilot[None], app: FleetApp, session_id: str) -> None:
    """Move the table's cursor to the run with the arrow keys, as a person would."""
    await until(pilot, lambda: session_id in app.rows, f"run {session_id} in the table")
    for _ in range(len(app.rows) + 1):
        if app.selected == session_id:
            return
        await pilot.press("down")
    for _ in range(len(app.rows) + 1):
        if app.selected == session_id:
            return
        await pilot.press("up")
    assert app.selected == session_id


def _events(app: FleetApp) -> str:
    return "\n".join(app.query_one("#events", Log).lines)


def _open(served: Served, client: Any, script: list[dict[str, Any]], name: str) -> str:
    made = client.post(
        "/v1/sessions", json={"provider": "scripted", "options": {"script": served.script(name, script)}}
    )
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def _start(client: Any, session_id: str, prompt: str) -> str:
    started = client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": prompt})
    assert started.status_code == 201, started.text
    return str(started.json()["id"])


def _wait_run(client: Any, run_id: str, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    end = time.monotonic() + 60
    while True:
        run: dict[str, Any] = client.get(f"/v1/runs/{run_id}").json()
        if done(run):
            return run
        assert time.monotonic() < end, run
        time.sleep(0.05)


def test_the_pilot_approves_a_waiting_permission_request(tmp_path: Path) -> None:
    with serve(tmp_path) as served, served.client() as client:
        other = _open(served, client, [{"text": "nothing to do"}], "other")
        _wait_run(client, _start(client, other, "say hi"), lambda r: r["status"] == "completed")
        session_id = _open(served, client, TOOL_TURN, "writes")
        run_id = _start(client, session_id, "write hello.txt")
        _wait_run(client, run_id, lambda r: bool(r["pending_permissions"]))
        assert not (served.workspace / "hello.txt").exists()

        async def drive() -> None:
            app = FleetApp(ServerSource(served.base), interval=0.2)
            async with app.run_test(size=SIZE) as pilot:
                await select(pilot, app, session_id)
                row = app.rows[session_id]
                assert (row["status"], row["pending_approvals"], row["current_tool"]) == ("running", 1, "write_file")
                await until(pilot, lambda: "? permission asked: write_file" in _events(app), "the request in the pane")
                await pilot.press("a")
                await until(pilot, lambda: app.rows[session_id]["status"] == "completed", "the run to complete")
                assert app.status_text == f"allowed write_file for run {session_id[:12]}"
                await until(pilot, lambda: "[completed: end_turn]" in _events(app), "the end in the pane")
                assert "permission allow (once)" in _events(app)
                assert app.rows[session_id]["pending_approvals"] == 0
                assert app.rows[other]["status"] == "completed"  # the other run is listed too
                await pilot.press("q")
            assert app.return_code in (0, None)

        asyncio.run(drive())
        assert client.get(f"/v1/runs/{run_id}").json()["status"] == "completed"
        assert (served.workspace / "hello.txt").read_text() == "hi\n"


def test_the_pilot_denies_a_waiting_permission_request(tmp_path: Path) -> None:
    with serve(tmp_path) as served, served.client() as client:
        session_id = _open(served, client, TOOL_TURN, "writes")
        run_id = _start(client, session_id, "write hello.txt")
        _wait_run(client, run_id, lambda r: bool(r["pending_permissions"]))

        async def drive() -> None:
            app = FleetApp(ServerSource(served.base), interval=0.2)
            async with app.run_test(size=SIZE) as pilot:
                await select(pilot, app, session_id)
                await until(pilot, lambda: "? permission asked: write_file" in _events(app), "the request in the pane")
                await pilot.press("d")
                await until(pilot, lambda: app.rows[session_id]["pending_approvals"] == 0, "the answer")
                assert app.status_text == f"denied write_file for run {session_id[:12]}"
                await until(pilot, lambda: "permission deny" in _events(app), "the decision in the pane")
                await pilot.press("q")

        asyncio.run(drive())
        _wait_run(client, run_id, lambda r: r["status"] != "running")
        assert not (served.workspace / "hello.txt").exists()  # denied: the tool never ran


def test_the_pilot_cancels_a_live_run(tmp_path: Path) -> None:
    with serve(tmp_path) as served, served.client() as client:
        session_id = _open(served, client, [{"delay": 120, "text": "too late"}], "slow")
        run_id = _start(client, session_id, "take your time")
        _wait_run(client, run_id, lambda r: r["status"] == "running")

        async def drive() -> None:
            app = FleetApp(ServerSource(served.base), interval=0.2)
            async with app.run_test(size=SIZE) as pilot:
                await select(pilot, app, session_id)
                await pilot.press("c")
                await until(pilot, lambda: app.rows[session_id]["status"] == "aborted", "the run to end aborted")
                assert app.status_text == f"cancelled run {session_id[:12]}"
                await pilot.press("c")  # a second cancel is refused: nothing is running
                await until(pilot, lambda: "is not running here" in app.status_text, "the refusal")

        asyncio.run(drive())
        assert client.get(f"/v1/runs/{run_id}").json()["status"] == "aborted"


@pytest.fixture
def git_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in git_home(tmp_path / "home").items():
        monkeypatch.setenv(key, value)


@pytest.fixture
def repo(git_env: None, tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


def test_the_pilot_shows_the_diff_and_merges_a_worktree_run_from_the_store(repo: Path, tmp_path: Path) -> None:
    store_path = tmp_path / "store.db"
    run_id = worktree_run(repo, store_path, "notes.txt", "from the run\n")
    store = open_store(store_path, read_only=True)

    async def drive() -> None:
        app = FleetApp(StoreSource(store, location=str(store_path), interval=0.2), interval=0.2)
        async with app.run_test(size=SIZE) as pilot:
            await select(pilot, app, run_id)
            assert app.rows[run_id]["worktree_state"] == "open"
            await pilot.press("a")  # a stored run in another process cannot be asked
            await until(pilot, lambda: "needs a server" in app.status_text, "the refusal to approve")
            await pilot.press("v")
            await until(pilot, lambda: isinstance(app.screen, DiffScreen), "the diff")
            shown = "\n".join(app.screen.query_one("#diff", Log).lines)
            assert "+from the run" in shown and "notes.txt" in shown
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, DiffScreen), "the diff to close")
            await pilot.press("m")  # the first press asks again; nothing merged yet
            await until(pilot, lambda: "press m again" in app.status_text, "the question")
            assert not (repo / "notes.txt").exists() and app.rows[run_id]["worktree_state"] == "open"
            await pilot.press("m")
            await until(pilot, lambda: app.rows[run_id]["worktree_state"] == "merged", "the merge")
            assert app.status_text.startswith(f"run {run_id[:12]} (seamline/{run_id[:8]}) merged into main")
            await pilot.press("x", "x")  # a merged run is not discarded
            await until(pilot, lambda: "was merged" in app.status_text, "the refusal")

    try:
        asyncio.run(drive())
    finally:
        store.close()
    assert (repo / "notes.txt").read_text() == "from the run\n"
    assert git(repo, "log", "-1", "--format=%s").startswith(f"seamline: merge run {run_id[:12]}")
    assert git(repo, "status", "--porcelain") == ""


def test_over_url_the_pilot_shows_the_diff_and_discards_a_worktree_run(git_env: None, tmp_path: Path) -> None:
    with serve(tmp_path) as served:
        served_repo = make_repo(served.workspace / "repo")
        run_id = worktree_run(served_repo, tmp_path / "store.db", "draft.txt", "draft\n")
        branch = f"seamline/{run_id[:8]}"

        async def drive() -> None:
            app = FleetApp(ServerSource(served.base), interval=0.2)
            async with app.run_test(size=SIZE) as pilot:
                await select(pilot, app, run_id)
                await pilot.press("v")
                await until(pilot, lambda: isinstance(app.screen, DiffScreen), "the diff")
                assert "+draft" in "\n".join(app.screen.query_one("#diff", Log).lines)
                await pilot.press("escape")
                await until(pilot, lambda: not isinstance(app.screen, DiffScreen), "the diff to close")
                await pilot.press("x")
                await until(pilot, lambda: "press x again" in app.status_text, "the question")
                assert branch in git(served_repo, "branch", "--list")
                await pilot.press("x")
                await until(pilot, lambda: app.rows[run_id]["worktree_state"] == "discarded", "the discard")
                assert app.status_text == f"run {run_id[:12]} discarded: worktree and branch {branch} removed"

        asyncio.run(drive())
        assert branch not in git(served_repo, "branch", "--list")
        assert not (served_repo / "draft.txt").exists()


def test_ctrl_c_quits_as_the_help_says(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store.db")
    app = FleetApp(StoreSource(store, location=str(tmp_path / "store.db"), interval=0.2), interval=0.2)
    exits: list[str] = []  # when each exit was asked for: by a key, or by the pilot's end
    asked = app.exit

    def exit_noted(*args: Any, **kwargs: Any) -> None:
        exits.append(stage)
        asked(*args, **kwargs)

    app.exit = exit_noted  # type: ignore[method-assign]
    stage = "key"

    async def drive() -> None:
        nonlocal stage
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: "no runs yet" in app.status_text, "the empty table")
            await pilot.press("ctrl+c")
            await pilot.pause()
            stage = "pilot"

    try:
        asyncio.run(drive())
    finally:
        store.close()
    assert exits[:1] == ["key"], f"ctrl+c did not quit the view: {exits}"
    assert app.return_code == 0
