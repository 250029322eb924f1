"""The page's fleet view in a real browser (headless Chromium, as in test_page.py): worktree
runs recorded in the store the server serves show with their branch; Diff shows the run's
changes as text; Merge and Discard ask first, then act on real git (checked on disk); a
merge into a dirty main tree shows the server's refusal and changes nothing; a run waiting
on a permission is answered from its fleet row."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("ag_ui")
pytest.importorskip("uvicorn")
pytest.importorskip("playwright.sync_api")

from tests.server.harness import TOOL_TURN, Served, serve
from tests.server.test_page import CHROMIUM, agent, expect, opened
from tests.worktrees.git_repo import git, git_home, make_repo, snapshot, worktree_run

pytestmark = [
    pytest.mark.real,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="chromium missing: bash scripts/system/60-chromium.sh"),
]

# HTML in a file the run wrote: the diff view must show it as text, never as markup.
CONTENT = "hello from the run <b id='injected'>bold</b>\n"


def run_beside(repo: Path, store: Path, path: str, content: str) -> str:
    """A worktree run made while the browser is open (Playwright's loop holds this thread)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(worktree_run, repo, store, path, content).result(timeout=120)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in git_home(tmp_path / "home").items():
        monkeypatch.setenv(key, value)


def test_fleet_diffs_merges_refuses_and_discards_worktree_runs(tmp_path: Path, home: None) -> None:
    with serve(tmp_path) as served:
        repo = make_repo(served.workspace / "repo")
        store = tmp_path / "store.db"
        first = worktree_run(repo, store, "notes.txt", CONTENT)
        with opened(served) as (page, problems):
            row = page.locator(f'#fleet tbody tr[data-id="{first}"]')
            expect(row.locator("td.col-branch")).to_have_text(f"seamline/{first[:8]}")
            expect(row.locator("td.col-worktree")).to_have_text("open")
            expect(row.locator("td.col-provider")).to_have_text("scripted")
            expect(row.locator("td.col-status")).to_have_text("completed")

            # Diff: the file's added line, as text in a <pre>.
            row.locator("button.diff").click()
            shown = page.locator("#fleet-diff-text")
            expect(shown).to_contain_text("notes.txt")
            expect(shown).to_contain_text("+" + CONTENT.strip())
            expect(page.locator("#fleet-diff-title")).to_contain_text(f"seamline/{first[:8]}")
            assert page.locator("#injected").count() == 0
            page.click("#fleet-diff-close")  # a dialog over the page
            expect(shown).to_be_hidden()

            # Merge asks first: cancelled, nothing happens.
            row.locator("button.merge").click()
            dialog = page.locator("#fleet-confirm")
            expect(dialog).to_be_visible()
            expect(dialog).to_contain_text(f"Merge seamline/{first[:8]}")
            page.click("#fleet-confirm-cancel")
            expect(dialog).to_be_hidden()
            assert not (repo / "notes.txt").exists()
            # Confirmed: the main working tree gets the file and the row says merged.
            row.locator("button.merge").click()
            page.click("#fleet-confirm-go")
            expect(page.locator("#fleet-message")).to_contain_text(f"seamline/{first[:8]} merged into main")
            expect(row.locator("td.col-worktree")).to_have_text("merged")
            expect(row.locator("button.merge")).to_be_disabled()
            assert (repo / "notes.txt").read_text() == CONTENT
            assert git(repo, "log", "-1", "--format=%s") != "init"

            # A second run, recorded while the page is open, shows up by itself.
            second = run_beside(repo, store, "other.txt", "B\n")
            other = page.locator(f'#fleet tbody tr[data-id="{second}"]')
            expect(other.locator("td.col-worktree")).to_have_text("open")
            # On a dirty main tree the merge is refused with the server's message; nothing changes.
            (repo / "README").write_text("edited, not committed\n")
            before = snapshot(repo)
            other.locator("button.merge").click()
            page.click("#fleet-confirm-go")
            expect(page.locator("#fleet-message")).to_contain_text("uncommitted changes")
            assert snapshot(repo) == before
            assert not (repo / "other.txt").exists()
            expect(other.locator("td.col-worktree")).to_have_text("open")

            # Discard asks first too, then removes the worktree and branch.
            record = served.store.get(second)
            assert record is not None
            tree = Path(record.run_options["worktree"]["path"])
            assert tree.is_dir()
            other.locator("button.discard").click()
            expect(dialog).to_contain_text(f"Discard seamline/{second[:8]}")
            page.click("#fleet-confirm-cancel")
            assert tree.is_dir()
            other.locator("button.discard").click()
            page.click("#fleet-confirm-go")
            expect(other.locator("td.col-worktree")).to_have_text("discarded")
            expect(page.locator("#fleet-message")).to_contain_text(f"seamline/{second[:8]} discarded")
            assert not tree.exists()
            assert f"seamline/{second[:8]}" not in git(repo, "branch", "--list")
            expect(other.locator("button.diff")).to_be_disabled()
            assert problems == []


def test_fleet_row_answers_a_waiting_permission(tmp_path: Path) -> None:
    with serve(tmp_path, agents=agent(tmp_path, "asks", TOOL_TURN)) as served:
        with served.client() as client:
            made = client.post("/v1/sessions", json={"agent": "asks"})
            assert made.status_code == 201, made.text
            session_id = made.json()["id"]
            run = client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "write hello.txt"})
            assert run.status_code == 201, run.text
        with opened(served) as (page, problems):
            row = page.locator(f'#fleet tbody tr[data-id="{session_id}"]')
            expect(row.locator("td.col-status")).to_have_text("running")
            expect(row.locator("td.col-tool")).to_have_text("write_file")
            expect(row.locator("td.col-branch")).to_have_text("")
            expect(row.locator("td.col-actions button")).to_have_text(["Cancel"])  # no worktree: no diff
            asked = row.locator("td.col-approvals .asked")
            expect(asked).to_contain_text("write_file")
            asked.locator("button.approve").click()
            expect(row.locator("td.col-status")).to_have_text("completed")
            expect(row.locator("td.col-approvals .asked")).to_have_count(0)
            expect(row.locator("td.col-tokens")).to_have_text("220 in / 15 out")
            expect(row.locator("td.col-cost")).to_have_text("$0.0030")
            expect(row.locator("td.col-actions button")).to_have_count(0)  # nothing to cancel now
            assert (served.workspace / "hello.txt").read_text() == "hi\n"
            assert problems == []


def test_fleet_row_cancels_a_live_run(tmp_path: Path) -> None:
    with serve(tmp_path, agents=agent(tmp_path, "asks", TOOL_TURN)) as served:
        with served.client() as client:
            made = client.post("/v1/sessions", json={"agent": "asks"})
            assert made.status_code == 201, made.text
            session_id = made.json()["id"]
            run = client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "write hello.txt"})
            assert run.status_code == 201, run.text
            run_id = run.json()["id"]
        with opened(served) as (page, problems):
            row = page.locator(f'#fleet tbody tr[data-id="{session_id}"]')
            expect(row.locator("td.col-status")).to_have_text("running")  # waiting on its approval
            row.locator("td.col-actions button.cancel").click()
            expect(row.locator("td.col-status")).to_have_text("aborted")
            assert problems == []
        with served.client() as client:
            assert client.get(f"/v1/runs/{run_id}").json()["status"] == "aborted"
        assert not (served.workspace / "hello.txt").exists()


# Whether the element's top edge is inside the window as it is scrolled now.
IN_VIEW = "e => { const r = e.getBoundingClientRect(); return r.height > 0 && r.top >= 0 && r.top < innerHeight; }"


def many_runs(served: Served, count: int) -> list[str]:
    """``count`` finished sessions in the store the server serves (rows of the fleet table)."""
    made = [f"bulk{n:02d}" + "0" * 26 for n in range(count)]
    for session_id in made:
        served.store.create_session(session_id, provider="scripted", model=None)
        served.store.set_status(session_id, "completed")
    return made


def test_fleet_results_and_forms_show_where_the_user_looks(tmp_path: Path, home: None) -> None:
    # Forty runs make the fleet table taller than the window (800 px): what is drawn below
    # it is out of sight.
    with serve(tmp_path) as served:
        bulk = many_runs(served, 40)
        repo = make_repo(served.workspace / "repo")
        newest = worktree_run(repo, tmp_path / "store.db", "notes.txt", CONTENT)
        with opened(served) as (page, problems):
            expect(page.locator("#fleet tbody tr")).to_have_count(41)
            assert page.evaluate("document.documentElement.scrollHeight") > 2 * 800
            # The New session form comes before the fleet table, in the first screen.
            form, table = page.locator("#new-session"), page.locator("#fleet")
            assert form.evaluate(IN_VIEW)
            assert form.bounding_box()["y"] < table.bounding_box()["y"]

            # Diff on the top row: its result is in the window, not below the forty rows.
            row = page.locator(f'#fleet tbody tr[data-id="{newest}"]')
            row.locator("button.diff").click()
            shown = page.locator("#fleet-diff-text")
            expect(shown).to_contain_text("+" + CONTENT.strip())
            assert shown.evaluate(IN_VIEW)
            page.click("#fleet-diff-close")
            expect(shown).to_be_hidden()

            # Merge's outcome too.
            row.locator("button.merge").click()
            page.click("#fleet-confirm-go")
            message = page.locator("#fleet-message")
            expect(message).to_contain_text(f"seamline/{newest[:8]} merged into main")
            assert message.evaluate(IN_VIEW)

            # A run picked in the fleet opens its session in sight.
            middle = page.locator(f'#fleet tbody tr[data-id="{bulk[30]}"] td.col-run')
            middle.click()
            pane = page.locator("#session-pane")
            expect(pane).to_be_visible()
            expect(page.locator("#session-meta")).to_contain_text(bulk[30][:12])
            assert page.locator("#session-title").evaluate(IN_VIEW)

            # So does a session opened with the form.
            page.evaluate("window.scrollTo(0, 0)")
            page.click("#create-session")
            expect(page.locator("#session-meta")).to_contain_text("offline")
            assert page.locator("#session-title").evaluate(IN_VIEW)
            assert problems == []
