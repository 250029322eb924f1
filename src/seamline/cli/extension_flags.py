"""The extension flags of ``seamline run``: ``--module``, ``--mcp-config``, and the
permission service behind ``--yes`` and the terminal prompt."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from seamline.runner import RunFields
from seamline.sessions.portable_store import SessionStore
from seamline.sessions.rules import permission_service
from seamline.stages.builder import AgentBuilder
from seamline.stages.modules import load_module
from seamline.tools.mcp import McpModule
from seamline.tools.permissions import PermissionService, TerminalPrompter
from seamline.tools.workspace import Workspace

__all__ = ["add_extension_flags", "cli_approval", "run_extensions"]


def add_extension_flags(parser: Any) -> None:
    parser.add_argument(
        "--module",
        action="append",
        default=[],
        metavar="NAME",
        help="use this module (built-in, e.g. masking, or from the seamline.modules entry points); repeatable",
    )
    parser.add_argument(
        "--mcp-config",
        action="append",
        default=[],
        metavar="FILE",
        help="MCP servers (JSON, mcpServers); merged over the user's file (and the workspace's .mcp.json); repeatable",
    )
    parser.add_argument(
        "--project-mcp",
        action="store_true",
        help="also load the workspace's .mcp.json (its servers are programs the repository names; off by default)",
    )


def _notice(message: str) -> None:
    print(f"seamline: warning: {message}", file=sys.stderr)


def cli_approval(store: SessionStore | None, workspace: Workspace, *, yes: bool) -> PermissionService:
    """The permission service of every command that runs tools: the store's rules, hard
    denials, ``--yes``, and a terminal prompt when there is a terminal."""
    prompter = TerminalPrompter() if sys.stdin.isatty() and sys.stderr.isatty() else None
    return permission_service(store=store, workspace=workspace.root, yes=yes, prompter=prompter)


def run_extensions(
    args: argparse.Namespace, workspace: Workspace, *, yes: bool, store: SessionStore | None
) -> RunFields:
    """Run options (:class:`seamline.runner.RunOptions`) of these flags: builder, approval,
    allowlist, notices."""
    builder = AgentBuilder()
    for name in getattr(args, "module", None) or []:
        builder.use(load_module(name))
    project = bool(getattr(args, "project_mcp", False))
    mcp = McpModule.load(
        workspace=workspace.root, files=getattr(args, "mcp_config", None) or [], workspace_file=project
    )
    if not project and (workspace.root / ".mcp.json").is_file():
        _notice(
            "the workspace's .mcp.json was not loaded: its servers are programs the repository names. "
            "Load it with --project-mcp (or --mcp-config .mcp.json) once you trust them"
        )
    if mcp.source.servers:
        builder.use(mcp)
    approval = cli_approval(store, workspace, yes=yes)
    return {"builder": builder, "approval": approval, "allow": args.allow, "on_notice": _notice}
