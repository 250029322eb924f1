"""How to install what an optional feature needs, said the way that works for this install:
``pip install 'seamline[EXTRA]'`` for an installed package, or the checkout's own
``.venv/bin/pip install -e '.[EXTRA]'`` when seamline runs from a source clone (where the
first would fetch a second copy from the registry, or nothing at all)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["install_hint"]


def _checkout() -> Path | None:
    """The source clone this seamline runs from (``src/seamline`` beside a pyproject), if any."""
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file() and (root / "src" / "seamline").is_dir():
        return root
    return None


def install_hint(extra: str) -> str:
    """The command that installs the ``extra`` of seamline here."""
    root = _checkout()
    if root is None:
        return f"pip install 'seamline[{extra}]'"
    venv_pip = root / ".venv" / "bin" / "pip"
    running_there = Path(sys.prefix).resolve() == (root / ".venv").resolve()
    pip = ".venv/bin/pip" if venv_pip.exists() and running_there else f"{Path(sys.executable).name} -m pip"
    where = "" if Path(os.getcwd()).resolve() == root else f"cd {root} && "
    return f"{where}{pip} install -e '.[{extra}]'"
