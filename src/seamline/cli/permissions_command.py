"""``seamline permissions``: list, add and remove the durable permission rules."""

from __future__ import annotations

import argparse
import json
from typing import Any, Final

from seamline.cli.main import SeamlineUsage
from seamline.sessions.rules import PermissionRules
from seamline.sessions.sqlite_store import open_store
from seamline.tools.permissions import EFFECTS, TOOL_CLASSES

__all__ = ["add_parser", "run"]

_EPILOG: Final = """\
examples:
  seamline permissions add allow --tool shell --pattern 'command=git status*'
  seamline permissions add deny --class network
  seamline permissions add ask --tool write_file --pattern 'path=*.env' --workspace .
  seamline permissions list
  seamline permissions rm 3

A deny rule always wins; among allow and ask rules the newest matching one decides.
With no rule, read tools are allowed and the rest ask (`seamline run --yes` allows what
would ask). Hard denials, such as a recursive delete outside the workspace, hold even
with --yes. See docs/permissions.md.
"""


def add_parser(commands: Any) -> str:
    parser = commands.add_parser(
        "permissions",
        help="list, add and remove permission rules (allow, deny, ask)",
        description="Manage the durable permission rules kept in the session store.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
    )
    parser.add_argument(
        "--store",
        metavar="PATH|URL",
        help="the store: a file or postgresql://… (default: $SEAMLINE_STORE or the user data dir)",
    )
    actions = parser.add_subparsers(dest="permissions_action", metavar="ACTION")
    listing = actions.add_parser("list", help="show every rule")
    listing.add_argument("--json", action="store_true", help="one JSON object per rule")
    add = actions.add_parser("add", help="add a rule")
    add.add_argument("effect", choices=EFFECTS, help="what the rule does")
    add.add_argument("--tool", metavar="NAME", help="tool name, or a glob over names (default: every tool)")
    add.add_argument("--class", dest="tool_class", choices=TOOL_CLASSES, help="only tools of this class")
    add.add_argument("--pattern", metavar="[KEY=]GLOB", help="argument pattern: KEY=GLOB on one argument, GLOB on any")
    add.add_argument("--workspace", metavar="DIR", help="only for runs in this folder")
    remove = actions.add_parser("rm", help="remove a rule by id")
    remove.add_argument("rule_id", type=int, metavar="ID")
    return "permissions"


def run(args: argparse.Namespace) -> int:
    if args.permissions_action is None:
        raise SeamlineUsage("permissions needs an action: list, add or rm")
    # Listing never creates a store: a missing one has no rules.
    rules = PermissionRules(open_store(args.store, read_only=args.permissions_action == "list"))
    try:
        if args.permissions_action == "list":
            found = rules.list()
            for rule in found:
                if args.json:
                    print(
                        json.dumps(
                            {
                                "id": rule.id,
                                "effect": rule.effect,
                                "tool": rule.tool,
                                "tool_class": rule.tool_class,
                                "pattern": rule.pattern,
                                "workspace": rule.workspace,
                            }
                        )
                    )
                else:
                    print(rule.describe())
            if not found and not args.json:
                print("no permission rules")
            return 0
        if args.permissions_action == "add":
            rule = rules.add(
                args.effect,
                tool=args.tool,
                tool_class=args.tool_class,
                pattern=args.pattern,
                workspace=args.workspace,
            )
            print(f"added {rule.describe()}")
            return 0
        if not rules.remove(args.rule_id):
            raise SeamlineUsage(f"no permission rule #{args.rule_id}")
        print(f"removed rule #{args.rule_id}")
        return 0
    finally:
        rules.store.close()
