"""``seamline eval`` end to end on the scripted provider: every trial a worktree run whose
task's check decides it; the printed numbers equal those worked out by hand; the budget
ends it; an interrupted evaluation resumes without running a finished trial again."""

from __future__ import annotations

import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from seamline.cli.main import main

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/bin/git"), reason="git is installed by the set-up")

# How many of its four samples the "flaky" variant passes, task by task.
FLAKY_PASSES = {"t1": 0, "t2": 1, "t3": 2, "t4": 3, "t5": 4, "t6": 2}
VERDICT = """\
import fcntl, json, pathlib, sys
task, log, table = sys.argv[1], pathlib.Path(sys.argv[2]), json.loads(sys.argv[3])
answer = pathlib.Path("answer.txt").read_text().strip() if pathlib.Path("answer.txt").exists() else ""
with open(log, "a+") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    f.seek(0)
    seen = sum(1 for line in f if line.split() == [task, answer])
    f.write(f"{task} {answer}\\n")
if answer == "ok":
    sys.exit(0)
if answer == "flaky":
    sys.exit(0 if seen < table[task] else 1)
sys.exit(1)
"""


def _script(path: Path, answer: str, cost: float, *, delay: float = 0.0) -> str:
    calls: list[dict[str, Any]] = [
        {
            "tool_calls": [{"name": "write_file", "arguments": {"path": "answer.txt", "content": answer + "\n"}}],
            "usage": {"input_tokens": 100, "output_tokens": 10, "cost_usd": cost},
        },
        {"text": "Done.", "usage": {"input_tokens": 110, "output_tokens": 5, "cost_usd": cost}},
    ]
    if delay:
        calls[0]["delay"] = delay
    path.write_text(json.dumps(calls))
    return str(path)


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=repo, check=True, capture_output=True
    )


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("hi\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "init")
    (tmp_path / "verdict.py").write_text(VERDICT)
    table = shlex.quote(json.dumps(FLAKY_PASSES))
    tasks = [
        {
            "id": task,
            "repository": "repo",
            "prompt": f"answer {task}",
            "check": f"{sys.executable} {tmp_path / 'verdict.py'} {task} {tmp_path / 'checks.log'} {table}",
        }
        for task in FLAKY_PASSES
    ]
    (tmp_path / "tasks.yaml").write_text(yaml.safe_dump(tasks, sort_keys=False))
    return tmp_path


def _variants(lab: Path, *, delay: float = 0.0) -> list[str]:
    return [
        *("-p", "scripted", "-o", f"script={_script(lab / 'good.json', 'ok', 0.006)}"),
        *("-p", "scripted", "-o", f"script={_script(lab / 'bad.json', 'no', 0.001)}"),
        *("-p", "scripted", "-o", f"script={_script(lab / 'flaky.json', 'flaky', 0.002, delay=delay)}"),
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
    _git(repo, "commit", "-qam", "later")
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
