"""``--html FILE`` is one self-contained page: opened in headless Chromium with every request
refused, it shows each variant's row, and the chart places each variant whose cost per pass
is known."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from seamline.cli.main import main
from seamline.evals.html import render
from tests.evals.lab import script

sync_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]

pytestmark = [
    pytest.mark.real,
    pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK), reason="chromium missing: bash scripts/system/60-chromium.sh"),
]
_WAIT_MS = 60_000


def test_the_page_shows_every_variant_and_asks_for_nothing(lab: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page_file = lab / "report.html"
    variants = [
        *("-p", "scripted", "-o", f"script={script(lab / 'good.json', 'ok', 0.006)}"),
        *("-p", "scripted", "-o", f"script={script(lab / 'flaky.json', 'flaky', 0.002)}"),
        *("-p", "scripted", "-o", f"script={script(lab / 'bad.json', 'no', 0.001)}"),
    ]
    store = lab / "store" / "s.db"
    argv = [
        "eval",
        str(lab / "tasks.yaml"),
        *variants,
        "--store",
        str(store),
        "--yes",
        "--json",
        "--html",
        str(page_file),
    ]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    asked: list[str] = []
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.set_default_timeout(_WAIT_MS)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))

            def refuse(route: object) -> None:
                request = route.request  # type: ignore[attr-defined]
                if request.url.startswith("file://"):
                    route.continue_()  # type: ignore[attr-defined]
                else:
                    asked.append(request.url)
                    route.abort()  # type: ignore[attr-defined]

            page.route("**/*", refuse)
            page.goto(page_file.as_uri())
            rows = page.locator("#variants tbody tr")
            sync_api.expect(rows).to_have_count(3, timeout=_WAIT_MS)
            labels = [rows.nth(n).locator("td").first.inner_text() for n in range(3)]
            assert labels == ["scripted#1", "scripted#2", "scripted#3"]
            assert rows.nth(0).locator("td").nth(2).inner_text() == "6"  # every "ok" passed
            # good and flaky have a cost per pass and are on the chart; bad passed nothing.
            points = page.locator("#chart circle.point")
            assert sorted(points.nth(n).get_attribute("data-variant") or "" for n in range(points.count())) == [
                "scripted#1",
                "scripted#2",
            ]
            assert "scripted#3" in page.locator("#unplaced").inner_text()
            assert page.locator("#chart").bounding_box() is not None
            assert page.locator("#tasks tbody tr").count() == len(data["tasks"]) == 18
            assert errors == []
        finally:
            browser.close()
    assert asked == []


def test_what_a_variant_is_called_is_text_on_the_page_never_markup() -> None:
    hostile = '<img src=x onerror="alert(1)">'
    data = {
        "id": "e" * 32,
        "dataset": "<script>alert(2)</script>.yaml",
        "status": "completed",
        "samples": 1,
        "trials": {"planned": 1, "finished": 1},
        "variants": [
            {
                "variant": hostile,
                "trials": 1,
                "passes": 1,
                "pass_rate": 1.0,
                "interval": [0.2, 1.0],
                "pass@1": 1.0,
                "pass^1": 1.0,
                "cost_usd": 0.01,
                "cost_per_pass": 0.01,
                "input_tokens": 1,
                "output_tokens": 1,
                "mean_elapsed_s": 1.0,
                "mean_diff_lines": 2.0,
            }
        ],
        "tasks": [],
        "comparisons": [],
        "test": "exact McNemar",
    }
    page = render(data)
    assert "<img" not in page and "<script>" not in page
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page
