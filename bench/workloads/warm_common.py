"""What the two warm-sessions workloads share (``warm_sessions.py`` for Claude Code,
``warm_sessions_codex.py`` for Codex): a turn's figures, the environment the CLIs run in,
the taps that time seamline's own part of a warm turn, and the figures of a run."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from seamline.providers.programs.warm_process import WarmProcess

__all__ = ["MEASURED", "TURNS", "Taps", "Turn", "environment", "figures"]

TURNS = 5
MEASURED = (2, 5)
Turn = tuple[float, float]  # (time to first event, wall), seconds


@contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """``os.environ`` is ``env`` inside (the CLIs and seamline read it), as it was after."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


class Taps:
    """Times a warm turn's hand-over to the CLI (``sent``) and the arrival of the line that
    ends it (``ended``: ``is_end``), so a session can add seamline's own share to ``own``."""

    def __init__(self, is_end: Callable[[bytes], bool]) -> None:
        self.is_end = is_end
        self.sent = self.ended = 0.0
        self.own: list[float] = []
        self._saved = (WarmProcess.begin_turn, WarmProcess.next_line)

    @contextmanager
    def installed(self) -> Iterator[None]:
        begin, next_line = self._saved
        taps = self

        async def tapped_begin(warm: WarmProcess, message: bytes) -> bool:
            sent = await begin(warm, message)
            taps.sent = time.perf_counter()
            return sent

        async def tapped_next(warm: WarmProcess) -> bytes | None:
            line = await next_line(warm)
            if line is not None and taps.is_end(line):
                taps.ended = time.perf_counter()
            return line

        WarmProcess.begin_turn, WarmProcess.next_line = tapped_begin, tapped_next  # type: ignore[method-assign]
        try:
            yield
        finally:
            WarmProcess.begin_turn, WarmProcess.next_line = begin, next_line  # type: ignore[method-assign]


def figures(runs: dict[str, list[list[Turn]]], kinds: Sequence[str], sessions: int) -> dict[str, Any]:
    """Medians of turns 2 and 5 of every kind, in ms, and the ratios the goals read."""

    def median(kind: str, turn: int, which: int) -> float:
        return statistics.median(s[turn - 1][which] for s in runs[kind])

    result: dict[str, Any] = {"sessions": sessions, "turns": TURNS}
    for turn in MEASURED:
        for kind in kinds:
            result[f"turn{turn}_{kind}_first_event_ms"] = round(median(kind, turn, 0) * 1000, 1)
            result[f"turn{turn}_{kind}_wall_ms"] = round(median(kind, turn, 1) * 1000, 1)
        first = {k: result[f"turn{turn}_{k}_first_event_ms"] for k in kinds}
        wall = {k: result[f"turn{turn}_{k}_wall_ms"] for k in kinds}
        result[f"turn{turn}_cold_over_warm_first_event"] = round(first["cold"] / first["warm"], 2)
        result[f"turn{turn}_seamline_cold_over_bare_wall"] = round(wall["cold"] / wall["bare"], 3)
        result[f"turn{turn}_seamline_warm_over_bare_warm_wall"] = round(wall["warm"] / wall["bare_warm"], 3)
        result[f"turn{turn}_bare_over_warm_wall"] = round(wall["bare"] / wall["warm"], 2)
    return result
