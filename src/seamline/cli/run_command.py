"""``seamline run``: one turn of an agent on a prompt."""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from pathlib import Path
from typing import Any, Final

from seamline.cli.display import (
    JsonDisplay,
    TextDisplay,
    aclose_events,
    show_journal_scans,
    spin_while,
    stdout_gone,
    turn_ended,
)
from seamline.cli.extension_flags import add_extension_flags, run_extensions
from seamline.cli.main import EXIT_CODES, SeamlineUsage, install_abort_handler
from seamline.cli.otel_command import add_otel_flag, otel_events
from seamline.cli.run_flags import add_fallback_flags, flag_options
from seamline.events import Complete
from seamline.providers.base import Provider, ProviderSession
from seamline.runner import RunOptions, make_provider, stream
from seamline.sessions.portable_store import SessionStore
from seamline.sessions.sqlite_store import open_store
from seamline.tools.workspace import Workspace, workspace_tools
from seamline.worktrees import Worktree, abandon
from seamline.worktrees import create as create_worktree

__all__ = ["add_parser", "run"]

_EPILOG: Final = """\
examples:
  seamline run "How do I add a provider?" --workspace docs
  seamline run --json "What does the store keep?"
  seamline run --provider scripted --provider-option script=demo.yaml --yes "Fix the typo"
  seamline run --worktree --workspace ~/src/app --yes "Add a test for the parser"
  seamline run -p anthropic --fallback openai:gpt-4o-mini --fallback offline "Summarise the log"
  seamline run -p claude-code --record fix.cassette.jsonl --yes "Fix the typo"
  seamline run -p claude-code --replay fix.cassette.jsonl --yes "Fix the typo"
  seamline run -p openai --budget-usd 0.50 --on-budget pause "Refactor the parser"

Without --json the answer goes to stdout and, on a terminal, progress (tools, tokens,
cost) to stderr. With --json every stdout line is one event: the first is `session`,
the last is the only `complete`.

exit codes: 0 completed, 1 failed, 2 usage error, 3 budget reached (or paused at it), 130 aborted
"""


def add_parser(commands: Any) -> str:
    run = commands.add_parser(
        "run",
        help="answer a prompt with an agent (the offline provider by default)",
        description="Run one turn of an agent on PROMPT and stream what it does.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
    )
    run.add_argument("prompt", metavar="PROMPT", help="what to ask; '-' reads it from stdin")
    run.add_argument(
        "--provider",
        "-p",
        default=None,
        metavar="NAME",
        help="backend to use (default: offline); see `seamline providers list`. With --session, another "
        "backend continues the session (a handoff: the transcript is its history)",
    )
    run.add_argument("--model", "-m", metavar="NAME", help="model name, in the provider's own terms")
    run.add_argument(
        "--provider-option",
        "-o",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="provider option; repeatable (see `seamline providers list --options`)",
    )
    run.add_argument("--workspace", "-w", default=".", metavar="DIR", help="folder the tools work in (default: .)")
    run.add_argument(
        "--store",
        metavar="PATH|URL",
        help="session store: a file or postgresql://… (default: $SEAMLINE_STORE or the user data dir)",
    )
    run.add_argument("--no-store", action="store_true", help="keep nothing on disk")
    run.add_argument(
        "--yes", "-y", action="store_true", help="allow tools that write or execute (write_file, edit_file, shell)"
    )
    run.add_argument("--json", action="store_true", help="print one JSON event per line on stdout, nothing else")
    run.add_argument(
        "--max-steps", type=int, default=50, metavar="N", help="most model calls in the turn (default: 50)"
    )
    run.add_argument("--budget-usd", type=float, metavar="USD", help="stop the turn once its cost passes this")
    run.add_argument(
        "--on-budget",
        choices=("fail", "pause"),
        default=None,
        help="what reaching --budget-usd does: fail the turn (default), or pause it before its next model "
        "request (status paused; go on with `seamline runs raise RUN --budget-usd USD`)",
    )
    run.add_argument("--allow", action="append", metavar="TOOL", help="offer only these tools; repeatable")
    add_fallback_flags(run)
    add_extension_flags(run)
    add_otel_flag(run)
    run.add_argument(
        "--sandbox",
        choices=("auto", "bwrap", "container"),
        help="run shell commands isolated (bwrap, or trust the surrounding container) and journal every edit "
        "for `seamline revert`; write and shell tools then need no --yes; an agent CLI runs whole inside "
        "bubblewrap, behind an egress allowlist, or is refused (see docs/sandbox.md)",
    )
    run.add_argument("--sandbox-policy", metavar="FILE", help="sandbox policy file (TOML or JSON); needs --sandbox")
    run.add_argument(
        "--allow-host",
        action="append",
        metavar="HOST[:PORT]",
        help="with --sandbox and an agent CLI: a host the sandboxed program may reach besides its model "
        "endpoint; repeatable",
    )
    run.add_argument(
        "--worktree",
        action="store_true",
        help="work in a new git worktree of the workspace's repository, on a branch of its own from HEAD, with "
        "one commit per turn; then `seamline diff`, `merge` or `discard` (see docs/worktrees.md)",
    )
    run.add_argument(
        "--branch", metavar="NAME", help="with --worktree: the run's branch (default: seamline/<run id[:8]>)"
    )
    run.add_argument(
        "--record",
        metavar="FILE",
        help="record every model exchange of the run to this cassette (an agent CLI through the gateway, or "
        "a model-API provider through its in-process transport; "
        "no key is written; see docs/gateway.md)",
    )
    run.add_argument(
        "--replay",
        metavar="FILE",
        help="answer every model request from this cassette: no network, no key; a request it does not hold "
        "fails the run naming the first field that differs",
    )
    run.add_argument(
        "--session",
        metavar="ID",
        help="continue this stored session (see `seamline sessions list`) instead of a new one",
    )
    run.add_argument(
        "--pipeline",
        metavar="NAME|FILE",
        help="run a pipeline (built in: single, answer-review; or a YAML/JSON file) under the controller",
    )
    from seamline.cli.worker_command import add_durable_flags

    add_durable_flags(run)
    return "run"


def run(args: argparse.Namespace) -> int:
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    if not prompt.strip():
        raise SeamlineUsage("the prompt is empty")
    if args.max_steps < 1:
        raise SeamlineUsage("--max-steps must be at least 1")
    _check_worktree_flags(args)
    _check_fallback_flags(args)
    _check_cassette_flags(args)
    if args.on_budget == "pause" and (args.pipeline or args.on == "temporal"):
        raise SeamlineUsage(
            "--on-budget pause is for a run this process holds: a pipeline pauses under seamline serve "
            "(see docs/cli.md, Budgets that pause)"
        )
    args.handoff = args.session is not None and args.provider is not None  # --session ID --provider P
    args.provider = args.provider or "offline"
    if args.on == "temporal":
        from seamline.cli.worker_command import run_on_temporal

        return run_on_temporal(args, prompt)
    if args.pipeline:
        from seamline.cli.pipelines_command import run_pipeline

        return run_pipeline(args, prompt)
    if args.session:
        return _continue(args, prompt)
    from seamline.cli.sandbox_command import sandbox_for_run

    given = flag_options(args)
    provider = make_provider(given.provider, model=given.model, options=given.options)
    workspace = Workspace(args.workspace)
    store: SessionStore | None = None
    tree: Worktree | None = None
    opened: list[ProviderSession] = []
    try:
        if args.worktree:  # the run works in its worktree: the tools and the sandbox are made there
            store = open_store(args.store)
            tree = create_worktree(args.workspace, run_id=uuid.uuid4().hex, store=store.location, branch=args.branch)
            workspace = Workspace(tree.workspace)
            _say_what_the_worktree_leaves_out(tree)
        if not provider.runs_own_tools or not args.sandbox or _tools_for_a_fallback(given):
            sandbox, journal = sandbox_for_run(args, workspace)  # (None, None) without --sandbox
        else:
            sandbox, journal = None, None  # the program runs its own tools, inside the envelope
        tools = workspace_tools(workspace, sandbox=sandbox, journal=journal)
        # The allowlist (--allow) applies after MCP servers added their tools: see run_extensions.
        if store is None and not args.no_store:
            store = open_store(args.store)
        display: JsonDisplay | TextDisplay = JsonDisplay() if args.json else TextDisplay()
        try:
            given = given.replace(provider=provider, workspace=workspace.root, store=store, tools=tools)
            return asyncio.run(_drive(args, prompt, given, display, tree, opened))
        finally:
            display.close()
    finally:
        if tree is not None and not opened:
            abandon(tree)  # no session recorded it: nothing to merge or discard later
        if store is not None:
            store.close()


def _say_what_the_worktree_leaves_out(tree: Worktree) -> None:
    """A worktree starts from HEAD: say so when the main tree holds changes it will not see."""
    from seamline.worktrees.git import git

    changed = git(["status", "--porcelain", "--untracked-files=no"], cwd=Path(tree.repo), check=False)
    count = len(changed.out.splitlines()) if changed.ok else 0
    if count:
        print(
            f"seamline: note: {tree.repo} has {count} uncommitted change(s); the worktree starts from HEAD "
            "without them (commit or stash them first to include them)",
            file=sys.stderr,
        )


def _check_worktree_flags(args: argparse.Namespace) -> None:
    if not args.worktree:
        if args.branch:
            raise SeamlineUsage("--branch names a worktree run's branch: give --worktree too")
        return
    for flag, given in (
        ("--session", args.session),
        ("--pipeline", args.pipeline),
        ("--no-store", args.no_store),
        ("--on temporal", args.on == "temporal"),
    ):
        if given:
            raise SeamlineUsage(f"--worktree does not go with {flag} (see docs/worktrees.md)")


def _check_fallback_flags(args: argparse.Namespace) -> None:
    if not args.fallback:
        return
    for flag, given in (
        ("--pipeline", args.pipeline),
        ("--no-store", args.no_store),
        ("--on temporal", args.on == "temporal"),
    ):
        if given:
            raise SeamlineUsage(f"--fallback does not go with {flag} (see docs/cli.md, Failover)")


def _tools_for_a_fallback(given: RunOptions) -> bool:
    """Whether a fallback would call seamline's tools (a model API after an agent CLI):
    with --sandbox they are then isolated as for any such backend."""
    from seamline.providers.failover import Fallback
    from seamline.providers.registry import provider_class

    return any(isinstance(f, Fallback) and not provider_class(f.provider).runs_own_tools for f in given.fallback)


def _check_cassette_flags(args: argparse.Namespace) -> None:
    given = "--record" if args.record else "--replay" if args.replay else None
    if given is None:
        return
    if args.record and args.replay:
        raise SeamlineUsage("give --record or --replay, not both")
    for flag, other in (
        ("--session", args.session),
        ("--pipeline", args.pipeline),
        ("--on temporal", args.on == "temporal"),
    ):
        if other:
            raise SeamlineUsage(
                f"{given} does not go with {flag} (a cassette is one new session's; see docs/gateway.md)"
            )


def _continue(args: argparse.Namespace, prompt: str) -> int:
    """``run --session ID``: resume the stored session with this prompt."""
    from seamline.cli.sessions_command import continue_session

    if args.no_store:
        raise SeamlineUsage("--session needs the store; drop --no-store")
    args.id, args.prompt = args.session, prompt
    args.workspace = None if args.workspace == "." else args.workspace
    store = open_store(args.store)
    try:
        return continue_session(store, args, fork=False)
    finally:
        store.close()


async def _drive(
    args: argparse.Namespace,
    prompt: str,
    given: RunOptions,
    display: JsonDisplay | TextDisplay,
    tree: Worktree | None,
    opened: list[ProviderSession],
) -> int:
    provider = given.provider
    assert isinstance(provider, Provider)

    async def abort() -> bool:
        if not opened:
            return False  # nothing to abort yet (MCP servers starting): the run is cancelled
        await opened[-1].provider.abort(opened[-1])  # the latest: a fallback may hold the session now
        return True

    interruption = install_abort_handler(asyncio.get_running_loop(), abort)
    final: Complete | None = None
    store = given.store if isinstance(given.store, SessionStore) else None

    def on_open(session: ProviderSession) -> None:
        opened.append(session)
        show_journal_scans(display, session)

    options = given.replace(**run_extensions(args, Workspace(given.workspace), yes=given.yes, store=store)).replace(
        on_open=on_open, worktree=tree or False
    )
    events = stream(prompt, options)
    reader_gone = False
    cannot_write: OSError | None = None
    flow = spin_while(display, otel_events(args, events, prompt=prompt))
    try:
        try:
            async for event in flow:
                if isinstance(event, Complete):
                    final = event
                if reader_gone:
                    continue
                try:
                    display.show(event)
                except OSError as exc:
                    # `| head`: nobody reads the rest; a full disk: nothing more can be written.
                    # The turn is aborted like a Ctrl-C (what streamed is kept in the store);
                    # a reader gone ends the command quietly, a failed write says why.
                    reader_gone = True
                    cannot_write = None if isinstance(exc, BrokenPipeError) else exc
                    stdout_gone()
                    if opened and final is None:
                        await opened[-1].provider.abort(opened[-1])
        finally:
            await aclose_events(flow)
    except asyncio.CancelledError:
        if interruption.reason is None:
            raise
        # Everything the run started was ended on the way out; say how the turn ended (once).
        ended = Complete(outcome="aborted", stop_reason=interruption.reason)
        display.show(ended)
        turn_ended(ended, max_steps=args.max_steps, display=display)
        return interruption.exit_code
    if cannot_write is not None:
        print(
            f"seamline: cannot write the output: {cannot_write.strerror or cannot_write}; the turn was stopped",
            file=sys.stderr,
        )
        return EXIT_CODES["failed"]
    if reader_gone:
        return EXIT_CODES["stdout_closed"]
    if final is None:  # pragma: no cover - the seam guarantees a complete
        return EXIT_CODES["failed"]
    turn_ended(final, max_steps=args.max_steps, display=display)
    if tree is not None and sys.stderr.isatty():
        short = tree.run_id[:12]
        print(
            f"seamline: worktree {tree.path} on branch {tree.branch}; next: seamline diff|merge|discard {short}",
            file=sys.stderr,
        )
    return EXIT_CODES.get(final.outcome, EXIT_CODES["failed"])
