"""The evaluations kept beside the server's store, over HTTP and on the page: the list, the
figures (the same as ``seamline eval show --json``), the report page with no script, and a
row on the page whose link opens that report, in headless Chromium."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("uvicorn")

from seamline.cli.main import main
from tests.evals.lab import make_lab, script
from tests.server.harness import serve
from tests.server.test_page import opened


def _evaluation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    (tmp_path / "lab").mkdir()
    lab = make_lab(tmp_path / "lab")
    variants = [
        *("-p", "scripted", "-o", f"script={script(lab / 'good.json', 'ok', 0.006)}"),
        *("-p", "scripted", "-o", f"script={script(lab / 'bad.json', 'no', 0.001)}"),
    ]
    argv = ["eval", str(lab / "tasks.yaml"), *variants, "--store", str(tmp_path / "store.db"), "--yes", "--json"]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_the_api_lists_an_evaluation_and_gives_its_figures_and_its_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _evaluation(tmp_path, capsys)
    with serve(tmp_path) as served, served.client() as client:
        listed = client.get("/v1/evals").json()["evaluations"]
        assert [(e["id"], e["status"], e["trials"], e["planned"]) for e in listed] == [
            (data["id"], "completed", 12, 12)
        ]
        assert listed[0]["variants"] == ["scripted#1", "scripted#2"]
        figures = client.get(f"/v1/evals/{str(data['id'])[:8]}").json()
        assert figures == data
        page = client.get(f"/v1/evals/{data['id']}/page")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "default-src 'none'" in page.headers["content-security-policy"] and "<script" not in page.text
        assert client.get("/v1/evals/abcdef12").status_code == 404
        assert client.get("/v1/evals/xyz").status_code == 400


def test_the_page_lists_the_evaluation_and_its_link_opens_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("playwright.sync_api")
    data = _evaluation(tmp_path, capsys)
    with serve(tmp_path) as served, opened(served) as (page, problems):
        row = page.locator(f'#evals tr[data-eval="{data["id"]}"]')
        row.wait_for()
        assert row.locator("td").nth(1).inner_text() == "completed"
        assert row.locator("td").nth(2).inner_text() == "12/12"
        with page.context.expect_page() as opening:
            row.locator("a").click()
        report = opening.value
        report.wait_for_load_state()
        assert report.locator("#variants tbody tr").count() == 2
        assert report.locator("#variants tbody tr").nth(0).locator("td").first.inner_text() == "scripted#1"
        assert problems == []
