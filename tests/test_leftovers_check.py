"""The leftovers check (tests/leftovers.py) blames the work for what the work left, not for
a server another test of the same worker started before it (the Temporal dev server of a
session fixture failed the many-roles tests in a full run)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.leftovers import Leftovers

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def _settled(watch: Leftovers, wanted: int) -> list[str]:
    deadline = time.monotonic() + 60
    while len(found := watch.problems()) != wanted and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def test_a_process_from_before_the_baseline_is_not_a_leftover_and_one_from_the_work_is() -> None:
    earlier = subprocess.Popen(SLEEPER, start_new_session=True)
    left: subprocess.Popen[bytes] | None = None
    try:
        watch = Leftovers()
        watch.baseline()
        ended = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
        watch.watch()
        ended.wait()
        watch.watch()
        assert _settled(watch, 0) == []
        left = subprocess.Popen(SLEEPER, start_new_session=True)
        watch.watch()
        problems = _settled(watch, 1)
        assert len(problems) == 1 and problems[0].startswith(f"process left: {left.pid}:"), problems
    finally:
        for proc in (earlier, left):
            if proc is not None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
