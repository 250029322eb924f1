"""W6 start-up: cold import, and a whole run in a fresh process.

- import: in-process time of ``import <package>`` in a fresh interpreter (median);
- one run: wall time of a fresh process doing one checked W1 run (run_peer.py ... once),
  the same for every target, interpreter start included;
- ``seamline run --provider offline``: the real CLI, cold, store in a temporary folder;
- ``seamline --version``, ``--help`` and ``run --help`` beside a bare interpreter importing
  asyncio (the goal: at most three times that).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from peers import launch


def _cli_run(reps: int) -> dict[str, Any]:
    cli = Path(sys.executable).with_name("seamline")
    with tempfile.TemporaryDirectory(prefix="seamline-bench-w6-") as tmp:
        env = {**os.environ, "SEAMLINE_STORE": str(Path(tmp) / "store.db")}
        command = [str(cli), "run", "--provider", "offline", "What is in this folder?"]
        result = launch.timed_process(command, reps=reps, env=env, cwd=Path(tmp))
        if result["status"] == "ok" and not (Path(tmp) / "store.db").exists():
            result = {"status": "error", "detail": "seamline run left no session store"}
    return result


# Commands a user (and the test suite) starts many times; the floor is a bare interpreter
# importing asyncio, started the same way.
_COMMANDS: dict[str, tuple[str, ...]] = {
    "w6_cli_version_ms": ("--version",),
    "w6_cli_help_ms": ("--help",),
    "w6_cli_run_help_ms": ("run", "--help"),
}


def _cli_commands(reps: int) -> list[dict[str, Any]]:
    cli = Path(sys.executable).with_name("seamline")
    floor = launch.timed_process([sys.executable, "-c", "import asyncio"], reps=reps)
    rows = []
    for key, argv in _COMMANDS.items():
        timed = launch.timed_process([str(cli), *argv], reps=reps)
        rows.append(
            launch.metric(
                key,
                f"W6 `seamline {' '.join(argv)}`",
                unit="ms",
                better="lower",
                values={"floor": floor, "seamline": timed},
                field="ms",
                goal="≤ 3× floor",
                note="a fresh process, wall; the floor is `python -c 'import asyncio'`",
            )
        )
    return rows


def run(*, quick: bool = False) -> dict[str, Any]:
    targets, note = launch.targets()
    # the same import and the same run
    targets = [t for t in targets if t not in ("seamline_nostore", "seamline_agent", "seamline_agent_nostore")]
    reps = 1 if quick else 5
    imports = {t: launch.import_ms(t, reps=reps) for t in targets}
    runs = {
        t: launch.timed_process([launch.python_for(t), str(launch.RUN_PEER), t, "once"], reps=reps) for t in targets
    }
    cli = {"seamline": _cli_run(reps)}
    return {
        "repetitions": reps,
        "note": note,
        "metrics": [
            launch.metric(
                "w6_import_ms",
                "W6 cold import",
                unit="ms",
                better="lower",
                values=imports,
                field="ms",
                goal="< 100 ms",
                note="import of " + ", ".join(f"{launch.LABELS[t]}: {launch.IMPORTS[t]}" for t in targets),
            ),
            launch.metric(
                "w6_fresh_run_ms",
                "W6 one run in a fresh process",
                unit="ms",
                better="lower",
                values=runs,
                field="ms",
                note="interpreter start + import + one W1 run, wall",
            ),
            launch.metric(
                "w6_cli_offline_ms",
                "W6 `seamline run --provider offline`",
                unit="ms",
                better="lower",
                values=cli,
                field="ms",
                goal="< 500 ms",
                note="the CLI, cold, wall",
            ),
            *_cli_commands(reps if not quick else 3),
        ],
    }
