"""``seamline watch``: every live and recent run at a glance. On a terminal it is a
Textual app (:mod:`seamline.cli.watch_app`, the ``watch`` extra) with keys to approve,
deny, cancel, diff, merge and discard; without Textual, or when stdout is not a terminal,
a plain table refreshed until Ctrl-C. ``--snapshot`` prints the table once (``--json``:
one object per run) for scripts. ``--url`` reads a running ``seamline serve`` instead of
the store."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any, Final

from seamline.cli.main import SeamlineUsage
from seamline.cli.watch_rows import elapsed_text, fleet
from seamline.extras import install_hint
from seamline.sessions.sqlite_store import open_store

__all__ = ["add_parser", "run"]

_EPILOG: Final = """\
examples:
  seamline watch                       the live view of the store's runs (q quits)
  seamline watch --url http://127.0.0.1:8765   the runs of a running `seamline serve`
  seamline watch --snapshot            the table once
  seamline watch --snapshot --json     one JSON object per run (for scripts)

Each row is a run: the live ones first, then the most recent, with backend, model,
status, the tool it is running, tokens, cost, elapsed time, the worktree branch and its
state (`seamline run --worktree`) and the permission requests waiting. The selected run's
events show below the table.

keys:
  up/down  select a run (its events follow below)
  a / d    approve / deny the selected run's first waiting permission request (--url)
  c        cancel the selected run (--url)
  v        show the diff of a worktree run (escape closes it)
  m        merge a worktree run into the branch it started from (press twice)
  x        discard a worktree run: worktree and branch removed (press twice)
  q        quit

Approving, denying and cancelling need --url: a run in another `seamline run` process
cannot be asked. Diff, merge and discard work on the store (its recorded git worktree) and
over --url (the server's routes), with the same refusals as `seamline merge`. The live
view needs the watch extra (WATCH_HINT); without it, or when stdout is
not a terminal, the plain table is refreshed every --interval seconds until Ctrl-C.

exit codes: 0 shown (or stopped with q or Ctrl-C), 2 usage error (an unusable store or URL)
"""


def add_parser(commands: Any) -> str:
    parser = commands.add_parser(
        "watch",
        help="every live and recent run at a glance: status, branch, tokens, cost",
        description="Show the live and recent runs of the store, refreshed until Ctrl-C.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG.replace("WATCH_HINT", install_hint("watch")),
    )
    parser.add_argument("--snapshot", action="store_true", help="print the table once and exit")
    parser.add_argument("--json", action="store_true", help="with --snapshot: one JSON object per run")
    parser.add_argument("--limit", type=int, default=20, metavar="N", help="at most N runs (default 20)")
    parser.add_argument("--interval", type=float, default=1.0, metavar="S", help="seconds between refreshes")
    parser.add_argument("--store", metavar="PATH|URL", help="the session store (default: $SEAMLINE_STORE)")
    parser.add_argument(
        "--url", metavar="URL", help="read a running `seamline serve` at URL (http://127.0.0.1:PORT), not the store"
    )
    parser.add_argument(
        "--token", metavar="TOKEN", help="with --url: the server's bearer token (default: $SEAMLINE_TOKEN)"
    )
    parser.add_argument("--plain", action="store_true", help="the plain refreshing table, even on a terminal")
    return "watch"


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return 'no runs in this store yet (start one: seamline run "…")\n'
    lines = [f"{'RUN':<12}  {'STATUS':<11} {'BACKEND':<12} {'TOKENS':>13} {'COST':>9} {'ELAPSED':>8}  BRANCH / TITLE"]
    for row in rows:
        tokens = f"{row['input_tokens']}/{row['output_tokens']}"
        branch = f"⎇ {row['branch']} ({row['worktree_state']})  " if row["branch"] else ""
        lines.append(
            f"{row['session_id'][:12]:<12}  {row['status']:<11} {row['provider'][:12]:<12} {tokens:>13} "
            f"{row['cost']:>9} {elapsed_text(row['elapsed_s']):>8}  {branch}{row['title']}"
        )
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace, *, sleep: Callable[[float], None] = time.sleep) -> int:
    if args.limit < 1 or args.interval <= 0:
        raise SeamlineUsage("--limit must be at least 1 and --interval more than 0")
    if args.json and not args.snapshot:
        raise SeamlineUsage("--json goes with --snapshot (the live view is for a person)")
    if args.url is not None:
        return _watch_server(args)
    store = open_store(args.store, read_only=True)
    try:
        note = ""  # a line under each refresh's header: a line on stderr would be cleared at once
        if not args.snapshot and not args.plain and sys.stdout.isatty():
            from importlib.util import find_spec

            if find_spec("textual") is not None:
                from seamline.cli.watch_app import FleetApp
                from seamline.cli.watch_sources import StoreSource

                source = StoreSource(store, location=args.store, interval=args.interval)
                FleetApp(source, limit=args.limit, interval=args.interval).run()
                return 0
            note = f"the live view needs the watch extra ({install_hint('watch')}); this is the plain table\n"
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
                sys.stdout.write(clear + time.strftime("seamline watch  %H:%M:%S  (Ctrl-C ends)\n") + note + "\n")
                sys.stdout.write(_table(fleet(store, limit=args.limit)))
                sys.stdout.flush()
                sleep(args.interval)
        except KeyboardInterrupt:
            return 0
    finally:
        store.close()


def _watch_server(args: argparse.Namespace) -> int:
    """``--url``: the runs of a running ``seamline serve``, in the app, the snapshot or the plain table."""
    if args.store is not None:
        raise SeamlineUsage("--url reads a server, --store a store: give one")
    if not args.url.startswith(("http://", "https://")):
        raise SeamlineUsage(f"--url must be an http:// or https:// URL, not {args.url!r}")
    from importlib.util import find_spec

    missing = [name for name in ("textual", "httpx2") if find_spec(name) is None]
    if missing:
        raise SeamlineUsage(f"watch --url needs the watch extra: {install_hint('watch')} ({missing[0]} missing)")
    import asyncio

    from seamline.cli.watch_sources import ActionRefused, ServerSource

    source = ServerSource(args.url, token=args.token or os.environ.get("SEAMLINE_TOKEN") or None)
    if args.snapshot or args.plain or not sys.stdout.isatty():
        try:
            return asyncio.run(_plain_server(args, source))
        except ActionRefused as exc:
            raise SeamlineUsage(exc.message) from None
        except KeyboardInterrupt:
            return 0
    from seamline.cli.watch_app import FleetApp

    FleetApp(source, limit=args.limit, interval=args.interval).run()
    return 0


async def _plain_server(args: argparse.Namespace, source: Any) -> int:
    """The snapshot of a server's runs, or the plain table refreshed until Ctrl-C."""
    import asyncio

    try:
        while True:
            rows = await source.rows(args.limit)
            for row in rows:
                row.pop("pending", None)
            if args.snapshot:
                sys.stdout.write("".join(json.dumps(r) + "\n" for r in rows) if args.json else _table(rows))
                return 0
            clear = "\x1b[H\x1b[2J" if sys.stdout.isatty() else ""
            sys.stdout.write(clear + time.strftime(f"seamline watch {args.url}  %H:%M:%S  (Ctrl-C ends)\n\n"))
            sys.stdout.write(_table(rows))
            sys.stdout.flush()
            await asyncio.sleep(args.interval)
    finally:
        await source.close()
