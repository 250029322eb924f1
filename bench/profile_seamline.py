"""Where seamline's time goes on W1, W2 and W3: cProfile's top functions by own time, and
the SQLite store's statements by their share, so a missed target comes with its cause.

    .venv/bin/python bench/profile_seamline.py w1 [--runs 300]
    .venv/bin/python bench/profile_seamline.py w2 [--runs 2000]
    .venv/bin/python bench/profile_seamline.py w3 [--deltas 20000]

``--target seamline_nostore`` profiles the store-off column; ``--sort cumulative`` ranks by
time spent below each function.

The statement breakdown is timed without the profiler (it would inflate Python frames
against C calls); the cProfile table is a second, separate pass.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import gc
import pstats
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "peers"))

import harness  # noqa: E402
from run_peer import load_target  # noqa: E402


def _time_statements(store: Any) -> tuple[collections.Counter[str], collections.Counter[str], Callable[[], None]]:
    """Wrap the store's two statement entry points with timers (by the statement's head);
    the third value puts them back. Private names: if the store renames them, no breakdown."""
    spent: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    run, many = getattr(store, "_run", None), getattr(store, "_executemany", None)
    if run is None or many is None:
        return spent, count, lambda: None

    def timed_run(sql: str, params: Sequence[Any] = ()) -> Any:
        started = time.perf_counter()
        try:
            return run(sql, params)
        finally:
            spent[sql[:50]] += time.perf_counter() - started
            count[sql[:50]] += 1

    def timed_many(sql: str, rows: Sequence[Sequence[Any]]) -> None:
        started = time.perf_counter()
        try:
            many(sql, rows)
        finally:
            spent["(many) " + sql[:43]] += time.perf_counter() - started
            count["(many) " + sql[:43]] += 1

    def restore() -> None:
        store._run, store._executemany = run, many

    store._run, store._executemany = timed_run, timed_many
    return spent, count, restore


def _watch_collector() -> tuple[dict[int, list[Any]], Callable[[], None]]:
    """Count the garbage collector's passes by generation and the wall time they take; the
    second value stops counting."""
    seen: dict[int, list[Any]] = {}
    began: list[float] = [0.0]

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
            return
        entry = seen.setdefault(info["generation"], [0, 0.0])
        entry[0] += 1
        entry[1] += time.perf_counter() - began[0]

    gc.callbacks.append(callback)
    return seen, lambda: gc.callbacks.remove(callback)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workload", choices=("w1", "w2", "w3"))
    parser.add_argument("--runs", type=int, default=0)
    parser.add_argument("--deltas", type=int, default=20_000)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument(
        "--target",
        choices=("seamline", "seamline_nostore", "seamline_agent", "seamline_agent_nostore"),
        default="seamline",
    )
    parser.add_argument("--sort", choices=("tottime", "cumulative"), default="tottime")
    args = parser.parse_args()
    target = load_target(args.target)
    with tempfile.TemporaryDirectory(prefix="seamline-profile-") as tmp:
        target.setup(Path(tmp))
        runs = args.runs or {"w1": 300, "w2": 2000, "w3": 1}[args.workload]
        units = runs * harness.MODEL_CALLS if args.workload != "w3" else args.deltas
        unit = "delta" if args.workload == "w3" else "model call"

        def job() -> Callable[[], Awaitable[None]]:
            async def w1() -> None:
                for _ in range(runs):
                    harness.check_run(await target.tool_run(0.0))

            async def w2() -> None:
                for outcome in await asyncio.gather(*(target.tool_run(0.05) for _ in range(runs))):
                    harness.check_run(outcome)

            async def w3() -> None:
                chunks = harness.stream_chunks(args.deltas)
                harness.check_stream(await target.stream_run(chunks), chunks)

            return {"w1": w1, "w2": w2, "w3": w3}[args.workload]

        asyncio.run(target.tool_run(0.0))  # warm-up
        spent, count, restore = _time_statements(getattr(target, "_store", None))
        collections_seen, stop_watching = _watch_collector()
        started, started_wall = time.process_time(), time.perf_counter()
        asyncio.run(job()())
        cpu, wall = time.process_time() - started, time.perf_counter() - started_wall
        stop_watching()
        restore()
        print(f"{args.workload}: {cpu / units * 1e6:.1f} µs CPU, {wall / units * 1e6:.1f} µs wall per {unit} ({units})")
        # Every container a live run holds is scanned by each full collection: with many runs
        # in flight (W2 at 10,000) the collector can take more CPU than the runs.
        gc_line = ", ".join(f"gen {g}: {n}× {s:.3f} s" for g, (n, s) in sorted(collections_seen.items()))
        print(f"garbage collector: {gc_line or 'no collection'}")
        # Statements run on the event loop's thread: their wall time (I/O included) holds up every run.
        print("store statements (share of wall, µs wall per unit, times per run):" if spent else "(no breakdown)")
        for sql, seconds in spent.most_common(8):
            print(f"  {seconds / wall:6.1%} {seconds / units * 1e6:7.1f} µs {count[sql] / runs:6.1f}×  {sql}")
        profile = cProfile.Profile()
        profile.enable()
        asyncio.run(job()())
        profile.disable()
        target.teardown()
    print(f"\ncProfile, by {'own' if args.sort == 'tottime' else 'cumulative'} time:")
    pstats.Stats(profile).sort_stats(args.sort).print_stats(args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
