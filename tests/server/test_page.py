"""The web page in a real browser: Debian's Chromium, headless, driven by Playwright.
It opens the page, starts a run, approves the permission request, and sees the answer
and the file change; a screenshot is saved under the test's temp dir. It shows the
history of a session it did not start, opens sessions in a chosen workspace, asks
before reverting (naming what a revert cannot undo), and titles sessions."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ag_ui")
pytest.importorskip("uvicorn")
sync_api = pytest.importorskip("playwright.sync_api")

from seamline.server.agents_file import AgentSpec  # noqa: E402
from tests.server.harness import TOOL_TURN, Served, serve  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = [
    pytest.mark.real,
    pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK), reason="chromium missing: bash scripts/system/60-chromium.sh"),
]

expect = sync_api.expect
# Every wait on the page is for a condition, bounded generously: Playwright's own bound for
# `expect` (5 s) is a wall-clock assertion that a loaded machine fails (Chromium, the server
# and the run share two cores with a second test worker).
_WAIT_MS = 60_000
expect.set_options(timeout=_WAIT_MS)


@contextmanager
def opened(served: Served) -> Iterator[tuple[Any, list[str]]]:
    """The page in headless Chromium, and the script errors it raised (none expected)."""
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 800})
            page.set_default_timeout(_WAIT_MS)
            problems: list[str] = []
            page.on("pageerror", lambda exc: problems.append(str(exc)))
            page.goto(served.base + "/")
            expect(page.locator("#server-info")).to_contain_text("API v1")
            yield page, problems
        finally:
            browser.close()


def agent(tmp_path: Path, name: str, responses: list[dict[str, Any]], *, yes: bool = False) -> dict[str, AgentSpec]:
    """An operator's agent on the scripted provider (only a declared agent may run with yes)."""
    script = tmp_path / f"{name}.json"
    script.write_text(json.dumps(responses))
    return {name: AgentSpec(name=name, provider="scripted", options={"script": str(script)}, yes=yes)}


def run_over_api(served: Served, prompt: str, session: dict[str, Any]) -> str:
    """A session opened and run to its end over the API alone (the page plays no part)."""
    with served.client() as client:
        reply = client.post("/v1/sessions", json=session)
        assert reply.status_code == 201, reply.text
        session_id: str = reply.json()["id"]
        run = client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": prompt})
        assert run.status_code == 201, run.text
        # The NDJSON stream ends with the run.
        lines = client.get(f"/v1/runs/{run.json()['id']}/events", params={"format": "seamline", "stream": "ndjson"})
        assert json.loads(lines.text.splitlines()[-1])["event"]["type"] == "complete"
    return session_id


def test_page_runs_a_turn_and_approves_a_permission(tmp_path: Path) -> None:
    with serve(tmp_path, agents=agent(tmp_path, "page", TOOL_TURN)) as served, opened(served) as (page, problems):
        page.select_option("#provider", "agent:page")  # the operator's agent, by name
        page.click("#create-session")
        expect(page.locator("#session-pane")).to_be_visible()
        page.fill("#prompt", "write hello.txt")
        page.click("#start-run")
        approve = page.locator(".permission button.approve")
        expect(approve).to_be_visible()
        expect(page.locator(".permission")).to_contain_text("write_file")
        approve.click()
        expect(page.locator(".item.outcome")).to_contain_text("completed")
        expect(page.locator("#run-status")).to_have_text("run completed · 220 in / 15 out · $0.0030")
        expect(page.locator(".item.text")).to_have_text(["Let me write it.", "Wrote hello.txt."])
        change = page.locator(".item.file")
        expect(change).to_contain_text("created hello.txt")
        expect(change.locator(".diff-add")).to_have_text(["+ hi"])
        expect(page.locator(".permission")).to_contain_text("allow (once)")
        expect(page.locator("#sessions tbody tr")).to_have_count(1)
        expect(page.locator("#sessions tbody tr td").nth(2)).to_have_text("completed")
        expect(page.locator("#session-meta")).to_contain_text("completed · $0.0030")
        assert served.store.list_sessions()[0].metadata["agent"] == "page"
        shot = tmp_path / "page.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 1000
        assert (served.workspace / "hello.txt").read_text() == "hi\n"
        # Revert (once confirmed) undoes the run's edit; fork opens a new session from this one.
        page.click("#revert")
        page.click("#revert-confirm")
        expect(page.locator(".item.outcome").last).to_contain_text("reverted 1 step(s): hello.txt")
        assert not (served.workspace / "hello.txt").exists()
        page.click("#fork")
        expect(page.locator("#sessions tbody tr")).to_have_count(2)
        expect(page.locator("#session-meta")).to_contain_text("fork of")
        assert problems == []


def test_page_shows_the_history_of_a_session_it_did_not_start(tmp_path: Path) -> None:
    # The session is run over the API by one server; a later server (nothing live) serves the page.
    with serve(tmp_path, agents=agent(tmp_path, "api", TOOL_TURN, yes=True)) as first:
        session_id = run_over_api(first, "write hello.txt", {"agent": "api", "yes": True})
    with serve(tmp_path) as served, opened(served) as (page, problems):
        row = page.locator(f'#sessions tbody tr[data-id="{session_id}"]')
        expect(row).to_have_count(1)
        row.click()
        view = page.locator("#run-view")
        expect(view.locator(".item.prompt")).to_have_text(["write hello.txt"])
        expect(view.locator(".item.text")).to_have_text(["Let me write it.", "Wrote hello.txt."])
        expect(view.locator(".item.tool").first).to_contain_text('→ write_file {"path":"hello.txt"')
        expect(view.locator(".item.tool").nth(1)).to_contain_text("← ")
        change = view.locator(".item.file")
        expect(change).to_contain_text("created hello.txt")
        expect(change.locator(".diff-add")).to_have_text(["+ hi"])
        expect(page.locator("#run-status")).to_have_text("history · 1 turn")
        assert problems == []


def test_page_opens_a_session_in_the_workspace_given(tmp_path: Path) -> None:
    with (
        serve(tmp_path, agents=agent(tmp_path, "ws", TOOL_TURN, yes=True)) as served,
        opened(served) as (page, problems),
    ):
        sub = served.workspace / "sub"
        sub.mkdir()
        page.select_option("#provider", "agent:ws")
        page.check("#yes")
        page.fill("#workspace", str(sub))
        page.click("#create-session")
        expect(page.locator("#session-meta")).to_contain_text(str(sub))
        page.fill("#prompt", "write hello.txt")
        page.click("#start-run")
        expect(page.locator(".item.outcome")).to_contain_text("completed")
        assert (sub / "hello.txt").read_text() == "hi\n"
        assert not (served.workspace / "hello.txt").exists()
        # Folders the server refuses (missing; outside --workspace): the page shows the server's one-line message.
        for refused_folder, status in ((served.workspace / "missing", 400), (tmp_path, 403)):
            with served.client() as client:
                refused = client.post("/v1/sessions", json={"agent": "ws", "workspace": str(refused_folder)})
            assert refused.status_code == status, refused.text
            message = refused.json()["error"]["message"]
            page.fill("#workspace", str(refused_folder))
            page.click("#create-session")
            expect(page.locator("#notice")).to_have_text(message)
        expect(page.locator("#sessions tbody tr")).to_have_count(1)
        assert problems == []


SHELL_TURN = [
    {
        "text": "Writing, then a shell command.",
        "tool_calls": [
            {"id": "call-w", "name": "write_file", "arguments": {"path": "hello.txt", "content": "hi\n"}},
            {"id": "call-s", "name": "shell", "arguments": {"command": "echo made > made.txt"}},
        ],
    },
    {"text": "Done."},
]


def test_page_asks_before_reverting_and_says_what_shell_commands_leave(tmp_path: Path) -> None:
    with (
        serve(tmp_path, agents=agent(tmp_path, "shell", SHELL_TURN, yes=True)) as served,
        opened(served) as (page, problems),
    ):
        page.select_option("#provider", "agent:shell")
        page.check("#yes")
        page.click("#create-session")
        page.fill("#prompt", "write and run")
        page.click("#start-run")
        expect(page.locator(".item.outcome")).to_contain_text("completed")
        hello, made = served.workspace / "hello.txt", served.workspace / "made.txt"
        assert hello.exists() and made.exists()
        dialog = page.locator("#revert-dialog")
        page.click("#revert")
        expect(dialog).to_be_visible()
        expect(dialog.locator("#revert-files")).to_contain_text("hello.txt")
        expect(dialog.locator("#revert-shell")).to_contain_text("not undone")
        expect(dialog.locator("#revert-shell")).to_contain_text("echo made > made.txt")
        # Kept: nothing changes.
        page.click("#revert-cancel")
        expect(dialog).to_be_hidden()
        assert hello.exists()
        expect(page.locator(".item.outcome")).to_have_count(1)
        # Confirmed: the journaled edit is undone, the shell command's file stays, and the page says so.
        page.click("#revert")
        page.click("#revert-confirm")
        expect(dialog).to_be_hidden()
        outcome = page.locator(".item.outcome").last
        expect(outcome).to_contain_text("reverted 1 step(s): hello.txt")
        expect(outcome).to_contain_text("not undone: what 1 shell command(s) did")
        assert not hello.exists()
        assert made.read_text() == "made\n"
        assert problems == []


def test_page_titles_sessions(tmp_path: Path) -> None:
    with serve(tmp_path) as served:
        scripted = {"provider": "scripted", "options": {"script": served.script("api", [{"text": "Ok."}])}}
        tidy = run_over_api(served, "Tidy the tests, please\nand then the docs", scripted)
        second = run_over_api(served, "Second thing", scripted)
        with served.client() as client:
            fresh = client.post("/v1/sessions", json=scripted).json()["id"]
        with opened(served) as (page, problems):
            expect(page.locator("#sessions tbody tr")).to_have_count(3)
            # Every row with a first prompt is titled by it, selected or not.
            for session_id, title in ((tidy, "Tidy the tests, please"), (second, "Second thing")):
                expect(page.locator(f'#sessions tbody tr[data-id="{session_id}"] .title')).to_have_text(title)
            # A session with no prompt yet names its provider, created time and id.
            untitled = page.locator(f'#sessions tbody tr[data-id="{fresh}"] td').first
            expect(untitled).to_contain_text("scripted · ")
            expect(untitled).to_contain_text(fresh[:12])
            # The selected session's head carries its title.
            page.locator(f'#sessions tbody tr[data-id="{tidy}"]').click()
            expect(page.locator("#session-title")).to_have_text("Tidy the tests, please")
            assert problems == []
