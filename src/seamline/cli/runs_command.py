"""``seamline runs``: act on a stored run; ``runs raise`` raises the budget of a run that
paused at it (``run --on-budget pause``) and goes on with it."""

from __future__ import annotations

import argparse
from typing import Any, Final

from seamline.cli.main import SeamlineUsage

__all__ = ["add_parser", "run"]

_EPILOG: Final = """\
examples:
  seamline runs raise 3f2a9c01 --budget-usd 1.50
  seamline runs raise 3f2a9c01 --budget-usd 1.50 --json

A run started with `--budget-usd USD --on-budget pause` stops before its next model request
once it has spent USD: its status is `paused`, its last event says which budget and what was
spent. `runs raise` sets the run's budget to the new amount (in all, what was spent before
included) and goes on from the stored conversation, with the provider, model and options the
run was started with: no model request or tool call that finished runs again. It may pause
again. A run that is not paused is refused (exit code 2) and nothing changes.

exit codes: 0 completed, 1 failed, 2 usage error (not paused, unknown run), 3 paused again or budget, 130 aborted
"""


def add_parser(commands: Any) -> str:
    parser = commands.add_parser(
        "runs",
        help="raise the budget of a run that paused at it, and go on with it",
        description="Act on a stored run (a session's last turn).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
    )
    actions = parser.add_subparsers(dest="runs_action", metavar="ACTION")
    raising = actions.add_parser("raise", help="raise a paused run's budget and go on with it")
    raising.add_argument("id", metavar="RUN", help="the run (session) id, or a unique prefix of it")
    raising.add_argument("--budget-usd", type=float, required=True, metavar="USD", help="the run's new budget, in all")
    raising.add_argument(
        "--store", metavar="PATH|URL", help="the store (default: $SEAMLINE_STORE or the user data dir)"
    )
    raising.add_argument("--json", action="store_true", help="print one JSON event per line on stdout")
    raising.add_argument("--max-steps", type=int, default=50, metavar="N", help="most model calls now (default: 50)")
    raising.add_argument(
        "--provider-option",
        "-o",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="provider option (a key's variable, a base URL); repeatable",
    )
    raising.add_argument("--yes", "-y", action="store_true", help="allow tools that write or execute")
    return "runs"


def run(args: argparse.Namespace) -> int:
    if getattr(args, "runs_action", None) != "raise":
        raise SeamlineUsage("say what to do: seamline runs raise RUN --budget-usd USD")
    from seamline.cli.sessions_command import continue_session
    from seamline.errors import RunNotPaused
    from seamline.sessions.sqlite_store import open_store

    store = open_store(args.store)
    try:
        record = store.require(args.id)
        if record.status != "paused":
            raise RunNotPaused(
                f"run {record.id} is not paused at its budget (status: {record.status}); nothing to raise"
            )
        args.id, args.prompt, args.raise_to = record.id, "", args.budget_usd
        args.on_budget, args.workspace, args.model = "pause", None, None
        return continue_session(store, args, fork=False)
    finally:
        store.close()
