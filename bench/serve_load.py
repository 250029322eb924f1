"""`seamline serve` under load: many concurrent streaming runs in one server process,
against one `seamline run` process per run.

    .venv/bin/python bench/serve_load.py                 1,000 runs at once; 40 processes
    .venv/bin/python bench/serve_load.py --quick         50 runs; 6 processes
    .venv/bin/python bench/serve_load.py --runs 2000 --out bench/results/serve.json

Server side: `seamline serve` runs as its own process on 127.0.0.1 (a free port). The
bench opens one session per run (scripted provider: a streamed answer with a tool call,
then a streamed final answer, 50 ms per model call), starts every run at once, and reads
each run's AG-UI stream to RUN_FINISHED, checking it. Figures: runs per second over the
batch (first POST of a run to the last RUN_FINISHED; the sessions are opened before),
time to first event (POST of the run to the first SSE event, p50 and p99), and memory per
run in flight = (server's peak RSS during the batch - its RSS before the runs) / runs, and
the same counted from before the sessions were opened; the peak (VmHWM) is reset before.

Process side: the same script through `seamline run --provider scripted --json`, one
process per run, N at once. Figures: runs per second, time to first event (spawn to the
first JSON line), and the memory one process needs (its peak RSS). 1,000 processes at once
would need 1,000 times that memory; the figure is extrapolated from N, and said so.

The machine has 2 cores shared by the client and the server: the client's own work (1,000
SSE readers in one asyncio loop) is on the same cores, so the server-side figures are a
lower bound of what the server alone does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = [
    {
        "text": "Let me look.",
        "stream": True,
        "delay": 0.05,
        "tool_calls": [{"name": "list_dir", "arguments": {}}],
        "usage": {"input_tokens": 100, "output_tokens": 10, "cost_usd": 0.0001},
    },
    {
        "text": "There is one file here.",
        "stream": True,
        "delay": 0.05,
        "usage": {"input_tokens": 120, "output_tokens": 8, "cost_usd": 0.0001},
    },
]
ANSWER = "There is one file here."


def _rss_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for {pid}")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM to the current RSS


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _env(store: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src")
    env["SEAMLINE_STORE"] = str(store)
    return env


class _Client:
    """A bare HTTP/1.1 client on asyncio streams, a connection per request: the bench's
    own CPU stays small beside the server's on a 2-core machine (a general-purpose client
    spent more per run than the server did)."""

    def __init__(self, base: str) -> None:
        host, _, port = base.removeprefix("http://").partition(":")
        self.host, self.port = host, int(port)

    async def _send(
        self, method: str, path: str, body: Any = None
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, int, dict[str, str]]:
        reader, writer = await asyncio.open_connection(self.host, self.port, limit=1 << 20)
        data = json.dumps(body).encode() if body is not None else b""
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nConnection: close\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
        writer.write(head.encode() + b"\r\n" + data)
        status = int((await reader.readline()).split()[1])
        headers: dict[str, str] = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        return reader, writer, status, headers

    async def json(self, method: str, path: str, body: Any = None) -> Any:
        reader, writer, status, headers = await self._send(method, path, body)
        try:
            data = await reader.readexactly(int(headers["content-length"]))
        finally:
            writer.close()
        if status >= 300:
            raise RuntimeError(f"{method} {path}: {status} {data[:200]!r}")
        return json.loads(data)

    async def sse_data(self, path: str) -> AsyncIterator[bytes]:
        """The ``data:`` payloads of an SSE response (chunked), as they come."""
        reader, writer, status, headers = await self._send("GET", path)
        try:
            if status != 200 or headers.get("transfer-encoding") != "chunked":
                raise RuntimeError(f"GET {path}: {status} {headers}")
            pending = b""
            while size := int((await reader.readline()).split(b";")[0], 16):
                pending += await reader.readexactly(size)
                await reader.readexactly(2)
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.startswith(b"data: "):
                        yield line[6:]
        finally:
            writer.close()


async def _open(client: _Client, script: str) -> str:
    reply = await client.json("POST", "/v1/sessions", {"provider": "scripted", "options": {"script": script}})
    return str(reply["id"])


async def _one_run(client: _Client, session_id: str) -> tuple[float, float]:
    """Start a run on the session and read its AG-UI stream to the end, checking it."""
    started = time.perf_counter()
    run_id = (await client.json("POST", f"/v1/sessions/{session_id}/runs", {"prompt": "what is here?"}))["id"]
    first: float | None = None
    finished: dict[str, Any] | None = None
    async for data in client.sse_data(f"/v1/runs/{run_id}/events"):
        if first is None:
            first = time.perf_counter() - started
        if data.startswith((b'{"type":"RUN_FINISHED"', b'{"type":"RUN_ERROR"')):
            finished = json.loads(data)
    if finished is None or finished["type"] != "RUN_FINISHED" or finished.get("result") != ANSWER:
        raise RuntimeError(f"run {run_id} did not finish as scripted: {finished}")
    assert first is not None
    return first, time.perf_counter()


async def _server_batch(base: str, pid: int, script: str, runs: int) -> dict[str, Any]:
    client = _Client(base)
    # Warm-up: one run, so imports and first-use costs are not billed to the batch.
    await _one_run(client, await _open(client, script))
    before_sessions = _rss_kb(pid, "VmRSS")
    _reset_peak(pid)
    sessions = await asyncio.gather(*(_open(client, script) for _ in range(runs)))
    before = _rss_kb(pid, "VmRSS")
    cpu0, own0 = _cpu_s(pid), time.process_time()
    t0 = time.perf_counter()
    results = await asyncio.gather(*(_one_run(client, session_id) for session_id in sessions))
    elapsed = max(end for _, end in results) - t0
    peak = _rss_kb(pid, "VmHWM")
    server_cpu, client_cpu = _cpu_s(pid) - cpu0, time.process_time() - own0
    firsts = [first for first, _ in results]
    return {
        "runs": runs,
        "runs_per_s": runs / elapsed,
        "wall_s": elapsed,
        "first_event_p50_ms": statistics.median(firsts) * 1000,
        "first_event_p99_ms": _percentile(firsts, 0.99) * 1000,
        "rss_before_sessions_kb": before_sessions,
        "rss_before_runs_kb": before,
        "rss_peak_kb": peak,
        "memory_per_run_kb": (peak - before) / runs,
        "memory_per_session_and_run_kb": (peak - before_sessions) / runs,
        "server_cpu_ms_per_run": server_cpu * 1000 / runs,
        "client_cpu_ms_per_run": client_cpu * 1000 / runs,
    }


def server_side(runs: int, work: Path) -> dict[str, Any]:
    script = work / "script.json"
    script.write_text(json.dumps(SCRIPT))
    (work / "ws").mkdir(exist_ok=True)
    (work / "ws" / "one.txt").write_text("one\n")
    command = [sys.executable, "-m", "seamline", "serve", "--port", "0", "--store", str(work / "serve.db")]
    command += ["--workspace", str(work / "ws")]
    proc = subprocess.Popen(
        command, env=_env(work / "serve.db"), stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        found = re.search(r"serving (http://127\.0\.0\.1:\d+)/", line)
        if not found:
            raise RuntimeError(f"seamline serve did not start: {line!r}")
        return asyncio.run(_server_batch(found.group(1), proc.pid, str(script), runs))
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


async def _process_run(script: Path, work: Path, store: Path) -> tuple[float, float, int]:
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "seamline",
        "run",
        "--provider",
        "scripted",
        "-o",
        f"script={script}",
        "--workspace",
        str(work / "ws"),
        "--json",
        "what is here?",
        env=_env(store),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    first: float | None = None
    last: dict[str, Any] = {}
    errors: list[dict[str, Any]] = []
    async for line in proc.stdout:
        if first is None:
            first = time.perf_counter() - started
        last = json.loads(line)
        if last.get("type") == "error":
            errors.append(last)
    code = await proc.wait()
    if code != 0 or last.get("type") != "complete" or last.get("text") != ANSWER:
        raise RuntimeError(f"seamline run exited {code} with {last}; errors: {errors}")
    assert first is not None
    return first, time.perf_counter(), proc.pid


def process_side(processes: int, work: Path) -> dict[str, Any]:
    script = work / "script.json"
    script.write_text(json.dumps(SCRIPT))
    (work / "ws").mkdir(exist_ok=True)

    async def batch() -> tuple[list[tuple[float, float, int]], float]:
        await _process_run(script, work, work / "warm.db")  # warm-up: file caches
        t0 = time.perf_counter()
        # Each process its own store: concurrent `seamline run` processes on one SQLite
        # store file fail now and then (see docs/serve.md), and a store per run is the
        # kinder setting for the process side anyway.
        runs = (_process_run(script, work, work / f"runs-{i}.db") for i in range(processes))
        results = await asyncio.gather(*runs)
        return results, t0

    results, t0 = asyncio.run(batch())
    elapsed = max(end for _, end, _ in results) - t0
    # The largest peak RSS of any child so far: what one `seamline run` process needs.
    per_process_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    firsts = [first for first, _, _ in results]
    return {
        "runs": processes,
        "runs_per_s": processes / elapsed,
        "wall_s": elapsed,
        "first_event_p50_ms": statistics.median(firsts) * 1000,
        "first_event_p99_ms": _percentile(firsts, 0.99) * 1000,
        "memory_per_run_kb": per_process_kb,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000, help="concurrent runs in the server (default 1000)")
    parser.add_argument("--processes", type=int, default=40, help="concurrent `seamline run` processes (default 40)")
    parser.add_argument("--quick", action="store_true", help="50 runs, 6 processes")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.processes = 50, 6
    with tempfile.TemporaryDirectory(prefix="seamline-serve-bench-") as tmp:
        work = Path(tmp)
        (work / "server").mkdir()
        (work / "process").mkdir()
        # The process side first: its memory figure is the largest peak RSS of any child
        # process so far, and the server, a child too, must not be among them yet.
        process = process_side(args.processes, work / "process")
        server = server_side(args.runs, work / "server")
    ratio_mem = process["memory_per_run_kb"] / server["memory_per_run_kb"] if server["memory_per_run_kb"] > 0 else None
    result = {
        "server": server,
        "process_per_run": process,
        "process_memory_for_server_runs_mb": process["memory_per_run_kb"] * server["runs"] / 1024,
        "memory_ratio": ratio_mem,
        "runs_per_s_ratio": server["runs_per_s"] / process["runs_per_s"],
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    print(f"server: {server['runs']} concurrent streaming runs in one `seamline serve` process")
    print(
        f"  runs/s {server['runs_per_s']:.0f} · first event p50 {server['first_event_p50_ms']:.0f} ms, "
        f"p99 {server['first_event_p99_ms']:.0f} ms · memory per run {server['memory_per_run_kb']:.1f} KB "
        f"({server['memory_per_session_and_run_kb']:.1f} KB with its session)\n"
        f"  CPU per run: server {server['server_cpu_ms_per_run']:.1f} ms, this client {server['client_cpu_ms_per_run']:.1f} ms"
    )
    print(f"processes: {process['runs']} concurrent `seamline run` processes")
    print(
        f"  runs/s {process['runs_per_s']:.1f} · first event p50 {process['first_event_p50_ms']:.0f} ms, "
        f"p99 {process['first_event_p99_ms']:.0f} ms · memory per run {process['memory_per_run_kb'] / 1024:.1f} MB"
    )
    print(
        f"  {server['runs']} runs as processes would need ≈ {result['process_memory_for_server_runs_mb']:.0f} MB "
        f"(extrapolated from {process['runs']} processes)"
    )
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
