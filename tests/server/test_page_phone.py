"""The page's approval view at a phone's width (390 px, touch), in headless Chromium: an
operator logged in with its token starts a run; the Approve and Deny buttons are on
screen, inside the width, big enough to tap and not covered; the page does not scroll
sideways; a tap on Approve answers the request."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ag_ui")
pytest.importorskip("uvicorn")
sync_api = pytest.importorskip("playwright.sync_api")

from seamline.server.users import UserBook, users_path_for  # noqa: E402
from tests.server.harness import TOOL_TURN, serve  # noqa: E402
from tests.server.test_page import ARGS, CHROMIUM, agent  # noqa: E402

pytestmark = [
    pytest.mark.real,
    pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK), reason="chromium missing: bash scripts/system/60-chromium.sh"),
]

expect = sync_api.expect
_WAIT_MS = 60_000
WIDTH = 390


_REACHABLE = """([s, width]) => {
    const e = document.querySelector(s);
    if (!e) return false;
    const r = e.getBoundingClientRect();
    if (r.width === 0 || r.left < 0 || r.right > width) return false;
    const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
    return !!hit && hit.closest(s) !== null;
}"""


def _on_screen(page: Any, selector: str) -> dict[str, float]:
    """The element's box, once it lies inside the viewport's width and is what a tap at its
    centre reaches (nothing covers it). Waited for, not sampled: the page is still laying
    out the run's events as they stream in, and a loaded machine draws late."""
    page.wait_for_function(_REACHABLE, arg=[selector, WIDTH], timeout=_WAIT_MS)
    box: dict[str, float] = page.locator(selector).bounding_box()
    assert box is not None, selector
    return box


def test_approval_view_at_a_phones_width(tmp_path: Path) -> None:
    book = UserBook(users_path_for(tmp_path / "store.db"))
    token = book.add("otto", "operator")
    with (
        serve(tmp_path, agents=agent(tmp_path, "phone", TOOL_TURN), users=book) as served,
        sync_api.sync_playwright() as playwright,
    ):
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            context = browser.new_context(
                viewport={"width": WIDTH, "height": 844}, device_scale_factor=3, is_mobile=True, has_touch=True
            )
            page = context.new_page()
            page.set_default_timeout(_WAIT_MS)
            problems: list[str] = []
            page.on("pageerror", lambda exc: problems.append(str(exc)))
            page.goto(served.base + f"/?token={token}")  # the login sets the cookie and goes to /
            expect(page.locator("#server-info")).to_contain_text("API v1", timeout=_WAIT_MS)
            page.select_option("#provider", "agent:phone")
            page.locator("#create-session").tap()
            expect(page.locator("#session-pane")).to_be_visible(timeout=_WAIT_MS)
            page.fill("#prompt", "write hello.txt")
            page.locator("#start-run").tap()
            approve = page.locator(".permission button.approve")
            expect(approve).to_be_visible(timeout=_WAIT_MS)
            expect(page.locator(".permission button.deny")).to_be_visible(timeout=_WAIT_MS)
            approve.scroll_into_view_if_needed()
            for selector in (".permission button.approve", ".permission button.deny"):
                box = _on_screen(page, selector)
                assert box["height"] >= 40 and box["width"] >= 60, (selector, box)  # a finger's size
            assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH
            page.screenshot(path=str(tmp_path / "phone.png"), full_page=True)
            approve.tap()
            expect(page.locator(".item.outcome")).to_contain_text("completed", timeout=_WAIT_MS)
            expect(page.locator(".permission")).to_contain_text("allow (once)", timeout=_WAIT_MS)
            assert (served.workspace / "hello.txt").read_text() == "hi\n"
            assert problems == []
        finally:
            browser.close()
