"""One table of exit codes: the CLI exits with it, the pipeline controller maps onto it, and
docs/cli.md lists exactly its codes."""

from __future__ import annotations

import re
from pathlib import Path

from seamline import exit_codes
from seamline.cli import main as cli_main
from seamline.pipeline import controller

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def _documented(text: str) -> set[int]:
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| ([0-9][0-9, ]*) \|", section, flags=re.M)
    return {int(code) for row in rows for code in row.split(",")}


def test_the_cli_and_the_controller_read_the_one_table() -> None:
    assert cli_main.EXIT_CODES is exit_codes.EXIT_CODES
    assert controller.STOP_EXIT_CODES is exit_codes.STOP_EXIT_CODES
    for outcome, code in exit_codes.OUTCOME_EXIT_CODES.items():
        assert controller.exit_code_for(outcome, "end_turn") == code
    for reason, code in exit_codes.STOP_EXIT_CODES.items():
        assert controller.exit_code_for("failed", reason) == code


def test_docs_list_exactly_the_codes() -> None:
    assert _documented(DOC.read_text()) == set(exit_codes.EXIT_CODES.values())
    # The reading itself notices a code missing from the page.
    assert 141 not in _documented(DOC.read_text().replace("| 141 |", "| x141 |"))
