"""The measurement harness every bench target runs under (stdlib only: it runs in the
main .venv for seamline and the floor, and in bench/.venv for the peers).

A target is a module in ``targets/`` that gives the same scripted work to its framework:

- ``NAME`` and ``VERSION``;
- ``tool_run(latency)``: one run of six model calls and five tool calls (``lookup(k0)`` ..
  ``lookup(k4)``, then the answer ``done``) through the framework's public run API, the
  scripted model waiting ``latency`` seconds per call; returns a :class:`RunOutcome`
  counted from what the framework handed back, so a framework that skipped a step fails
  the check. ``async def`` (or a plain ``def`` when ``CONCURRENT = False``: no async API);
- ``stream_run(chunks)``: one response streaming ``chunks`` as text deltas through the
  public streaming API; returns the deltas the caller saw;
- optional ``setup(workdir)`` / ``teardown()`` (seamline opens its SQLite store there).
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import resource
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

MODEL_CALLS = 6
TOOL_CALLS = 5
ANSWER = "done"
PROMPT = "look up k0 to k4"
KEYS = tuple(f"k{i}" for i in range(TOOL_CALLS))
TOOL_OUTPUTS = tuple(key.upper() for key in KEYS)


class CheckFailed(AssertionError):
    """A run did not do the scripted work; its figure would be hollow."""


@dataclass(slots=True)
class RunOutcome:
    """What one tool run gave, as the framework reported it."""

    answer: str
    model_calls: int
    tool_outputs: list[str] = field(default_factory=list)


def lookup_value(key: str) -> str:
    """The tool's work, the same everywhere."""
    return key.upper()


def check_run(outcome: RunOutcome) -> None:
    if outcome.answer != ANSWER or outcome.model_calls != MODEL_CALLS or tuple(outcome.tool_outputs) != TOOL_OUTPUTS:
        raise CheckFailed(
            f"expected answer {ANSWER!r}, {MODEL_CALLS} model calls and tool outputs {list(TOOL_OUTPUTS)};"
            f" got {outcome.answer!r}, {outcome.model_calls} and {outcome.tool_outputs}"
        )


def stream_chunks(n: int) -> list[str]:
    """The deltas of the W3 response: short, distinct enough that a lost or merged one shows."""
    return [f"{i % 10}" for i in range(n)]


def check_stream(seen: Sequence[str], chunks: Sequence[str]) -> None:
    if len(seen) != len(chunks) or "".join(seen) != "".join(chunks):
        raise CheckFailed(f"expected {len(chunks)} deltas, got {len(seen)} ({len(''.join(seen))} characters)")


def _rss_kb() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _reset_peak() -> bool:
    # Writing 5 resets VmHWM (Linux >= 4.0), so the peak is this phase's, not the imports'.
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
            refs.write("5")
        return True
    except OSError:
        return False


def _peak_kb() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


async def _one(target: ModuleType, latency: float) -> RunOutcome:
    outcome: RunOutcome = await target.tool_run(latency)
    return outcome


def w1(target: ModuleType, *, runs: int, reps: int) -> dict[str, Any]:
    """CPU seconds per model call over ``runs`` sequential runs, ``reps`` times."""
    is_async = inspect.iscoroutinefunction(target.tool_run)

    async def many(n: int) -> float:
        started = time.process_time()
        for _ in range(n):
            check_run(await target.tool_run(0.0))
        return time.process_time() - started

    def many_sync(n: int) -> float:
        started = time.process_time()
        for _ in range(n):
            check_run(target.tool_run(0.0))
        return time.process_time() - started

    cpu: list[float] = []
    for rep in range(reps + 1):
        gc.collect()
        spent = asyncio.run(many(runs if rep else 3)) if is_async else many_sync(runs if rep else 3)
        if rep:  # the first pass is a warm-up (lazy imports, caches)
            cpu.append(spent)
    per_call = [c / (runs * MODEL_CALLS) * 1e6 for c in cpu]
    return {"us_per_model_call": statistics.median(per_call), "samples": per_call, "runs": runs}


def w2(target: ModuleType, *, runs: int, latency: float) -> dict[str, Any]:
    """``runs`` concurrent runs: model calls per second, and peak memory per run in flight."""
    if not getattr(target, "CONCURRENT", True) or not inspect.iscoroutinefunction(target.tool_run):
        return {"status": "n/a", "detail": "no asyncio run API"}

    async def main() -> dict[str, Any]:
        check_run(await _one(target, 0.0))  # warm-up
        gc.collect()
        exact = _reset_peak()
        before = _rss_kb()
        collector, stop_watching = _watch_collector()
        cpu = time.process_time()
        started = time.perf_counter()
        outcomes = await asyncio.gather(*(_one(target, latency) for _ in range(runs)))
        wall = time.perf_counter() - started
        cpu = time.process_time() - cpu
        stop_watching()
        peak = _peak_kb()
        for outcome in outcomes:
            check_run(outcome)
        objects = await _objects_per_run(target, runs=runs, latency=latency)
        return {
            "model_calls_per_s": runs * MODEL_CALLS / wall,
            "kb_per_run": max(0, peak - before) / runs,
            "objects_per_run": objects,
            "gc_share_of_cpu": collector[0] / cpu if cpu else 0.0,
            "gc_full_passes": collector[1],
            "wall_s": wall,
            "runs": runs,
            "peak_reset": exact,
        }

    return asyncio.run(main())


def _watch_collector() -> tuple[list[float], Callable[[], None]]:
    """CPU seconds spent in the garbage collector (``process_time``) and its full
    (generation 2) passes, counted until the second value is called."""
    seen = [0.0, 0]
    began = [0.0]

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began[0] = time.process_time()
            return
        seen[0] += time.process_time() - began[0]
        if info["generation"] == 2:
            seen[1] += 1

    gc.callbacks.append(callback)
    return seen, lambda: gc.callbacks.remove(callback)


async def _objects_per_run(target: ModuleType, *, runs: int, latency: float) -> float:
    """Objects the garbage collector tracks per run in flight (``gc.get_objects()``): a
    second batch of ``runs``, not timed (counting allocates and takes time), sampled every
    half model call while it runs; the largest count less the count before, per run."""
    gc.collect()
    baseline = len(gc.get_objects())
    batch = asyncio.gather(*(_one(target, latency) for _ in range(runs)))
    most = 0
    while not batch.done():
        await asyncio.sleep(latency / 2)
        most = max(most, len(gc.get_objects()))
    for outcome in await batch:
        check_run(outcome)
    return max(0, most - baseline) / runs


def w3(target: ModuleType, *, deltas: int, reps: int) -> dict[str, Any]:
    """Deltas per second of one streamed response of ``deltas`` chunks, ``reps`` times."""
    chunks = stream_chunks(deltas)
    warm = stream_chunks(200)
    is_async = inspect.iscoroutinefunction(target.stream_run)
    rates: list[float] = []
    for rep in range(reps + 1):
        use = chunks if rep else warm
        gc.collect()
        started = time.perf_counter()
        seen = asyncio.run(target.stream_run(use)) if is_async else target.stream_run(use)
        wall = time.perf_counter() - started
        check_stream(seen, use)
        if rep:
            rates.append(deltas / wall)
    return {"deltas_per_s": statistics.median(rates), "samples": rates, "deltas": deltas}


def once(target: ModuleType) -> dict[str, Any]:
    """One checked run, for W6's whole-run-in-a-fresh-process figure."""
    if inspect.iscoroutinefunction(target.tool_run):
        check_run(asyncio.run(_one(target, 0.0)))
    else:
        check_run(target.tool_run(0.0))
    return {"ok": True}


def workdir_setup(target: ModuleType, workdir: Path) -> None:
    setup = getattr(target, "setup", None)
    if setup is not None:
        setup(workdir)


def workdir_teardown(target: ModuleType) -> None:
    teardown = getattr(target, "teardown", None)
    if teardown is not None:
        teardown()
