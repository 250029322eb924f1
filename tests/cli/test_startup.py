"""Start-up: `seamline --version` and `seamline --help` load no command, a command's
`--help` loads only that command, and nothing loads the shell parser until a shell command
is judged. (Times live in bench/, W6; here only what is imported.)"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

from seamline.cli import main as cli_main
from tests.providers.agent_cli_support import ROOT

PROBE = """
import contextlib, io, sys
from seamline.cli.main import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main(sys.argv[1:])
    except SystemExit:
        pass
from seamline.cli.main import _COMMANDS
loaded = sorted(m for m in _COMMANDS.values() if m in sys.modules)
print(",".join(loaded) or "-", "bashlex" in sys.modules)
"""


def _loaded(*argv: str) -> tuple[list[str], bool]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=60, cwd=ROOT, check=True
    )
    commands, shell_parser = done.stdout.split()
    return ([] if commands == "-" else commands.split(",")), shell_parser == "True"


def test_version_and_help_load_no_command() -> None:
    assert _loaded("--version") == ([], False)
    assert _loaded("--help") == ([], False)


def test_a_commands_help_loads_only_that_command_and_no_shell_parser() -> None:
    commands, shell_parser = _loaded("run", "--help")
    # `run --on temporal`'s flags are the worker command's own.
    assert commands == ["seamline.cli.run_command", "seamline.cli.worker_command"] and not shell_parser
    commands, _ = _loaded("sessions", "--help")
    assert commands == ["seamline.cli.sessions_command"]


def test_the_top_level_summaries_are_each_commands_own_help_line() -> None:
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers()
    for name, module in cli_main._COMMANDS.items():
        assert importlib.import_module(module).add_parser(commands) == name
    own = {action.dest: action.help for action in commands._choices_actions}
    assert own == cli_main.SUMMARIES


def test_judging_a_shell_command_loads_the_parser_and_reads_it() -> None:
    from seamline.tools.shell_parse import read_shell

    reading = read_shell("cd sub && rm -rf x", cwd="/ws")
    assert [c.words[0] for c in reading.commands] == ["cd", "rm"]
    assert "bashlex" in sys.modules
