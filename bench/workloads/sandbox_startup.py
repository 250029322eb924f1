"""Sandbox start-up: one sandboxed shell call against the same command run directly.

Both sides go through the same bounded runner (process group, output cap, wall limit);
the sandboxed side adds the pids cgroup, bubblewrap's namespaces and mounts, and prlimit.
Also measured: the command guard per command, and the journal's workspace scan around a
shell call on a workspace of 200 small files. Each side checks the command's output.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from seamline.sandbox import EditJournal, SandboxPolicy, open_sandbox
from seamline.sandbox.process import run_bounded

COMMAND = "echo sandboxed-hello"


def _median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 3)


async def _measure(reps: int, root: Path) -> dict[str, Any]:
    ws = root / "ws"
    ws.mkdir()
    for i in range(200):
        (ws / f"f{i:03}.txt").write_text(f"file {i}\n" * 20)
    sandbox = open_sandbox("bwrap", workspace=ws, outputs=root / "out", policy=SandboxPolicy())
    direct: list[float] = []
    boxed: list[float] = []
    for _ in range(reps):
        started = time.perf_counter()
        plain = await run_bounded(
            ["/bin/sh", "-c", COMMAND], env={"PATH": "/usr/bin:/bin"}, cwd=ws, wall_s=30, output_bytes=10_000
        )
        direct.append(time.perf_counter() - started)
        started = time.perf_counter()
        inside = await sandbox.run_shell(COMMAND)
        boxed.append(time.perf_counter() - started)
        if plain.output != b"sandboxed-hello\n" or inside != "exit code 0\nsandboxed-hello\n":
            raise RuntimeError(f"wrong output: {plain.output!r} / {inside!r}")
    guard_runs = reps * 100
    started = time.perf_counter()
    for _ in range(guard_runs):
        sandbox.guard.check("grep -rn TODO src | sort | head -20 > /workspace/todo.txt")
    guard_us = (time.perf_counter() - started) / guard_runs * 1e6
    journal = EditJournal(root / "j.db")
    scans: list[float] = []
    for i in range(reps):
        started = time.perf_counter()
        with journal.track(run_id="bench", workspace=ws, tool="shell", call_id=f"c{i}"):
            (ws / "f000.txt").write_text(f"changed {i}\n")
        scans.append(time.perf_counter() - started)
    journal.close()
    if len(journal_steps := EditJournal(root / "j.db").steps("bench")) != reps:
        raise RuntimeError(f"journal recorded {len(journal_steps)} steps, expected {reps}")
    d, b = _median_ms(direct), _median_ms(boxed)
    return {
        "direct_ms": d,
        "bwrap_ms": b,
        "ratio": round(b / d, 1) if d else None,
        "guard_us": round(guard_us, 1),
        "journal_scan_200_files_ms": _median_ms(scans),
    }


def run(*, quick: bool = False) -> dict[str, Any]:
    """Median times of ``reps`` calls each way; ``ratio`` is sandboxed over direct."""
    reps = 5 if quick else 40
    with tempfile.TemporaryDirectory(prefix="seamline-bench-sandbox-") as tmp:
        result = asyncio.run(_measure(reps, Path(tmp)))
    result["reps"] = reps
    return result
