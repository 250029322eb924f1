"""`seamline run --worktree`, `diff`, `merge`, `discard` and `sessions list`, as a user
runs them, on real git in a temporary repository with the scripted provider."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.worktrees.git_repo import environ_with, git, git_home, make_repo, snapshot


@pytest.fixture
def world(tmp_path: Path, cli_env: dict[str, str]) -> dict[str, Any]:
    env = environ_with({**cli_env, **git_home(tmp_path / "home")})
    return {"env": env, "repo": make_repo(tmp_path / "repo", env), "store": tmp_path / "store.db", "tmp": tmp_path}


def _script(world: dict[str, Any], name: str, path: str, content: str, *, delay: float = 0.0) -> Path:
    script = world["tmp"] / f"{name}.json"
    call = {"name": "write_file", "arguments": {"path": path, "content": content}}
    script.write_text(json.dumps([{"delay": delay, "tool_calls": [call]}, {"text": f"wrote {path}"}]))
    return script


def _seamline(cmd: list[str], world: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*cmd, *args], env=world["env"], capture_output=True, text=True, timeout=120, cwd=world["tmp"]
    )


def _run_args(world: dict[str, Any], script: Path, *extra: str) -> list[str]:
    return ["run", "--json", "--worktree", "--store", str(world["store"]), "-w", str(world["repo"]),
            "-p", "scripted", "-o", f"script={script}", "--yes", *extra, "go"]  # fmt: skip


def _run(cmd: list[str], world: dict[str, Any], script: Path, *extra: str) -> str:
    done = _seamline(cmd, world, *_run_args(world, script, *extra))
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout.splitlines()[0])["session_id"])


def _listed(cmd: list[str], world: dict[str, Any]) -> dict[str, tuple[str, str]]:
    done = _seamline(cmd, world, "sessions", "list", "--json", "--store", str(world["store"]))
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    return {row["id"]: (row["branch"], row["worktree_state"]) for row in rows}


def test_two_runs_at_once_then_merge_one_and_discard_the_other(seamline_cmd: list[str], world: dict[str, Any]) -> None:
    repo = world["repo"]
    before = snapshot(repo)
    runs = [
        subprocess.Popen(
            [*seamline_cmd, *_run_args(world, _script(world, name, f"{name}.txt", f"{name}\n", delay=0.3))],
            env=world["env"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=world["tmp"],
        )
        for name in ("left", "right")
    ]
    outputs = [proc.communicate(timeout=120) for proc in runs]
    assert [proc.returncode for proc in runs] == [0, 0], [err for _, err in outputs]
    left, right = (str(json.loads(out.splitlines()[0])["session_id"]) for out, _ in outputs)
    # Each run worked in its own worktree on its own branch; the main working tree is untouched.
    assert snapshot(repo)[:2] == before[:2] and not (repo / "left.txt").exists()
    assert git(repo, "log", "--format=%s", f"seamline/{left[:8]}").splitlines() == [
        f"seamline run {left} turn 1",
        "init",
    ]
    assert git(repo, "show", f"seamline/{right[:8]}:right.txt") == "right"
    assert _listed(seamline_cmd, world) == {
        left: (f"seamline/{left[:8]}", "open"),
        right: (f"seamline/{right[:8]}", "open"),
    }
    text_list = _seamline(seamline_cmd, world, "sessions", "list", "--store", str(world["store"])).stdout
    assert f"seamline/{left[:8]} (open)" in text_list

    stat = _seamline(seamline_cmd, world, "diff", left[:8], "--stat", "--store", str(world["store"]))
    assert stat.returncode == 0 and "left.txt | 1 +" in stat.stdout
    merged = _seamline(seamline_cmd, world, "merge", left[:8], "--store", str(world["store"]))
    assert merged.returncode == 0, merged.stderr
    assert "merged into main" in merged.stdout
    discarded = _seamline(seamline_cmd, world, "discard", right[:8], "--store", str(world["store"]))
    assert discarded.returncode == 0, discarded.stderr

    assert (repo / "left.txt").read_text() == "left\n" and not (repo / "right.txt").exists()
    assert git(repo, "log", "--topo-order", "--format=%s", "main").splitlines() == [
        f"seamline: merge run {left[:12]} (seamline/{left[:8]})",
        f"seamline run {left} turn 1",
        "init",
    ]
    assert git(repo, "worktree", "list", "--porcelain").splitlines()[0] == f"worktree {repo.resolve()}"
    assert len(git(repo, "worktree", "list", "--porcelain").split("\n\n")) == 1
    assert snapshot(repo)[2] == ["main", f"seamline/{left[:8]}"]  # the merged run's branch stays
    assert git(repo, "status", "--porcelain") == ""
    assert _listed(seamline_cmd, world) == {
        left: (f"seamline/{left[:8]}", "merged"),
        right: (f"seamline/{right[:8]}", "discarded"),
    }


def test_a_merge_into_a_dirty_tree_is_refused_and_changes_nothing(
    seamline_cmd: list[str], world: dict[str, Any]
) -> None:
    run_id = _run(seamline_cmd, world, _script(world, "s", "new.txt", "new\n"))
    (world["repo"] / "README").write_text("edited, not committed\n")
    before = snapshot(world["repo"])
    done = _seamline(seamline_cmd, world, "merge", run_id, "--store", str(world["store"]))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "uncommitted changes" in done.stderr and "Traceback" not in done.stderr
    assert snapshot(world["repo"]) == before and not (world["repo"] / "new.txt").exists()


@pytest.mark.parametrize("squash", [False, True])
def test_a_conflicting_merge_is_refused_and_changes_nothing(
    seamline_cmd: list[str], world: dict[str, Any], squash: bool
) -> None:
    repo = world["repo"]
    run_id = _run(seamline_cmd, world, _script(world, "s", "README", "the run's README\n"))
    (repo / "README").write_text("the main tree's README\n")
    git(repo, "commit", "--quiet", "-am", "meanwhile", env=world["env"])
    before = snapshot(repo)
    done = _seamline(
        seamline_cmd, world, "merge", run_id, *(["--squash"] if squash else []), "--store", str(world["store"])
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "conflicts with main in README" in done.stderr
    assert snapshot(repo) == before and (repo / "README").read_text() == "the main tree's README\n"
    assert not (repo / ".git" / "MERGE_HEAD").exists()
    assert _listed(seamline_cmd, world)[run_id][1] == "open"


def test_a_workspace_that_is_not_a_repository_is_a_usage_error(seamline_cmd: list[str], world: dict[str, Any]) -> None:
    plain = world["tmp"] / "plain"
    plain.mkdir()
    args = _run_args(world, _script(world, "s", "x.txt", "x"))
    args[args.index("-w") + 1] = str(plain)
    done = _seamline(seamline_cmd, world, *args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (
        f"seamline: invalid_request error: --worktree needs a git repository, and {plain.resolve()} is not in one "
        "(run `git init` and commit, or give another --workspace)"
    )
    assert _listed(seamline_cmd, world) == {} and not (world["tmp"] / "worktrees").exists()


@pytest.mark.parametrize(
    "flags",
    [["--worktree", "--no-store"], ["--worktree", "--session", "abcd"], ["--branch", "x"],
     ["--worktree", "--pipeline", "single"]],
)  # fmt: skip
def test_flags_that_do_not_go_with_a_worktree_are_usage_errors(
    seamline_cmd: list[str], world: dict[str, Any], flags: list[str]
) -> None:
    done = _seamline(seamline_cmd, world, "run", *flags, "-w", str(world["repo"]), "go")
    assert done.returncode == 2 and done.stderr.startswith("seamline: --") and done.stderr.count("\n") == 1


def test_a_resumed_run_commits_its_turns_and_rm_waits_for_merge_or_discard(
    seamline_cmd: list[str], world: dict[str, Any]
) -> None:
    store = str(world["store"])
    run_id = _run(seamline_cmd, world, _script(world, "first", "a.txt", "a\n"), "--branch", "work/notes")
    second = _script(world, "second", "b.txt", "b\n")
    done = _seamline(seamline_cmd, world, "sessions", "resume", run_id, "more", "--yes", "-o", f"script={second}",
                     "--store", store)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert git(world["repo"], "log", "--format=%s", "work/notes").splitlines()[:2] == [
        f"seamline run {run_id} turn 2",
        f"seamline run {run_id} turn 1",
    ]
    refused = _seamline(seamline_cmd, world, "sessions", "rm", run_id, "--store", store)
    assert refused.returncode == 2 and "open worktree" in refused.stderr
    assert _seamline(seamline_cmd, world, "discard", run_id, "--store", store).returncode == 0
    again = _seamline(seamline_cmd, world, "sessions", "resume", run_id, "more", "--store", store)
    assert again.returncode == 2 and "was discarded" in again.stderr
    assert _seamline(seamline_cmd, world, "sessions", "rm", run_id, "--store", store).returncode == 0


@pytest.mark.real
def test_the_sandboxs_workspace_is_the_worktree(seamline_cmd: list[str], world: dict[str, Any]) -> None:
    script = world["tmp"] / "boxed.json"
    call = {"name": "shell", "arguments": {"command": "pwd > where.txt && echo boxed > boxed.txt"}}
    script.write_text(json.dumps([{"tool_calls": [call]}, {"text": "ok"}]))
    args = _run_args(world, script)
    args[args.index("--yes")] = "--sandbox=bwrap"
    done = _seamline(seamline_cmd, world, *args)
    assert done.returncode == 0, done.stderr
    run_id = str(json.loads(done.stdout.splitlines()[0])["session_id"])
    branch = f"seamline/{run_id[:8]}"
    assert git(world["repo"], "show", f"{branch}:boxed.txt") == "boxed"
    assert git(world["repo"], "show", f"{branch}:where.txt") == "/workspace"  # bubblewrap's view of the worktree
    assert snapshot(world["repo"])[1] == "" and not (world["repo"] / "boxed.txt").exists()


def _kept_and_dropped(cmd: list[str], world: dict[str, Any], *, shown_before: list[str]) -> tuple[str, str, Path]:
    """Two worktree runs: ``kept`` merged, ``dropped`` discarded; ``sessions show`` of the
    first, before, goes to ``shown_before``. Their ids and the first one's removed worktree."""
    store = str(world["store"])
    kept, dropped = (_run(cmd, world, _script(world, n, f"{n}.txt", f"{n}\n")) for n in ("kept", "dropped"))
    shown_before.append(_seamline(cmd, world, "sessions", "show", kept, "--store", store).stdout)
    assert _seamline(cmd, world, "merge", kept, "--store", store).returncode == 0
    assert _seamline(cmd, world, "discard", dropped, "--store", store).returncode == 0
    path = world["tmp"].resolve() / "worktrees" / kept  # beside the store
    assert not path.exists()
    return kept, dropped, path


def test_sessions_show_names_a_worktree_runs_branch_state_and_worktree(
    seamline_cmd: list[str], world: dict[str, Any]
) -> None:
    before: list[str] = []
    kept, dropped, path = _kept_and_dropped(seamline_cmd, world, shown_before=before)
    assert f"worktree  seamline/{kept[:8]} (open) at {path}\n" in before[0], before[0]
    store, merge_commit = str(world["store"]), git(world["repo"], "rev-parse", "HEAD")
    shown = _seamline(seamline_cmd, world, "sessions", "show", kept, "--store", store).stdout
    assert f"worktree  seamline/{kept[:8]} (merged into main as {merge_commit[:12]}; worktree removed)\n" in shown
    shown = _seamline(seamline_cmd, world, "sessions", "show", dropped, "--store", store).stdout
    assert f"worktree  seamline/{dropped[:8]} (discarded; worktree and branch removed)\n" in shown, shown


def test_a_merged_or_discarded_run_shows_the_main_repository_as_its_workspace(
    seamline_cmd: list[str], world: dict[str, Any]
) -> None:
    before: list[str] = []
    kept, dropped, path = _kept_and_dropped(seamline_cmd, world, shown_before=before)
    store, repo = str(world["store"]), world["repo"].resolve()
    assert f"workspace {path}\n" in before[0]  # while it is there, the run's worktree
    for run_id in (kept, dropped):
        shown = _seamline(seamline_cmd, world, "sessions", "show", run_id, "--store", store).stdout
        assert f"workspace {repo}\n" in shown and str(world["tmp"].resolve() / "worktrees") not in shown, shown
    listed = _seamline(seamline_cmd, world, "sessions", "list", "--store", store).stdout.splitlines()
    assert len(listed) == 2 and all(line.endswith(f"· {repo}") for line in listed), listed
    rows = [json.loads(line) for line in _seamline(seamline_cmd, world, "sessions", "list", "--json",
                                                   "--store", store).stdout.splitlines()]  # fmt: skip
    assert [row["workspace"] for row in rows] == [str(repo), str(repo)]
    watched = _seamline(seamline_cmd, world, "watch", "--snapshot", "--json", "--store", store).stdout
    assert [json.loads(line)["workspace"] for line in watched.splitlines()] == [str(repo), str(repo)]
