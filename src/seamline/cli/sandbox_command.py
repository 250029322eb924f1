"""``seamline sandbox check``: what isolation this machine can give, and why not.

Also builds the sandbox and the edit journal that ``seamline run --sandbox`` uses.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Final

from seamline.cli.main import SeamlineUsage
from seamline.sandbox.journal import EditJournal, journal_path_for
from seamline.sandbox.policy import SandboxPolicy, load_policy
from seamline.sandbox.probe import SANDBOX_MODES, SandboxMode, open_sandbox, probe
from seamline.sandbox.runtime import Sandbox
from seamline.sessions.store import default_store_path
from seamline.tools.workspace import Workspace

__all__ = ["add_parser", "run", "sandbox_for_run"]

_EPILOG: Final = """\
examples:
  seamline sandbox check                  probe bubblewrap (what `--sandbox auto` would use)
  seamline sandbox check --mode container
  seamline sandbox check --json

exit codes: 0 the mode is available, 1 it is not (the output says why and how to fix it)
"""


def add_parser(commands: Any) -> str:
    sandbox = commands.add_parser(
        "sandbox",
        help="check what isolation this machine can give the file and shell tools",
        description="Inspect the sandbox that `seamline run --sandbox` would use.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
    )
    actions = sandbox.add_subparsers(dest="sandbox_action", metavar="ACTION")
    check = actions.add_parser("check", help="probe the sandbox backends and report what works")
    check.add_argument("--mode", choices=SANDBOX_MODES, default="auto", help="backend to probe (default: auto)")
    check.add_argument("--bwrap", metavar="PATH", help="bubblewrap binary to use (default: $SEAMLINE_BWRAP or PATH)")
    check.add_argument("--json", action="store_true", help="print the report as one JSON object")
    return "sandbox"


def run(args: argparse.Namespace) -> int:
    if args.sandbox_action != "check":
        raise SeamlineUsage("say what to do: `seamline sandbox check`")
    report = probe(args.mode, bwrap=args.bwrap)
    if args.json:
        print(
            json.dumps(
                {
                    "mode": report.mode,
                    "ok": report.ok,
                    "backend": report.backend,
                    "bwrap": report.bwrap,
                    "version": report.version,
                    "features": report.features,
                    "process_limit": report.process_limit,
                    "memory_limit": report.memory_limit,
                    "unix_sockets": report.unix_sockets,
                    "tmp_size": report.tmp_size,
                    "problems": report.problems,
                    "guidance": report.guidance,
                }
            )
        )
    else:
        print(report.render())
    return 0 if report.ok else 1


def sandbox_for_run(args: argparse.Namespace, workspace: Workspace) -> tuple[Sandbox | None, EditJournal | None]:
    """The sandbox and journal of ``seamline run --sandbox MODE``; ``(None, None)`` without it.

    The journal lives beside the session store (``<store>.edits.db``); ``/outputs`` is the
    policy's folder, else ``outputs/<time>-<id>`` beside the store (a temporary folder with
    ``--no-store``, which also keeps no journal).
    """
    mode: SandboxMode | None = getattr(args, "sandbox", None)
    policy_file: str | None = getattr(args, "sandbox_policy", None)
    if mode is None:
        if policy_file:
            raise SeamlineUsage("--sandbox-policy needs --sandbox auto|bwrap|container")
        return None, None
    policy = load_policy(policy_file) if policy_file else SandboxPolicy()
    store_file = _store_file(getattr(args, "store", None))
    if policy.outputs is not None:
        outputs = policy.outputs
    elif getattr(args, "no_store", False) or store_file is None:
        outputs = Path(tempfile.mkdtemp(prefix="seamline-outputs-"))
    else:
        outputs = store_file.parent / "outputs" / f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
    sandbox = open_sandbox(mode, workspace=workspace.root, outputs=outputs, policy=policy)
    journal = None
    if not getattr(args, "no_store", False):
        journal = EditJournal(journal_path_for(store_file or default_store_path()))
    return sandbox, journal


def _store_file(location: str | None) -> Path | None:
    """The store's file, or None for a server store (postgresql://…)."""
    where = location or str(default_store_path())
    if where.startswith(("postgresql://", "postgres://")):
        data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
        return Path(data_home) / "seamline" / "store.db"
    return Path(where).expanduser()
