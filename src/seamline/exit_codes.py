"""The exit codes of every seamline command, in one table: the CLI exits with them, the
pipeline controller maps its outcomes and stop reasons onto them, and docs/cli.md lists
them (``tests/test_exit_codes.py`` holds the three together)."""

from __future__ import annotations

from typing import Final

__all__ = ["EXIT_CODES", "OUTCOME_EXIT_CODES", "STOP_EXIT_CODES"]

#: Outcomes of a turn or run (``complete.outcome``).
OUTCOME_EXIT_CODES: Final[dict[str, int]] = {"completed": 0, "failed": 1, "budget": 3, "aborted": 130}

#: Controller stop reasons of a pipeline run that have a code of their own.
STOP_EXIT_CODES: Final[dict[str, int]] = {"oscillating": 4, "exhausted": 5, "vetoed": 6, "invalid_transition": 7}

#: Everything a command may exit with, by name.
EXIT_CODES: Final[dict[str, int]] = {
    **OUTCOME_EXIT_CODES,
    "usage": 2,
    **STOP_EXIT_CODES,
    "regressed": 8,  # seamline eval --baseline: a variant did worse than its baseline
    "stdout_closed": 141,
    "terminated": 143,
}
