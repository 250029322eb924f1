"""``seamline discard RUN``: remove a worktree run's worktree and branch."""

from __future__ import annotations

import argparse
import json
from typing import Any, Final

__all__ = ["add_parser", "run"]

_EPILOG: Final = """\
examples:
  seamline discard 3f9c0e12          the run's worktree and branch removed; its session stays

The session stays in the store, marked discarded (`seamline sessions list`). A merged
run is refused: its branch is the record of its turns (git branch -D BRANCH removes it).

exit codes: 0 discarded, 1 git failed, 2 refused or usage error (unknown run, merged run)
"""


def add_parser(commands: Any) -> str:
    parser = commands.add_parser(
        "discard",
        help="remove a worktree run's worktree and branch",
        description="Remove the worktree and the branch of RUN (started with `seamline run --worktree`).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
    )
    parser.add_argument("run_id", metavar="RUN", help="the run's session id, or a unique prefix of it")
    parser.add_argument("--store", metavar="PATH|URL", help="the session store (default: $SEAMLINE_STORE)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    return "discard"


def run(args: argparse.Namespace) -> int:
    from seamline.worktrees import discard

    gone = discard(args.run_id, store=args.store)
    if args.json:
        print(json.dumps({"run_id": gone.run_id, "branch": gone.branch, "state": gone.state}))
    else:
        print(f"run {gone.run_id[:12]} discarded: worktree {gone.path} and branch {gone.branch} removed")
    return 0
