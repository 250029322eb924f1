"""``seamline eval`` end to end on the scripted provider: every trial a worktree run whose
task's check decides it; the printed numbers equal those worked out by hand; the budget
ends it; an interrupted evaluation resumes without running a finished trial again."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from seamline.cli.main import main
from tests.evals.lab import FLAKY_PASSES, git_in, script

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/bin/git"), reason="git is installed by the set-up")


def _variants(lab: Path, *, delay: float = 0.0) -> list[str]:
    return [
        *("-p", "scripted", "-o", f"script={script(lab / 'good.json', 'ok', 0.006)}"),
        *("-p", "scripted", "-o", f"script={script(lab / 'bad.json', 'no', 0.001)}"),
        *("-p", "scripted", "-o", f"script={script(lab / 'flaky.json', 'flaky', 0.002, delay=delay)}"),
    ]


def _wilson(passes: int, n: int) -> tuple[float, float]:
    z = 1.959963984540054
    p = passes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def test_the_numbers_of_three_known_variants_are_those_worked_out_by_hand(
    lab: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = lab / "store" / "s.db"
    argv = ["eval", str(lab / "tasks.yaml"), *_variants(lab), "--samples", "4", "--store", str(store), "--yes"]
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == "completed" and data["trials"] == {"planned": 72, "finished": 72}
    good, bad, flaky = data["variants"]
    assert [v["variant"] for v in (good, bad, flaky)] == ["scripted#1", "scripted#2", "scripted#3"]
    # good: all 24 pass at two calls of $0.006 a trial.
    assert (good["passes"], good["pass@1"], good["pass@4"], good["pass^4"]) == (24, 1.0, 1.0, 1.0)
    assert good["cost_per_pass"] == pytest.approx(0.012) and good["cost_usd"] == pytest.approx(24 * 0.012)
    assert good["interval"] == pytest.approx(list(_wilson(24, 24)))
    # bad: none pass; its cost per pass is unknown, never $0.
    assert (bad["passes"], bad["pass@1"], bad["pass@4"], bad["pass^4"]) == (0, 0.0, 0.0, 0.0)
    assert bad["cost_per_pass"] is None and bad["cost_usd"] == pytest.approx(24 * 0.002)
    # flaky: c = 0,1,2,3,4,2 of 4 samples.
    counts = list(FLAKY_PASSES.values())
    assert flaky["passes"] == sum(counts) == 12
    assert flaky["pass@1"] == pytest.approx(sum(c / 4 for c in counts) / 6)
    assert flaky["pass@4"] == pytest.approx(5 / 6)  # every task but t1 passed at least once
    assert flaky["pass^4"] == pytest.approx(1 / 6)  # only t5 passed all four
    assert flaky["cost_per_pass"] == pytest.approx(24 * 0.004 / 12)
    assert flaky["interval"] == pytest.approx(list(_wilson(12, 24)))
    assert flaky["input_tokens"] == 24 * 210 and flaky["output_tokens"] == 24 * 15
    per_task = {(t["task"], t["variant"]): t for t in data["tasks"]}
    assert per_task[("t2", "scripted#3")]["pass@4"] == pytest.approx(1.0)
    assert per_task[("t2", "scripted#3")]["pass^4"] == 0.0
    assert per_task[("t3", "scripted#3")]["pass@1"] == pytest.approx(0.5)
    # good against flaky: 12 pairs only good passed, none the other way; p = 2 / 2^12.
    pair = next(p for p in data["comparisons"] if (p["a"], p["b"]) == ("scripted#1", "scripted#3"))
    assert (pair["pairs"], pair["a_only"], pair["b_only"]) == (24, 12, 0)
    assert pair["p_value"] == pytest.approx(2 / 4096)
    # Every check ran once per trial, and every worktree and branch is gone.
    assert len((lab / "checks.log").read_text().splitlines()) == 72
    branches = subprocess.run(["git", "branch", "--list"], cwd=lab / "repo", capture_output=True, text=True).stdout
    assert branches.split() == ["*", "main"]
    # The table, `show` and `list` read the same record.
    assert main(["eval", "list", "--store", str(store), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["id"] == data["id"] and listed["status"] == "completed" and listed["trials"] == 72
    assert main(["eval", "show", data["id"][:8], "--store", str(store)]) == 0
    shown = capsys.readouterr().out
    assert "scripted#3  24      12      0.50 [" in shown and "p = 0.000488" in shown


def test_the_budget_ends_the_evaluation_and_keeps_what_finished(lab: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = lab / "store" / "s.db"
    argv = ["eval", str(lab / "tasks.yaml"), *_variants(lab)[:4], "--store", str(store), "--yes", "--json"]
    # Each trial of the first variant costs $0.012: the fifth passes $0.05.
    assert main([*argv, "--budget-usd", "0.05"]) == 3
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == "budget"
    finished = data["trials"]["finished"]
    assert 4 <= finished < 12
    assert sum(v["cost_usd"] or 0.0 for v in data["variants"]) <= 0.05 + 0.012


def test_an_interrupted_evaluation_resumes_without_running_a_finished_trial_again(
    lab: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = lab / "store" / "s.db"
    argv = ["eval", str(lab / "tasks.yaml"), *_variants(lab, delay=0.3), "--samples", "2", "--store", str(store)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "seamline", *argv, "--yes", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        records = list((lab / "store" / "evals").glob("*/trials.jsonl")) if (lab / "store" / "evals").exists() else []
        while time.monotonic() < deadline:
            records = list((lab / "store" / "evals").glob("*/trials.jsonl"))
            if records and len(records[0].read_text().splitlines()) >= 8:
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err.decode()
    eval_id = records[0].parent.name
    before = len(records[0].read_text().splitlines())
    assert 8 <= before < 36 and f"seamline eval resume {eval_id[:12]}" in err.decode()
    checked_before = len((lab / "checks.log").read_text().splitlines())
    assert checked_before == before  # an aborted trial is not recorded, and its check never ran
    assert main(["eval", "resume", eval_id[:8], "--store", str(store), "--yes", "--json"]) == 0
    resumed = json.loads(capsys.readouterr().out)
    # Every trial's check ran exactly once over both runs: nothing finished ran again.
    checks = (lab / "checks.log").read_text().splitlines()
    assert len(checks) == 36
    # The same figures as an uninterrupted run of the same plan.
    (lab / "checks.log").unlink()
    assert main([*argv, "--yes", "--json"]) == 0
    whole = json.loads(capsys.readouterr().out)
    assert _figures(resumed) == _figures(whole)


def _figures(data: dict[str, Any]) -> Any:
    keep = ("variant", "trials", "passes", "pass_rate", "interval", "pass@1", "pass@2", "pass^2", "cost_usd")
    return [{k: v[k] for k in keep} for v in data["variants"]], data["tasks"], data["comparisons"]


def test_a_task_starts_from_its_commit_after_its_set_up(lab: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = lab / "repo"
    (repo / "README.md").write_text("changed later\n")
    git_in(repo, "commit", "-qam", "later")
    task = {
        "id": "old",
        "repository": "repo",
        "commit": "HEAD~1",
        "setup": "echo ready > setup.txt",
        "prompt": "answer",
        "check": "grep -qx hi README.md && grep -qx ready setup.txt && grep -qx ok answer.txt",
    }
    (lab / "one.yaml").write_text(yaml.safe_dump([task, {**task, "id": "new", "commit": "main"}]))
    store = lab / "store" / "s.db"
    argv = ["eval", str(lab / "one.yaml"), *_variants(lab)[:4], "--store", str(store), "--yes", "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(t["task"], t["passes"]) for t in data["tasks"]] == [("old", 1), ("new", 0)]
    (lab / "bad.yaml").write_text(yaml.safe_dump([{**task, "commit": "no-such-ref"}]))
    # A commit the repository lacks is refused before anything starts.
    assert main(["eval", str(lab / "bad.yaml"), *_variants(lab)[:4], "--store", str(store), "--yes"]) == 2
    assert "no commit 'no-such-ref'" in capsys.readouterr().err
