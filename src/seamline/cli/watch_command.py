"""``seamline watch``: every live and recent run of a store at a glance, refreshed until
Ctrl-C; ``--snapshot`` prints the table once (``--json``: one object per run) for scripts."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any, Final

from seamline.cli.main import SeamlineUsage
from seamline.sessions.records import SessionRecord, session_title
from seamline.sessions.store import SessionStore, open_store

__all__ = ["add_parser", "fleet", "run"]

_EPILOG: Final = """\
examples:
  seamline watch                       the table, refreshed every second until Ctrl-C
  seamline watch --snapshot            the table once
  seamline watch --snapshot --json     one JSON object per run (for scripts)

Each row is a run of the store: the live ones (status open) first, then the most recent,
with backend, model, status, the worktree branch and its state (`seamline run --worktree`),
tokens, cost and elapsed time. Approving, cancelling and merging from the view are not
built yet: use `seamline merge`/`discard` and the run's own terminal.

exit codes: 0 shown (or stopped with Ctrl-C), 2 usage error (an unusable store)
"""


def add_parser(commands: Any) -> str:
    parser = commands.add_parser(
        "watch",
        help="every live and recent run at a glance: status, branch, tokens, cost",
        description="Show the live and recent runs of the store, refreshed until Ctrl-C.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
    )
    parser.add_argument("--snapshot", action="store_true", help="print the table once and exit")
    parser.add_argument("--json", action="store_true", help="with --snapshot: one JSON object per run")
    parser.add_argument("--limit", type=int, default=20, metavar="N", help="at most N runs (default 20)")
    parser.add_argument("--interval", type=float, default=1.0, metavar="S", help="seconds between refreshes")
    parser.add_argument("--store", metavar="PATH|URL", help="the session store (default: $SEAMLINE_STORE)")
    return "watch"


def fleet(store: SessionStore, *, limit: int = 20, now: float | None = None) -> list[dict[str, Any]]:
    """The rows of the view: live runs (status ``open``) first, then the newest others."""
    at = time.time() if now is None else now
    records = [r for r in store.list_sessions(limit=max(limit, 1) * 4) if r.status != "not_started"]
    records.sort(key=lambda r: (r.status != "open", -r.created_at))
    return [_row(store, record, at) for record in records[:limit]]


def _row(store: SessionStore, record: SessionRecord, now: float) -> dict[str, Any]:
    totals = store.totals(record.id, include_descendants=False)
    tree = record.run_options.get("worktree")
    tree = tree if isinstance(tree, dict) else {}
    ended = now if record.status == "open" else record.updated_at
    return {
        "session_id": record.id,
        "provider": record.provider,
        "model": record.model,
        "status": record.status,
        "branch": tree.get("branch"),
        "worktree_state": tree.get("state"),
        "input_tokens": totals.input_tokens,
        "output_tokens": totals.output_tokens,
        "cost_usd": totals.cost_usd if totals.cost_known else None,
        "cost": totals.describe_cost(),
        "elapsed_s": round(max(ended - record.created_at, 0.0), 1),
        "title": session_title(store.first_prompt(record.id)),
        "workspace": record.workspace,
    }


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return 'no runs in this store yet (start one: seamline run "…")\n'
    lines = [f"{'RUN':<12}  {'STATUS':<11} {'BACKEND':<12} {'TOKENS':>13} {'COST':>9} {'ELAPSED':>8}  BRANCH / TITLE"]
    for row in rows:
        tokens = f"{row['input_tokens']}/{row['output_tokens']}"
        branch = f"⎇ {row['branch']} ({row['worktree_state']})  " if row["branch"] else ""
        lines.append(
            f"{row['session_id'][:12]:<12}  {row['status']:<11} {row['provider'][:12]:<12} {tokens:>13} "
            f"{row['cost']:>9} {_elapsed(row['elapsed_s']):>8}  {branch}{row['title']}"
        )
    return "\n".join(lines) + "\n"


def _elapsed(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


def run(args: argparse.Namespace, *, sleep: Callable[[float], None] = time.sleep) -> int:
    if args.limit < 1 or args.interval <= 0:
        raise SeamlineUsage("--limit must be at least 1 and --interval more than 0")
    if args.json and not args.snapshot:
        raise SeamlineUsage("--json goes with --snapshot (the live view is for a person)")
    store = open_store(args.store, read_only=True)
    try:
        if args.snapshot:
            rows = fleet(store, limit=args.limit)
            if args.json:
                for row in rows:
                    print(json.dumps(row))
            else:
                sys.stdout.write(_table(rows))
            return 0
        clear = "\x1b[H\x1b[2J" if sys.stdout.isatty() else ""
        try:
            while True:
                sys.stdout.write(clear + time.strftime("seamline watch  %H:%M:%S  (Ctrl-C ends)\n\n"))
                sys.stdout.write(_table(fleet(store, limit=args.limit)))
                sys.stdout.flush()
                sleep(args.interval)
        except KeyboardInterrupt:
            return 0
    finally:
        store.close()
