"""``seamline eval validate FILE``: check an evaluation's dataset, naming each mistake with its line."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Final

from seamline.evals.dataset import DatasetError, load_dataset
from seamline.exit_codes import EXIT_CODES

__all__ = ["add_parser", "run"]

_EPILOG: Final = """\
examples:
  seamline eval validate docs/examples/eval/dataset.yaml
  seamline eval validate tasks.jsonl --json

A dataset is YAML (a list of tasks) or JSONL (one task per line); each task has an id, a
repository (a folder, relative to the file), a prompt and a check command (exit 0 passes),
and optionally commit, setup, rubric, timeout_s, budget_usd and tags. See docs/evals.md.

exit codes: 0 the dataset is usable, 2 it is not (every mistake is listed with its line)
"""


def add_parser(commands: Any) -> str:
    evals = commands.add_parser(
        "eval",
        help="evaluate agents on a dataset of tasks (validate a dataset)",
        description="Evaluate agents on a dataset of tasks. Today: check a dataset file.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
    )
    sub = evals.add_subparsers(dest="eval_command", metavar="SUBCOMMAND", required=True)
    validate = sub.add_parser("validate", help="check a dataset file and list its tasks")
    validate.add_argument("file", metavar="FILE", help="the dataset (.yaml, .yml or .jsonl)")
    validate.add_argument("--json", action="store_true", help="print the result as one JSON object")
    return "eval"


def run(args: argparse.Namespace) -> int:
    try:
        dataset = load_dataset(args.file)
    except DatasetError as exc:
        if args.json:
            problems = [{"line": p.line, "message": p.message} for p in exc.problems]
            print(json.dumps({"file": exc.path, "valid": False, "problems": problems}))
        else:
            for problem in exc.problems:
                where = f"{exc.path}:{problem.line}" if problem.line else exc.path
                print(f"{where}: {problem.message}", file=sys.stderr)
            print(f"seamline: {len(exc.problems)} problem(s) in {exc.path}", file=sys.stderr)
        return EXIT_CODES["usage"]
    if args.json:
        tasks = [{"id": t.id, "repository": str(t.repository), "tags": list(t.tags)} for t in dataset.tasks]
        print(json.dumps({"file": args.file, "valid": True, "tasks": tasks}))
    else:
        for task in dataset.tasks:
            tags = f"  [{', '.join(task.tags)}]" if task.tags else ""
            print(f"{task.id:<24} {task.repository}{tags}")
        print(f"{len(dataset.tasks)} task(s), valid", file=sys.stderr)
    return 0
