"""``seamline revert RUN [--to STEP]``: put the workspace back as it was before a run.

RUN is the session id of the run (the ``session_id`` of its ``session`` event); each
journaled tool call of the run is a step, numbered from 1 (``--list`` shows them).
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Final

from seamline.cli.main import SeamlineUsage
from seamline.cli.sandbox_command import _store_file
from seamline.sandbox.journal import EditJournal, journal_path_for
from seamline.trace.listing import resolve_prefix

__all__ = ["add_parser", "run"]

_EPILOG: Final = """\
examples:
  seamline revert 3f9c0e…            undo every change the run made to its workspace
  seamline revert 3f9c0e… --to 2     keep steps 1 and 2, undo the later ones
  seamline revert 3f9c0e… --list     show the journaled steps and the paths they changed

The journal lives beside the session store (store.db -> store.edits.db). A revert refuses,
changing nothing, if a journaled path was changed since the run; --force overwrites.

exit codes: 0 reverted, 1 refused or failed, 2 usage error (unknown run, bad step)
"""


def add_parser(commands: Any) -> str:
    revert = commands.add_parser(
        "revert",
        help="undo the workspace changes of a run (journaled with --sandbox)",
        description="Restore the workspace of RUN to how it was before the run, or after step STEP.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
    )
    revert.add_argument(
        "run_id", metavar="RUN", help="the run's session id (from the `session` event), or a unique prefix of it"
    )
    revert.add_argument("--to", type=int, default=0, metavar="STEP", help="keep steps up to STEP (default: 0, all)")
    revert.add_argument("--list", action="store_true", help="show the journaled steps; change nothing")
    revert.add_argument("--force", action="store_true", help="overwrite paths changed since the run")
    revert.add_argument("--store", metavar="PATH", help="session store whose journal to use (default: $SEAMLINE_STORE)")
    revert.add_argument("--json", action="store_true", help="print the result as one JSON object")
    return "revert"


def run(args: argparse.Namespace) -> int:
    store_file = _store_file(args.store)
    assert store_file is not None
    path = journal_path_for(store_file)
    if not path.exists():
        raise SeamlineUsage(_not_journaled(args.run_id, args.store))
    journal = EditJournal(path)
    try:
        # The short ids `seamline sessions list` prints name a run too (a unique prefix).
        found = resolve_prefix(args.run_id, journal.run_ids(), what="run")
        if found is None:
            raise SeamlineUsage(_not_journaled(args.run_id, args.store))
        args.run_id = found
        if args.list:
            journal.workspace_of(args.run_id)
            steps = journal.steps(args.run_id)
            if args.json:
                print(
                    json.dumps(
                        [
                            {
                                "step": s.step,
                                "tool": s.tool,
                                "call_id": s.call_id,
                                "paths": s.paths,
                                "ignored": s.ignored,
                            }
                            for s in steps
                        ]
                    )
                )
            else:
                for s in steps:
                    shown = ", ".join(s.paths) or ("(no change)" if not s.ignored else "")
                    if s.ignored:  # a .pyc, a virtual environment: counted, not listed one by one
                        shown += f"{'; ' if s.paths else ''}{len(s.ignored)} path(s) git ignores"
                    print(f"{s.step}\t{s.tool}\t{s.call_id}\t{shown}")
            return 0
        report = journal.revert(args.run_id, to_step=args.to, force=args.force)
    finally:
        journal.close()
    if args.json:
        print(
            json.dumps(
                {
                    "run_id": report.run_id,
                    "workspace": str(report.workspace),
                    "to_step": report.to_step,
                    "steps_undone": report.steps_undone,
                    "restored": report.restored,
                    "left": report.left,
                }
            )
        )
    else:
        print(
            f"reverted {report.steps_undone} step(s) of {report.run_id} in {report.workspace}: "
            f"{len(report.restored)} path(s) restored"
        )
        if report.left:
            shown = ", ".join(report.left[:10]) + (
                f" and {len(report.left) - 10} more" if len(report.left) > 10 else ""
            )
            print(f"left as they are (ignored by git, their content was never journaled): {shown}")
    return 0


def _not_journaled(run_id: str, store: str | None) -> str:
    """Why RUN has nothing to revert, from what the store knows of it, and what to do instead."""
    from seamline.errors import SeamlineError
    from seamline.providers.registry import provider_class
    from seamline.sessions.sqlite_store import open_store
    from seamline.worktrees import worktree_of

    try:
        opened = open_store(store, read_only=True)
    except SeamlineError:
        opened = None
    try:
        record = opened.require(run_id) if opened is not None else None
    except SeamlineError:
        record = None
    finally:
        if opened is not None:
            opened.close()
    if record is None:
        return f"no run {run_id!r} in the store or its edit journal; `seamline sessions list` shows the runs"
    short = record.id[:12]
    tree = worktree_of(record)
    if tree is not None:
        return (
            f"run {short} is a worktree run: its edits are commits on branch {tree.branch}, not journaled; "
            f"see them with `seamline diff {short}`, drop them with `seamline discard {short}`"
        )
    try:
        own_tools = provider_class(record.provider).runs_own_tools
    except SeamlineError:
        own_tools = False
    if own_tools or record.run_options.get("sandbox"):
        return f"run {short} ({record.provider}) has no edit journal: it changed nothing in its workspace"
    return (
        f"run {short} has no edit journal: a {record.provider} run's edits are journaled only with "
        "`seamline run --sandbox …` (agent CLI and ACP runs always are); undo them with git in "
        f"{record.workspace or 'its workspace'}, or next time use `seamline run --worktree` and `seamline discard`"
    )
