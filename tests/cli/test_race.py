"""`seamline race` as a user runs it: scripted racers on real git in a temporary
repository, the check command, the ranking, `--merge-best`, the shared budget, and the
race's trace verified by `seamline trace verify`."""

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


def _script(world: dict[str, Any], name: str, path: str, *, cost: float = 0.0, delay: float = 0.0) -> Path:
    """A scripted racer that writes ``path`` (after ``delay`` seconds), spending ``cost``."""
    script = world["tmp"] / f"{name}.json"
    call = {"name": "write_file", "arguments": {"path": path, "content": f"{name}\n"}}
    first: dict[str, Any] = {"tool_calls": [call], "usage": {"input_tokens": 10, "output_tokens": 5, "cost_usd": cost}}
    if delay:
        first["delay"] = delay
    script.write_text(json.dumps([first, {"text": f"wrote {path}"}]))
    return script


def _seamline(cmd: list[str], world: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*cmd, *args], env=world["env"], capture_output=True, text=True, timeout=120, cwd=world["tmp"]
    )


def _race(cmd: list[str], world: dict[str, Any], scripts: list[Path], *extra: str) -> subprocess.CompletedProcess[str]:
    racers = [arg for s in scripts for arg in ("-p", "scripted", "-o", f"script={s}")]
    return _seamline(
        cmd, world, "race", *racers, "--store", str(world["store"]), "-w", str(world["repo"]), "--yes", "--json",
        *extra, "write a file",
    )  # fmt: skip


def _verify(cmd: list[str], world: dict[str, Any], trace: str) -> subprocess.CompletedProcess[str]:
    return _seamline(cmd, world, "trace", "verify", "--file", trace)


def _records(trace: str) -> list[dict[str, Any]]:
    return [json.loads(line)["r"] for line in Path(trace).read_text().splitlines()]


def test_a_three_way_race_picks_a_passing_run_and_merges_it(seamline_cmd: list[str], world: dict[str, Any]) -> None:
    repo = world["repo"]
    # The cheapest run fails the check; of the two that pass, the cheaper one wins.
    scripts = [
        _script(world, "bad", "bad.txt", cost=0.001),
        _script(world, "good", "good.txt", cost=0.003),
        _script(world, "dear", "good.txt", cost=0.009),
    ]
    done = _race(seamline_cmd, world, scripts, "--check", "test -f good.txt", "--merge-best")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    ranking = result["ranking"]
    assert [e["racer"] for e in ranking] == ["r2", "r3", "r1"]
    assert [e["passed"] for e in ranking] == [True, True, False]
    assert ranking[2]["exit_code"] == 1 and ranking[0]["exit_code"] == 0
    assert result["winner"]["racer"] == "r2" and result["winner"]["cost_usd"] == pytest.approx(0.003)
    # The winner is merged into main's working tree; the losers' worktrees stay.
    assert (repo / "good.txt").read_text() == "good\n"
    assert not (repo / "bad.txt").exists()
    assert git(repo, "log", "-1", "--format=%s").startswith(
        "seamline: merge run " + result["winner"]["session_id"][:12]
    )
    losers = [e for e in ranking if e["racer"] != "r2"]
    for loser in losers:
        listed = _seamline(seamline_cmd, world, "diff", loser["session_id"], "--stat", "--store", str(world["store"]))
        assert listed.returncode == 0 and "| 1 +" in listed.stdout
    worktrees = git(repo, "worktree", "list")
    assert all(e["session_id"] in worktrees for e in losers) and result["winner"]["session_id"] not in worktrees
    gone = _seamline(seamline_cmd, world, "discard", losers[0]["session_id"], "--store", str(world["store"]))
    assert gone.returncode == 0, gone.stderr
    # The race's trace verifies, and records the ranking and the winner.
    checked = _verify(seamline_cmd, world, result["trace"])
    assert checked.returncode == 0, checked.stdout + checked.stderr
    records = _records(result["trace"])
    decisions = [r["d"]["decision"]["status"] for r in records if r.get("kind") == "decision"]
    assert decisions == ["converged"]
    ranked = [r["d"]["output"]["data"] for r in records if r.get("kind") == "role_end" and r["d"]["role"] == "ranker"]
    assert ranked[0]["winner"] == "r2" and len(ranked[0]["ranking"]) == 3


def test_a_race_that_no_run_passes_merges_nothing(seamline_cmd: list[str], world: dict[str, Any]) -> None:
    repo = world["repo"]
    scripts = [_script(world, f"bad{n}", f"bad{n}.txt") for n in range(3)]
    before = snapshot(repo)
    done = _race(seamline_cmd, world, scripts, "--check", "test -f good.txt", "--merge-best")
    assert done.returncode == 6, done.stderr
    result = json.loads(done.stdout)
    assert result["winner"] is None and result["merged"] is None
    assert [e["passed"] for e in result["ranking"]] == [False, False, False]
    assert "no run passed the check; nothing merged" in done.stderr
    head, status, branches = snapshot(repo)
    assert (head, status) == before[:2] and len(branches) == 4  # main and the three racers' branches
    assert _verify(seamline_cmd, world, result["trace"]).returncode == 0


def test_the_shared_budget_stops_every_racer(seamline_cmd: list[str], world: dict[str, Any]) -> None:
    repo = world["repo"]
    # r1 spends past the race's budget at once; r2 and r3 are still waiting on their model.
    scripts = [
        _script(world, "spender", "spent.txt", cost=0.5),
        _script(world, "slow1", "slow1.txt", delay=30),
        _script(world, "slow2", "slow2.txt", delay=30),
    ]
    before = snapshot(repo)
    done = _race(seamline_cmd, world, scripts, "--check", "true", "--merge-best", "--budget-usd", "0.1")
    assert done.returncode == 3, done.stderr
    result = json.loads(done.stdout)
    assert result["stop_reason"] == "budget" and result["merged"] is None and result["ranking"] == []
    assert snapshot(repo)[:2] == before[:2]
    records = _records(result["trace"])
    outcomes = {
        r["d"]["role"]: r["d"]["event"]["outcome"]
        for r in records
        if r.get("kind") == "event" and r["d"]["event"].get("type") == "complete"
    }
    assert outcomes == {"r1": "budget", "r2": "aborted", "r3": "aborted"}
    assert [r["kind"] for r in records].count("guard") == 1
    # The slow racers were stopped before they wrote anything.
    for n in (2, 3):
        branch = git(repo, "branch", "--list", "--format=%(refname:short)", "seamline/*").splitlines()
        assert len(branch) == 3
        sid = result["runs"][f"r{n}"]
        assert git(repo, "rev-list", "--count", f"main..seamline/{sid[:8]}") == "0"
    assert _verify(seamline_cmd, world, result["trace"]).returncode == 0


def test_a_race_needs_two_racers(seamline_cmd: list[str], world: dict[str, Any]) -> None:
    done = _race(seamline_cmd, world, [_script(world, "one", "one.txt")])
    assert done.returncode == 2 and "at least two racers" in done.stderr
    assert git(world["repo"], "worktree", "list").count("\n") == 0  # no worktree was made


def test_merge_best_is_refused_as_seamline_merge_refuses(seamline_cmd: list[str], world: dict[str, Any]) -> None:
    repo = world["repo"]
    (repo / "README").write_text("changed, not committed\n")
    before = snapshot(repo)
    scripts = [_script(world, "good", "good.txt"), _script(world, "bad", "bad.txt")]
    done = _race(seamline_cmd, world, scripts, "--check", "test -f good.txt", "--merge-best")
    assert done.returncode == 2
    assert "uncommitted changes" in done.stderr and "nothing was changed" in done.stderr
    result = json.loads(done.stdout)
    assert result["winner"]["racer"] == "r1" and result["merged"] is None
    assert snapshot(repo)[:2] == before[:2] and not (repo / "good.txt").exists()  # the racers' branches aside
    merged = _seamline(seamline_cmd, world, "merge", result["winner"]["session_id"], "--store", str(world["store"]))
    assert merged.returncode == 2  # still refused the same way, and still possible once the tree is clean
    git(repo, "checkout", "--", "README")
    merged = _seamline(seamline_cmd, world, "merge", result["winner"]["session_id"], "--store", str(world["store"]))
    assert merged.returncode == 0, merged.stderr
    assert (repo / "good.txt").read_text() == "good\n"


def test_the_table_names_the_winner(seamline_cmd: list[str], world: dict[str, Any]) -> None:
    scripts = [_script(world, "bad", "bad.txt"), _script(world, "good", "good.txt")]
    racers = [arg for s in scripts for arg in ("-p", "scripted", "-o", f"script={s}")]
    done = _seamline(
        seamline_cmd, world, "race", *racers, "--store", str(world["store"]), "-w", str(world["repo"]), "--yes",
        "--check", "test -f good.txt", "go",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["rank", "racer", "variant", "passed", "review", "cost", "time", "diff", "run"]
    assert lines[1].split()[:4] == ["1*", "r2", "scripted#2", "yes"]
    assert lines[2].split()[:4] == ["2", "r1", "scripted#1", "no"]
    assert "winner r2 (scripted#2); merge it with: seamline merge" in done.stderr


@pytest.mark.real
def test_with_sandbox_the_check_runs_in_each_racers_sandbox(seamline_cmd: list[str], world: dict[str, Any]) -> None:
    from seamline.sandbox import probe

    report = probe("bwrap")
    assert report.ok, "bubblewrap is missing or cannot isolate here (scripts/system/20-bubblewrap.sh)"
    scripts = [_script(world, "one", "one.txt"), _script(world, "two", "two.txt")]
    # In bubblewrap the worktree is /workspace, and the host's home is out of sight.
    check = f"pwd; ls; test ! -e {world['tmp'] / 'home' / '.gitconfig'}"
    done = _race(seamline_cmd, world, scripts, "--sandbox", "bwrap", "--check", check)
    assert done.returncode == 0, done.stderr
    tails = {
        r["d"]["role"]: r["d"]["output"]["data"]["tail"]
        for r in _records(json.loads(done.stdout)["trace"])
        if r.get("kind") == "role_end" and r["d"]["role"].startswith("check-")
    }
    assert tails == {"check-r1": "/workspace\nREADME\none.txt\n", "check-r2": "/workspace\nREADME\ntwo.txt\n"}
    plain = _race(seamline_cmd, world, scripts, "--check", check)
    assert plain.returncode == 6  # unsandboxed, the check sees the host's home: no run passes


def test_usage_mistakes_are_one_line_and_exit_2(seamline_cmd: list[str], world: dict[str, Any]) -> None:
    script = _script(world, "one", "one.txt")
    for args, said in (
        (["go"], "name the racers"),
        (["-p", "scripted", "-o", f"script={script}", "--samples", "0", "go"], "--samples must be at least 1"),
        (["-p", "scripted", "-p", "scripted", "--reviewer-option", "x=y", "go"], "need --reviewer"),
        (["-p", "scripted", "-p", "scripted", "-w", str(world["tmp"]), "go"], "needs a git repository"),
    ):
        done = _seamline(seamline_cmd, world, "race", "--store", str(world["store"]), *args)
        assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert git(world["repo"], "worktree", "list").count("\n") == 0


def test_help_shows_examples(seamline_cmd: list[str], world: dict[str, Any]) -> None:
    done = _seamline(seamline_cmd, world, "race", "--help")
    assert done.returncode == 0
    assert "  seamline race -p claude-code -p codex --check" in done.stdout and "--merge-best" in done.stdout
    assert "exit codes:" in done.stdout and "6 no run passed" in done.stdout


def test_a_reviewer_reads_each_run_and_the_race_verifies_by_its_id(
    seamline_cmd: list[str], world: dict[str, Any]
) -> None:
    reviewer = world["tmp"] / "reviewer.json"
    reviewer.write_text(json.dumps([{"text": "The diff does the task.\nAPPROVE"}]))
    scripts = [_script(world, "good", "good.txt"), _script(world, "bad", "bad.txt")]
    done = _race(
        seamline_cmd, world, scripts, "--check", "test -f good.txt", "--reviewer",
        "--reviewer-provider", "scripted", "--reviewer-option", f"script={reviewer}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [(e["racer"], e["review"]) for e in result["ranking"]] == [("r1", "approve"), ("r2", "approve")]
    phases = [r["d"]["phase"] for r in _records(result["trace"]) if r.get("kind") == "phase_start"]
    assert phases == ["race", "check", "review", "rank"]
    checked = _seamline(seamline_cmd, world, "trace", "verify", result["race"], "--store", str(world["store"]))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_race_whose_every_run_the_reviewer_rejected_says_so(seamline_cmd: list[str], world: dict[str, Any]) -> None:
    """No `--check`: every completed run passes it, and the reviewer rejects them all. The
    last line said "no run passed the check" under a table of `passed yes`."""
    reviewer = world["tmp"] / "reviewer.json"
    reviewer.write_text(json.dumps([{"text": "Not what was asked.\nREJECT"}]))
    scripts = [_script(world, "one", "one.txt"), _script(world, "two", "two.txt")]
    done = _race(
        seamline_cmd, world, scripts, "--reviewer",
        "--reviewer-provider", "scripted", "--reviewer-option", f"script={reviewer}",
    )  # fmt: skip
    assert done.returncode == 6, done.stderr
    result = json.loads(done.stdout)
    assert [(e["passed"], e["review"]) for e in result["ranking"]] == [(True, "reject"), (True, "reject")]
    assert "no run passed the check" not in done.stderr
    assert "the reviewer rejected every run that passed" in done.stderr, done.stderr


def test_racers_of_one_backend_are_labelled_apart(seamline_cmd: list[str], world: dict[str, Any]) -> None:
    scripts = [_script(world, f"w{n}", f"w{n}.txt", cost=0.001 * (3 - n)) for n in range(3)]
    done = _race(seamline_cmd, world, scripts)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    labels = {e["racer"]: e["label"] for e in result["ranking"]}
    assert labels == {"r1": "scripted#1", "r2": "scripted#2", "r3": "scripted#3"}
    # The cheapest, r3, wins, and the last line names it by its own label.
    assert result["winner"]["racer"] == "r3" and "winner r3 (scripted#3)" in done.stderr


def test_labels_number_only_the_variants_that_repeat() -> None:
    from seamline.cli.race_command import _labels, _Variant

    variants = [_Variant("scripted", "a"), _Variant("scripted", "b"), _Variant("x", "a"), _Variant("x", "a")]
    assert _labels(variants) == ["scripted/a", "scripted/b", "x/a#1", "x/a#2"]
    # --samples numbers each variant's samples, as it always did.
    twice = [_Variant("codex"), _Variant("codex"), _Variant("claude-code"), _Variant("claude-code")]
    assert _labels(twice) == ["codex#1", "codex#2", "claude-code#1", "claude-code#2"]
    # Two variants of one backend sampled twice still get a label each.
    same = [_Variant("scripted")] * 4
    assert _labels(same) == ["scripted#1", "scripted#2", "scripted#3", "scripted#4"]


def test_a_race_that_no_run_passes_reports_it_failed_not_aborted(
    seamline_cmd: list[str], world: dict[str, Any]
) -> None:
    scripts = [_script(world, f"bad{n}", f"bad{n}.txt") for n in range(2)]
    done = _race(seamline_cmd, world, scripts, "--check", "test -f good.txt")
    assert done.returncode == 6, done.stderr
    result = json.loads(done.stdout)
    assert (result["outcome"], result["stop_reason"]) == ("failed", "vetoed")
