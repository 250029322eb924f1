"""``seamline diff RUN [--stat]``: a worktree run's changes against the commit it started from."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Final

__all__ = ["add_parser", "run"]

_EPILOG: Final = """\
examples:
  seamline diff 3f9c0e12             the whole diff of the run's branch against its base commit
  seamline diff 3f9c0e12 --stat      files changed, with counts

RUN is a run started with `seamline run --worktree` (a unique prefix of its id will do).
What each turn committed on the run's branch is shown; see docs/worktrees.md.

exit codes: 0 shown, 1 git failed, 2 usage error (unknown run, a run without a worktree)
"""


def add_parser(commands: Any) -> str:
    parser = commands.add_parser(
        "diff",
        help="show a worktree run's changes against the commit it started from",
        description="Show what the turns of RUN committed on its branch, against the commit the run started from.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
    )
    parser.add_argument("run_id", metavar="RUN", help="the run's session id, or a unique prefix of it")
    parser.add_argument("--stat", action="store_true", help="files changed and counts, not the whole diff")
    parser.add_argument("--store", metavar="PATH|URL", help="the session store (default: $SEAMLINE_STORE)")
    return "diff"


def run(args: argparse.Namespace) -> int:
    from seamline.worktrees import diff

    shown = diff(args.run_id, store=args.store, stat=args.stat)
    sys.stdout.write(shown)
    if not shown:
        # Nothing on stdout (a script may diff the output); a person learns why on stderr.
        print(f"seamline: run {args.run_id} changed nothing (its branch has no commits past its base)", file=sys.stderr)
    return 0
