"""Where seamline keeps its files by default: the user's data folder and the store in it.

A plain function of the environment, below every room, so the engine can name a default
folder (the trace's, beside the store) without knowing the store itself.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

__all__ = ["STORE_ENV", "data_home", "default_store_path"]

STORE_ENV: Final = "SEAMLINE_STORE"


def data_home() -> Path:
    """``$XDG_DATA_HOME/seamline``, else ``~/.local/share/seamline``."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "seamline"


def default_store_path() -> Path:
    """``$SEAMLINE_STORE``, else ``store.db`` under the user's data directory."""
    env = os.environ.get(STORE_ENV)
    if env:
        return Path(env).expanduser()
    return data_home() / "store.db"
