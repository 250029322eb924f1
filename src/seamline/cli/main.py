"""``seamline``: run agents on any backend from the command line.

Exit codes: 0 completed · 1 failed · 2 usage error (bad arguments, unknown provider or
option, unusable store) · 3 stopped at the budget · 130 aborted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence
from typing import Final

from seamline.errors import SeamlineError

__all__ = ["EXIT_CODES", "main"]

EXIT_CODES: Final[dict[str, int]] = {"completed": 0, "failed": 1, "usage": 2, "budget": 3, "aborted": 130}

_EPILOG_RUN: Final = """\
examples:
  seamline run "How do I add a provider?" --workspace docs
  seamline run --json "What does the store keep?"
  seamline run --provider scripted --provider-option script=demo.yaml --yes "Fix the typo"

Without --json the answer goes to stdout and, on a terminal, progress (tools, tokens,
cost) to stderr. With --json every stdout line is one event: the first is `session`,
the last is the only `complete`.

exit codes: 0 completed, 1 failed, 2 usage error, 3 budget reached, 130 aborted
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="seamline",
        description="Run agents on any backend: one event vocabulary, sessions, cost, tools.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Run `seamline COMMAND --help` for the options of a command.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = commands.add_parser(
        "run",
        help="answer a prompt with an agent (the offline provider by default)",
        description="Run one turn of an agent on PROMPT and stream what it does.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG_RUN,
    )
    run.add_argument("prompt", metavar="PROMPT", help="what to ask; '-' reads it from stdin")
    run.add_argument("--provider", "-p", default="offline", metavar="NAME", help="backend to use (default: offline); see `seamline providers list`")
    run.add_argument("--model", "-m", metavar="NAME", help="model name, in the provider's own terms")
    run.add_argument(
        "--provider-option", "-o", action="append", default=[], metavar="KEY=VALUE",
        help="provider option; repeatable (see `seamline providers list --options`)",
    )
    run.add_argument("--workspace", "-w", default=".", metavar="DIR", help="folder the tools work in (default: .)")
    run.add_argument("--store", metavar="PATH", help="session store file (default: $SEAMLINE_STORE or the user data dir)")
    run.add_argument("--no-store", action="store_true", help="keep nothing on disk")
    run.add_argument("--yes", "-y", action="store_true", help="allow tools that write or execute (write_file, edit_file, shell)")
    run.add_argument("--json", action="store_true", help="print one JSON event per line on stdout, nothing else")
    run.add_argument("--max-steps", type=int, default=50, metavar="N", help="most model calls in the turn (default: 50)")
    run.add_argument("--budget-usd", type=float, metavar="USD", help="stop the turn once its cost passes this")
    run.add_argument("--allow", action="append", metavar="TOOL", help="offer only these tools; repeatable")

    providers = commands.add_parser("providers", help="list backends and check that they are ready")
    pcmds = providers.add_subparsers(dest="providers_command", metavar="SUBCOMMAND")
    plist = pcmds.add_parser("list", help="every provider, with its capabilities")
    plist.add_argument("--json", action="store_true", help="one JSON object per provider")
    plist.add_argument("--options", action="store_true", help="also list each provider's options")
    pcheck = pcmds.add_parser("check", help="preflight: is a provider ready, and if not, what fixes it")
    pcheck.add_argument("name", nargs="?", metavar="NAME", help="one provider (default: all)")
    pcheck.add_argument("--model", "-m", metavar="NAME")
    pcheck.add_argument("--provider-option", "-o", action="append", default=[], metavar="KEY=VALUE")
    pcheck.add_argument("--json", action="store_true")
    return parser


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
    parser = _parser()
    args = parser.parse_args(argv)
    if args.version:
        from seamline import __version__

        print(f"seamline {__version__}")
        return 0
    try:
        if args.command == "run":
            from seamline.cli.run_command import run_command

            return run_command(args)
        if args.command == "providers":
            from seamline.cli.providers_command import providers_command

            if args.providers_command is None:
                parser.parse_args(["providers", "--help"])
            return providers_command(args)
        parser.print_help()
        return EXIT_CODES["usage"]
    except SeamlineUsage as exc:
        print(f"seamline: {exc}", file=sys.stderr)
        return EXIT_CODES["usage"]
    except SeamlineError as exc:
        print(f"seamline: {exc.kind} error: {exc.message}", file=sys.stderr)
        return EXIT_CODES["usage"] if exc.kind == "invalid_request" else EXIT_CODES["failed"]
    except KeyboardInterrupt:
        print("seamline: interrupted", file=sys.stderr)
        return EXIT_CODES["aborted"]
    except BrokenPipeError:
        return EXIT_CODES["failed"]


def install_abort_handler(loop: asyncio.AbstractEventLoop, abort: object) -> None:
    """First Ctrl-C asks the turn to abort cleanly; the second one interrupts at once."""
    presses = 0

    def handle() -> None:
        nonlocal presses
        presses += 1
        if presses == 1 and callable(abort):
            print("\nseamline: aborting (Ctrl-C again to stop at once)", file=sys.stderr)
            loop.create_task(abort())
        else:
            raise KeyboardInterrupt

    try:
        loop.add_signal_handler(signal.SIGINT, handle)
    except (NotImplementedError, RuntimeError):  # pragma: no cover - not on this platform
        pass


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
