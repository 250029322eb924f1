"""``seamline users``: add, list and remove the users of ``seamline serve``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Final

from seamline.cli.main import SeamlineUsage

__all__ = ["add_parser", "run"]

_EPILOG: Final = """\
examples:
  seamline users add ana --role operator           prints ana's token, once
  seamline users add bob --role viewer --budget-usd-per-day 5
  seamline users list
  seamline users remove ana

A viewer reads; an operator starts runs, cancels them and answers the permission requests
of its own runs, and merges and discards its own worktree runs; an admin does everything.
The users file lies beside the store (STORE.users.json) unless --file names another;
`seamline serve` reads it (or --users FILE) and sees changes while it runs. Only each
token's SHA-256 is kept: a lost token is replaced by removing and adding the user.
"""


def add_parser(commands: Any) -> str:
    parser = commands.add_parser(
        "users",
        help="add, list and remove the users of seamline serve (tokens and roles)",
        description="Manage the users of seamline serve: a name, a role and a token shown once.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--store", metavar="PATH", help="the store file whose users these are (default: $SEAMLINE_STORE)"
    )
    where.add_argument("--file", metavar="PATH", help="the users file itself (what serve --users takes)")
    actions = parser.add_subparsers(dest="users_action", metavar="ACTION")
    add = actions.add_parser("add", help="add a user and print its token (shown once)")
    add.add_argument("name")
    add.add_argument("--role", required=True, choices=("viewer", "operator", "admin"))
    add.add_argument("--budget-usd-per-day", type=float, metavar="USD", help="cap on what its runs spend a day (UTC)")
    listing = actions.add_parser("list", help="show every user (never a token)")
    listing.add_argument("--json", action="store_true", help="one JSON object per user")
    remove = actions.add_parser("remove", help="remove a user (its token stops working)")
    remove.add_argument("name")
    return "users"


def _path(args: argparse.Namespace) -> Path:
    from seamline.locations import default_store_path
    from seamline.server.users import users_path_for

    if args.file is not None:
        return Path(args.file)
    store = args.store or str(default_store_path())
    if store.startswith(("postgresql://", "postgres://")):
        raise SeamlineUsage("a PostgreSQL store keeps no users file: give --file PATH (and serve --users PATH)")
    return users_path_for(store)


def run(args: argparse.Namespace) -> int:
    from seamline.server.users import UserBook, UsersFileError

    if args.users_action is None:
        raise SeamlineUsage("users needs an action: add, list or remove")
    book = UserBook(_path(args))
    try:
        if args.users_action == "add":
            token = book.add(args.name, args.role, budget_usd_per_day=args.budget_usd_per_day)
            print(token)
            print(
                f"seamline: user {args.name} ({args.role}) added to {book.path}; the token above is shown once",
                file=sys.stderr,
            )
        elif args.users_action == "remove":
            book.remove(args.name)
            print(f"seamline: user {args.name} removed", file=sys.stderr)
        else:
            for user in book.users():
                cap = user.budget_usd_per_day
                if args.json:
                    print(json.dumps({"name": user.name, "role": user.role, "budget_usd_per_day": cap}))
                else:
                    print(f"{user.name}\t{user.role}" + (f"\t${cap:.2f}/day" if cap is not None else ""))
    except UsersFileError as exc:
        raise SeamlineUsage(exc.message) from None
    return 0
