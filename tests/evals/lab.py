"""The evaluation tests' lab: a git repository, six tasks whose check is a verdict script,
and scripted variants that answer "ok", "no" or "flaky" (the ``lab`` fixture is in conftest)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

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


def script(path: Path, answer: str, cost: float, *, delay: float = 0.0) -> str:
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


def git_in(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=repo, check=True, capture_output=True
    )


def make_lab(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git_in(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("hi\n")
    git_in(repo, "add", ".")
    git_in(repo, "commit", "-qm", "init")
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
