"""``seamline run``."""

from __future__ import annotations

import argparse
import asyncio
import sys

from seamline.cli.display import JsonDisplay, TextDisplay
from seamline.cli.main import EXIT_CODES, SeamlineUsage, install_abort_handler, parse_options
from seamline.events import Complete
from seamline.providers.base import ProviderSession
from seamline.providers.registry import create_provider
from seamline.runner import stream
from seamline.sessions.store import SessionStore, default_store_path
from seamline.tools.workspace import Workspace, workspace_tools

__all__ = ["run_command"]


def run_command(args: argparse.Namespace) -> int:
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    if not prompt.strip():
        raise SeamlineUsage("the prompt is empty")
    if args.max_steps < 1:
        raise SeamlineUsage("--max-steps must be at least 1")
    options = parse_options(args.provider_option)
    provider = create_provider(args.provider, model=args.model, options=options)
    workspace = Workspace(args.workspace)
    tools = workspace_tools(workspace)
    if args.allow:
        tools = tools.restrict(args.allow)
    store = None if args.no_store else SessionStore(args.store or default_store_path())
    display = JsonDisplay() if args.json else TextDisplay()
    try:
        return asyncio.run(_drive(args, prompt, provider, workspace, tools, store, display))
    finally:
        display.close()
        if store is not None:
            store.close()


async def _drive(args, prompt, provider, workspace, tools, store, display) -> int:  # type: ignore[no-untyped-def]
    opened: list[ProviderSession] = []

    async def abort() -> None:
        if opened:
            await provider.abort(opened[0])

    install_abort_handler(asyncio.get_running_loop(), abort)
    final: Complete | None = None
    async for event in stream(
        prompt,
        provider=provider,
        workspace=workspace.root,
        store=store,
        tools=tools,
        yes=args.yes,
        max_steps=args.max_steps,
        budget_usd=args.budget_usd,
        on_open=opened.append,
    ):
        display.show(event)
        if isinstance(event, Complete):
            final = event
    if final is None:  # pragma: no cover - the seam guarantees a complete
        return EXIT_CODES["failed"]
    if final.outcome != "completed":
        print(f"seamline: turn {final.outcome} ({final.stop_reason})", file=sys.stderr)
    return EXIT_CODES.get(final.outcome, EXIT_CODES["failed"])
