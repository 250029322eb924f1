"""``seamline``: run agents on any backend from the command line.

Exit codes: 0 completed · 1 failed · 2 usage error (bad arguments, unknown provider or
option, unusable store) · 3 stopped at the budget · 130 aborted (Ctrl-C) · 143 terminated
(SIGTERM; what the run started is ended first).
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import importlib
import os
import signal
import sys
from collections.abc import Sequence
from typing import Final, Literal

from seamline.errors import SeamlineError
from seamline.exit_codes import EXIT_CODES

__all__ = ["EXIT_CODES", "main"]  # EXIT_CODES: the one table, seamline.exit_codes


# Each command lives in its own module with ``add_parser(commands)`` and ``run(args)``;
# adding a command is one module and one line here. Only the named command's module is
# imported (start-up time); help and mistakes load them all.
_COMMANDS: Final[dict[str, str]] = {
    "run": "seamline.cli.run_command",
    "providers": "seamline.cli.providers_command",
    "sandbox": "seamline.cli.sandbox_command",
    "revert": "seamline.cli.revert_command",
    "diff": "seamline.cli.diff_command",
    "merge": "seamline.cli.merge_command",
    "discard": "seamline.cli.discard_command",
    "race": "seamline.cli.race_command",
    "eval": "seamline.cli.eval_command",
    "watch": "seamline.cli.watch_command",
    "sessions": "seamline.cli.sessions_command",
    "pipelines": "seamline.cli.pipelines_command",
    "trace": "seamline.cli.trace_command",
    "permissions": "seamline.cli.permissions_command",
    "acp": "seamline.cli.acp_command",
    "mcp": "seamline.cli.mcp_command",
    "serve": "seamline.cli.serve_command",
    "worker": "seamline.cli.worker_command",
    "users": "seamline.cli.users_command",
    "runs": "seamline.cli.runs_command",
}


# What each command is, for the top-level help, which then imports no command at all
# (tests/cli/test_startup.py holds it equal to each command's own help line).
SUMMARIES: Final[dict[str, str]] = {
    "run": "answer a prompt with an agent (the offline provider by default)",
    "providers": "list backends and check that they are ready",
    "sandbox": "check what isolation this machine can give the file and shell tools",
    "revert": "undo the workspace changes of a run (journaled with --sandbox)",
    "diff": "show a worktree run's changes against the commit it started from",
    "merge": "merge a worktree run's branch into the branch it started from",
    "discard": "remove a worktree run's worktree and branch",
    "race": "run one task on several backends at once, each in its own worktree; rank them, merge the best",
    "eval": "evaluate agents on a dataset of tasks: pass rates, pass@k, cost per pass",
    "watch": "every live and recent run at a glance: status, branch, tokens, cost",
    "sessions": "list, inspect, resume, fork, export and remove stored sessions",
    "pipelines": "list and show pipeline definitions",
    "trace": "show, verify, replay, re-drive and export run traces",
    "permissions": "list, add and remove permission rules (allow, deny, ask)",
    "acp": "serve as an ACP agent on stdio (for Zed, JetBrains, Toad and other ACP clients)",
    "mcp": "serve as an MCP server: declared agents and pipelines as tools (stdio or HTTP)",
    "serve": "serve the HTTP API v1 (AG-UI streams) and the web page",
    "worker": "serve durable runs from a Temporal task queue",
    "users": "add, list and remove the users of seamline serve (tokens and roles)",
    "runs": "raise the budget of a run that paused at it, and go on with it",
}


def full_parser() -> argparse.ArgumentParser:
    """The parser with every command loaded (for the docs and the tests)."""
    return _parser(["--help"], load_all=True)[0]


def _parser(argv: Sequence[str], *, load_all: bool = False) -> tuple[argparse.ArgumentParser, dict[str, str]]:
    parser = argparse.ArgumentParser(
        prog="seamline",
        description="Run agents on any backend: one event vocabulary, sessions, cost, tools.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Run `seamline COMMAND --help` for the options of a command.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    named = next((a for a in argv if not a.startswith("-")), None)
    owners: dict[str, str] = {}
    if named not in _COMMANDS and not load_all:
        # No command named (--version, --help, a mistake): the summaries, no command loaded.
        for name, summary in SUMMARIES.items():
            commands.add_parser(name, help=summary)
        return parser, owners
    for module_name in list(_COMMANDS.values()) if load_all else [_COMMANDS[str(named)]]:
        module = importlib.import_module(module_name)
        owners[module.add_parser(commands)] = module_name
    for name, command in commands.choices.items():
        lend_examples(name, command)
    return parser, owners


def lend_examples(name: str, command: argparse.ArgumentParser) -> None:
    """Give each subcommand's ``--help`` the examples of its own that the command's help
    lists (``seamline sessions show …`` for ``sessions show``), so no leaf shows bare
    placeholders without an example."""
    examples = [ln for ln in (command.epilog or "").splitlines() if ln.startswith("  seamline ")]
    for action in command._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for leaf_name, leaf in action.choices.items():
            if "examples:" in (leaf.epilog or ""):
                continue
            own = [ln for ln in examples if ln.split()[1:3] == [name, leaf_name]]
            if own:
                leaf.epilog = "\n".join(["examples:", *own, ""]) + (f"\n{leaf.epilog}" if leaf.epilog else "")
                leaf.formatter_class = argparse.RawDescriptionHelpFormatter


def parse_options(pairs: Sequence[str]) -> dict[str, str]:
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SeamlineUsage(f"--provider-option takes KEY=VALUE, got {pair!r}")
        options[key.strip()] = value
    return options


class SeamlineUsage(Exception):
    """A mistake in the command line: reported as one line, exit code 2."""


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    parser, owners = _parser(arguments)
    for module_name in owners.values():
        # A command may take a default subcommand (``seamline eval FILE`` is ``eval run FILE``).
        rewrite = getattr(importlib.import_module(module_name), "rewrite_argv", None)
        if rewrite is not None:
            arguments = rewrite(arguments)
    args = parser.parse_args(arguments)
    if args.version:
        from seamline._version import __version__

        print(f"seamline {__version__}")
        return 0
    if args.command is None:
        parser.print_help()
        return EXIT_CODES["usage"]
    try:
        module = importlib.import_module(owners[args.command])
        return int(module.run(args))
    except SeamlineUsage as exc:
        print(f"seamline: {_one_line(str(exc))}", file=sys.stderr)
        return EXIT_CODES["usage"]
    except SeamlineError as exc:
        print(f"seamline: {exc.kind} error: {_one_line(exc.message)}", file=sys.stderr)
        # The store named is unusable: a usage error, as docs/cli.md says.
        return EXIT_CODES["usage"] if exc.kind in ("invalid_request", "storage") else EXIT_CODES["failed"]
    except KeyboardInterrupt:
        print("seamline: interrupted", file=sys.stderr)
        return EXIT_CODES["aborted"]
    except asyncio.CancelledError:
        # SIGTERM cancelled a command's run (see install_abort_handler); its finally blocks ran.
        return EXIT_CODES["terminated"]
    except BrokenPipeError:
        # The reader went away (`| head`): end quietly, as Unix tools do on SIGPIPE.
        from seamline.cli.display import stdout_gone

        stdout_gone()
        return EXIT_CODES["stdout_closed"]
    except OSError as exc:
        if exc.errno not in _NO_ROOM or os.environ.get("SEAMLINE_DEBUG"):
            return _internal_error(exc)
        # A full disk (`> /dev/full`, a quota): say so once; what is still buffered for
        # stdout goes nowhere rather than failing again at exit.
        from seamline.cli.display import stdout_gone

        stdout_gone()
        print(f"seamline: cannot write {exc.filename or 'the output'}: {exc.strerror}", file=sys.stderr)
        return EXIT_CODES["failed"]
    except Exception as exc:  # noqa: BLE001 - the last word: one line, never a traceback
        return _internal_error(exc)


_NO_ROOM: Final = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def _internal_error(exc: Exception) -> int:
    """An error nobody classified: one line (``SEAMLINE_DEBUG=1`` raises it instead)."""
    if os.environ.get("SEAMLINE_DEBUG"):
        raise exc
    print(
        f"seamline: internal error: {type(exc).__name__}: {_one_line(str(exc))} (SEAMLINE_DEBUG=1 shows the traceback)",
        file=sys.stderr,
    )
    return EXIT_CODES["failed"]


def _one_line(text: str) -> str:
    from seamline.cli.display import one_line

    return one_line(text)


class Interruption:
    """Why a signal cancelled the run, if one did: ``aborted`` (Ctrl-C before there was a
    turn to abort: MCP servers starting, a session opening) or ``terminated`` (SIGTERM)."""

    def __init__(self, task: asyncio.Task[object] | None) -> None:
        self.task = task
        self.reason: Literal["aborted", "terminated"] | None = None

    def cancel(self, reason: Literal["aborted", "terminated"]) -> None:
        """Cancel the run's task: every ``finally`` runs, so shell children and MCP servers
        are ended by the code that started them."""
        if self.reason != "terminated":
            self.reason = reason
        if self.task is not None:
            self.task.cancel()

    @property
    def exit_code(self) -> int:
        return EXIT_CODES["terminated"] if self.reason == "terminated" else EXIT_CODES["aborted"]


def install_abort_handler(loop: asyncio.AbstractEventLoop, abort: object) -> Interruption:
    """First Ctrl-C asks the turn to abort cleanly; the second one interrupts at once.

    ``abort()`` returning False means there was no turn to abort yet: the run is cancelled
    instead. SIGTERM cancels the run at once. The returned :class:`Interruption` says why.
    """
    presses = 0
    interruption = Interruption(asyncio.current_task(loop))

    async def first_abort() -> None:
        if callable(abort) and await abort() is False:
            interruption.cancel("aborted")

    def handle() -> None:
        nonlocal presses
        presses += 1
        if presses == 1 and callable(abort):
            print("\nseamline: aborting (Ctrl-C again to stop at once)", file=sys.stderr)
            loop.create_task(first_abort())
        else:
            raise KeyboardInterrupt

    def terminate() -> None:
        print("seamline: terminated (SIGTERM); ending what the run started", file=sys.stderr)
        interruption.cancel("terminated")

    try:
        loop.add_signal_handler(signal.SIGINT, handle)
        loop.add_signal_handler(signal.SIGTERM, terminate)
    except (NotImplementedError, RuntimeError):  # pragma: no cover - not on this platform
        pass
    return interruption


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
