"""Where an agent program (``claude``, ``codex``, ``gemini``, ``opencode``) is found.

The project's set-up installs the pinned CLIs with npm under ``.tools/*/node_modules/.bin``
of the checkout (see ``scripts/system/``), which is not on anyone's PATH. The search order:
PATH, then ``$SEAMLINE_AGENT_CLIS`` (folders, ``:``-separated), then the virtual
environment's ``bin``, then the ``.tools`` of the checkout this package runs from. Only
folders fixed by the installation are searched, never the working directory.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Final, NamedTuple

__all__ = ["FoundProgram", "PROGRAMS_ENV", "find_program", "searched_places"]

PROGRAMS_ENV: Final = "SEAMLINE_AGENT_CLIS"
# src/seamline/providers/programs/lookup.py -> the checkout (an editable install)
_CHECKOUT: Final = Path(__file__).resolve().parents[4]
_TOOL_SETS: Final = ("agent-clis", "acp-opencode")


class FoundProgram(NamedTuple):
    path: str
    where: str  # how it was found, for `providers check`: "on PATH", "in …"


def _places() -> list[tuple[Path, str]]:
    places: list[tuple[Path, str]] = []
    for folder in os.environ.get(PROGRAMS_ENV, "").split(os.pathsep):
        if folder:
            places.append((Path(folder).expanduser(), f"in ${PROGRAMS_ENV}"))
    places.append((Path(sys.prefix) / "bin", "in the virtual environment"))
    for tool_set in _TOOL_SETS:
        places.append(
            (_CHECKOUT / ".tools" / tool_set / "node_modules" / ".bin", "in the project's .tools (scripts/setup --dev)")
        )
    return places


def searched_places(name: str) -> str:
    """Where :func:`find_program` looked, in words, for a 'not found' message."""
    return f"{name} is not on PATH, in ${PROGRAMS_ENV}, the virtual environment or the project's .tools"


def find_program(name: str) -> FoundProgram | None:
    """The program ``name``: on PATH, else in the places the installation fixes."""
    on_path = shutil.which(name)
    if on_path is not None:
        return FoundProgram(on_path, "on PATH")
    for folder, where in _places():
        candidate = folder / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return FoundProgram(str(candidate), where)
    return None
