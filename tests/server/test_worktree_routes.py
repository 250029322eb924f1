"""The worktree routes over HTTP: a worktree run's diff, its merge into the branch it
started from (plain and squashed), its discard, and the refusals (a dirty main tree, a
conflict, a session without a worktree, a repository outside the served folder) that are
409/404/403 and change nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("starlette")

from tests.server.harness import Served, serve
from tests.worktrees.git_repo import git, git_home, make_repo, snapshot, worktree_run


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in git_home(tmp_path / "home").items():
        monkeypatch.setenv(key, value)


def _served_repo(served: Served) -> Path:
    return make_repo(served.workspace / "repo")


def test_diff_then_merge_brings_the_runs_file_into_the_main_tree(tmp_path: Path, home: None) -> None:
    with serve(tmp_path) as served, served.client() as client:
        repo = _served_repo(served)
        run_id = worktree_run(repo, tmp_path / "store.db", "notes.txt", "hello\n")
        shown = client.get(f"/v1/sessions/{run_id[:8]}/diff")
        assert shown.status_code == 200, shown.text
        body = shown.json()
        assert body["session_id"] == run_id and body["branch"] == f"seamline/{run_id[:8]}" and body["state"] == "open"
        assert "+hello" in body["diff"] and "notes.txt" in body["diff"]
        stat = client.get(f"/v1/sessions/{run_id}/diff", params={"stat": "true"}).json()["diff"]
        assert "notes.txt | 1 +" in stat and "+hello" not in stat
        assert not (repo / "notes.txt").exists()
        merged = client.post(f"/v1/sessions/{run_id}/merge", json={})
        assert merged.status_code == 200, merged.text
        done = merged.json()
        assert (done["into"], done["commits"], done["squashed"]) == ("main", 1, False)
        assert (repo / "notes.txt").read_text() == "hello\n"
        assert git(repo, "rev-parse", "HEAD") == done["commit"]
        again = client.post(f"/v1/sessions/{run_id}/merge", json={})
        assert again.status_code == 409 and again.json()["error"]["kind"] == "refused"
        assert "merged already" in again.json()["error"]["message"]
        row = client.get(f"/v1/sessions/{run_id}").json()
        assert row["run_options"]["worktree"]["state"] == "merged"


def test_squash_merge_makes_one_commit(tmp_path: Path, home: None) -> None:
    with serve(tmp_path) as served, served.client() as client:
        repo = _served_repo(served)
        run_id = worktree_run(repo, tmp_path / "store.db", "a.txt", "A")
        done = client.post(f"/v1/sessions/{run_id}/merge", json={"squash": True})
        assert done.status_code == 200, done.text
        assert done.json()["squashed"] is True
        assert git(repo, "rev-list", "--count", "HEAD") == "2"  # init and the squashed commit
        assert (repo / "a.txt").read_text() == "A"


def test_a_dirty_main_tree_and_a_conflict_are_409_and_change_nothing(tmp_path: Path, home: None) -> None:
    with serve(tmp_path) as served, served.client() as client:
        repo = _served_repo(served)
        run_id = worktree_run(repo, tmp_path / "store.db", "README", "the run's own\n")
        (repo / "README").write_text("edited, not committed\n")
        before = snapshot(repo)
        dirty = client.post(f"/v1/sessions/{run_id}/merge", json={})
        assert dirty.status_code == 409, dirty.text
        assert "uncommitted changes" in dirty.json()["error"]["message"]
        assert snapshot(repo) == before
        git(repo, "commit", "--quiet", "-am", "a change of main's own")
        before = snapshot(repo)
        conflict = client.post(f"/v1/sessions/{run_id}/merge", json={"squash": True})
        assert conflict.status_code == 409, conflict.text
        assert "conflicts with main in README" in conflict.json()["error"]["message"]
        assert snapshot(repo) == before
        row = client.get(f"/v1/sessions/{run_id}").json()
        assert row["run_options"]["worktree"]["state"] == "open"


def test_discard_removes_the_worktree_and_branch(tmp_path: Path, home: None) -> None:
    with serve(tmp_path) as served, served.client() as client:
        repo = _served_repo(served)
        run_id = worktree_run(repo, tmp_path / "store.db", "a.txt", "A")
        tree = Path(client.get(f"/v1/sessions/{run_id}").json()["run_options"]["worktree"]["path"])
        assert tree.is_dir()
        gone = client.post(f"/v1/sessions/{run_id}/discard")
        assert gone.status_code == 200, gone.text
        assert gone.json()["state"] == "discarded" and gone.json()["path"] == str(tree)
        assert not tree.exists()
        assert f"seamline/{run_id[:8]}" not in git(repo, "branch", "--list")
        assert not (repo / "a.txt").exists()
        later = client.get(f"/v1/sessions/{run_id}/diff")
        assert later.status_code == 409 and "was discarded" in later.json()["error"]["message"]
        again = client.post(f"/v1/sessions/{run_id}/discard")
        assert again.status_code == 409


def test_a_session_without_a_worktree_or_unknown_is_404(tmp_path: Path, home: None) -> None:
    with serve(tmp_path) as served, served.client() as client:
        made = client.post("/v1/sessions", json={"provider": "offline"})
        assert made.status_code == 201, made.text
        plain = made.json()["id"]
        for method, route in (("GET", "diff"), ("POST", "merge"), ("POST", "discard")):
            body = {"json": {}} if route == "merge" else {}
            reply = client.request(method, f"/v1/sessions/{plain}/{route}", **body)
            assert reply.status_code == 404 and "has no worktree" in reply.json()["error"]["message"], reply.text
            unknown = client.request(method, f"/v1/sessions/ffffffffffff/{route}", **body)
            assert unknown.status_code == 404, unknown.text


def test_a_repository_outside_the_served_folder_is_403(tmp_path: Path, home: None) -> None:
    with serve(tmp_path) as served, served.client() as client:
        repo = make_repo(tmp_path / "elsewhere")
        run_id = worktree_run(repo, tmp_path / "store.db", "a.txt", "A")
        before = snapshot(repo)
        refused = client.post(f"/v1/sessions/{run_id}/merge", json={})
        assert refused.status_code == 403 and "outside the folders" in refused.json()["error"]["message"]
        assert snapshot(repo) == before


def test_the_routes_need_the_token(tmp_path: Path, home: None) -> None:
    with serve(tmp_path, token="s3cret") as served, served.client() as client:
        repo = _served_repo(served)
        run_id = worktree_run(repo, tmp_path / "store.db", "a.txt", "A")
        before = snapshot(repo)
        assert client.post(f"/v1/sessions/{run_id}/merge", json={}).status_code == 401
        assert client.get(f"/v1/sessions/{run_id}/diff").status_code == 401
        assert snapshot(repo) == before
        ok = client.get(f"/v1/sessions/{run_id}/diff", headers={"authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and "a.txt" in ok.json()["diff"]


def test_the_routes_answer_under_the_run_too(tmp_path: Path, home: None) -> None:
    # /v1/runs/RUN/diff|merge|discard take a worktree run's id as `seamline diff RUN` does.
    with serve(tmp_path) as served, served.client() as client:
        repo = _served_repo(served)
        run_id = worktree_run(repo, tmp_path / "store.db", "b.txt", "bee\n")
        shown = client.get(f"/v1/runs/{run_id[:8]}/diff")
        assert shown.status_code == 200, shown.text
        assert shown.json()["session_id"] == run_id and "+bee" in shown.json()["diff"]
        gone = client.post(f"/v1/runs/{run_id}/discard")
        assert gone.status_code == 200 and gone.json()["state"] == "discarded"
        assert not Path(gone.json()["path"]).exists()
        assert client.get("/v1/runs/0123456789abcdef/diff").status_code == 404
