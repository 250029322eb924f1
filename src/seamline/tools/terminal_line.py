"""The last line of the terminal, shared by a live progress display and a permission
question (see :class:`TerminalLine`)."""

from __future__ import annotations

import threading
from typing import Final

__all__ = ["TERMINAL_LINE", "TerminalLine"]


class TerminalLine:
    """The last line of the terminal, which a live progress display (the spinner, redrawn
    every tenth of a second) and a permission question both write to. While a question
    waits for its answer, the display leaves the line alone: the choices stay readable and
    the key typed stays visible. One per process, as the terminal is
    (:data:`TERMINAL_LINE`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.asking = False

    def free(self) -> bool:
        """Whether a display may draw on the line now (call with :attr:`lock` held)."""
        return not self.asking


TERMINAL_LINE: Final = TerminalLine()
