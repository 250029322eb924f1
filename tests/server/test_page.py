"""The web page in a real browser: Debian's Chromium, headless, driven by Playwright.
It opens the page, starts a run, approves the permission request, and sees the answer
and the file change; a screenshot is saved under the test's temp dir."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("ag_ui")
pytest.importorskip("uvicorn")
sync_api = pytest.importorskip("playwright.sync_api")

from seamline.server.agents_file import AgentSpec  # noqa: E402
from tests.server.harness import TOOL_TURN, serve  # noqa: E402

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


def test_page_runs_a_turn_and_approves_a_permission(tmp_path: Path) -> None:
    expect = sync_api.expect
    script = tmp_path / "page.json"
    script.write_text(json.dumps(TOOL_TURN))
    agents = {"page": AgentSpec(name="page", provider="scripted", options={"script": str(script)})}
    with serve(tmp_path, agents=agents) as served, sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 800})
            problems: list[str] = []
            page.on("pageerror", lambda exc: problems.append(str(exc)))
            page.goto(served.base + "/")
            expect(page.locator("#server-info")).to_contain_text("API v1")
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
            # Revert undoes the run's edit; fork opens a new session from this one.
            page.click("#revert")
            expect(page.locator(".item.outcome").last).to_contain_text("reverted 1 step(s): hello.txt")
            assert not (served.workspace / "hello.txt").exists()
            page.click("#fork")
            expect(page.locator("#sessions tbody tr")).to_have_count(2)
            expect(page.locator("#session-meta")).to_contain_text("fork of")
            assert problems == []
        finally:
            browser.close()
