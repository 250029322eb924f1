"""Many warm agent-CLI sessions held by one `seamline serve` (issue 44 §2).

    .venv/bin/python bench/many_agents.py                  20 Claude Code + 20 Codex, 3 turns each
    .venv/bin/python bench/many_agents.py --claude 3 --codex 3 --turns 2 --out F

The real pinned CLIs (Claude Code warm: one `claude -p --input-format stream-json` per
session; Codex warm: one `codex app-server` per session) against the fake APIs, which run in
this bench process on 127.0.0.1; `seamline serve` is its own process, the sessions are the
agents of an agents file with the operator's `sandbox = "none"` (the relay below lives
outside what the envelope would show the CLI; tests/server/test_many_sessions.py checks
the envelope's leftovers, at a small size).

Figures, each beside its goal and its floor, measured in the same run:

- **seamline's own memory per live session**: the serve process's RSS and USS (private
  pages, /proc/PID/smaps_rollup) with every session live and warm after its first turn,
  less the same server idle (after a warm-up session of each CLI, opened, run and deleted,
  so that first-use imports are not billed to the sessions), divided by the sessions; the
  peak (VmHWM, reset before) during the measured turns too. The CLI processes are not in it
  (they are separate processes); their own RSS per session is printed beside it.
- **delay from a CLI's line to the client's event** (p50, p99): every CLI runs behind a
  relay (a few lines of Python started as the session's `executable`) that passes its stdin
  through untouched and copies its stdout line by line; right after writing a line, the
  relay stamps it (wall clock, `time.time()`) in a log if it carries the turn's answer (a
  token unique to each scripted answer). The client (this bench, one HTTP connection per
  run, the seamline event stream) stamps each event as it reads it, on the same clock; the
  delay is the first event carrying the token less the relay's stamp of the first line
  carrying it. The floor: the same relay and CLI driven bare by this bench (a warm Claude
  Code process read by asyncio), at the same time as the measured turns. A turn whose
  stream was not yet subscribed when its line came is left out and counted.
- **after they close** (DELETE of each session): processes still running that the server
  started, the server's file descriptors over its idle count, entries left in the runtime
  folder, envelope homes left.

The machine's load (1-minute average) before and after the measured turns is printed: the
machine has 2 cores, shared by the CLIs, the fakes, the server and this client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from bench.serve_load import _Client, _percentile  # noqa: E402  # pyright: ignore[reportPrivateUsage]
from tests.leftovers import descendants, fd_targets  # noqa: E402
from tests.providers.agent_cli_support import TOOLS_BIN, AgentAnthropic, AgentOpenAI  # noqa: E402

GOAL_MEMORY_KB = 2048
GOAL_P99_MS = 50.0
TOKEN = re.compile(rb"tok[0-9]{5}z")
RELAY = r"""
import os, re, subprocess, sys, time
token = re.compile(rb"tok[0-9]{5}z")
log = open(os.path.join(LOGDIR, f"{os.getpid()}.log"), "a", buffering=1)
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, bufsize=0)
out = sys.stdout.buffer
seen = set()
for line in iter(child.stdout.readline, b""):
    out.write(line)
    out.flush()
    stamp = time.time()
    for found in token.findall(line):
        if found not in seen:
            seen.add(found)
            log.write(f"{found.decode()} {stamp:.6f}\n")
sys.exit(child.wait())
"""


def proc_kb(pid: int, name: str, field: str) -> int:
    for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _memory(pid: int) -> dict[str, int]:
    uss = proc_kb(pid, "smaps_rollup", "Private_Clean") + proc_kb(pid, "smaps_rollup", "Private_Dirty")
    return {"rss_kb": proc_kb(pid, "status", "VmRSS"), "uss_kb": uss, "hwm_kb": proc_kb(pid, "status", "VmHWM")}


def _children_rss_kb(pid: int) -> int:
    total = 0
    for child in descendants(pid):
        try:
            total += proc_kb(child, "status", "VmRSS")
        except OSError:
            continue
    return total


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def load_avg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


class Tokens:
    """Unique answer tokens, and the relays' stamps of the lines that carried them."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.n = 0

    def next(self) -> str:
        self.n += 1
        return f"tok{self.n:05d}z"

    def stamps(self) -> dict[str, float]:
        found: dict[str, float] = {}
        for log in self.logdir.glob("*.log"):
            for line in log.read_text().splitlines():
                token, _, stamp = line.partition(" ")
                found.setdefault(token, float(stamp))
        return found


def make_relay(work: Path, name: str, real: Path, logdir: Path) -> Path:
    script = work / "relay.py"
    script.write_text(f"LOGDIR = {str(logdir)!r}\n" + RELAY)
    wrapper = work / f"{name}-relay"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {script} {real} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


async def _run_turn(client: _Client, session_id: str, prompt: str) -> dict[str, Any]:
    """Start a turn and read its seamline event stream to the end, stamping each event."""
    run_id = (await client.json("POST", f"/v1/sessions/{session_id}/runs", {"prompt": prompt}))["id"]
    subscribed = time.time()
    first_token: tuple[str, float] | None = None
    last: dict[str, Any] = {}
    error = ""
    async for data in client.sse_data(f"/v1/runs/{run_id}/events?format=seamline"):
        now = time.time()
        if first_token is None and (found := TOKEN.search(data)):
            first_token = (found.group().decode(), now)
        last = json.loads(data)
        if last.get("type") == "error":
            error = f"{last.get('kind')}: {str(last.get('message'))[:160]}"
    failed = None
    if last.get("type") != "complete" or last.get("outcome") != "completed":
        failed = f"{session_id}: {last.get('outcome')} ({error})"
    return {"subscribed": subscribed, "first_token": first_token, "failed": failed}


async def _bare_claude(
    claude: Path, env: dict[str, str], ws: Path, turns: int, base_url: str
) -> list[tuple[str, float]]:
    """The floor: a warm Claude Code behind the same relay, read by asyncio here."""
    argv = [
        str(claude), "-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose",
        "--model", "claude-sonnet-4-5", "--allowedTools", "Bash,Read",
    ]  # fmt: skip
    bare_env = {**env, "ANTHROPIC_BASE_URL": base_url, "CLAUDE_CODE_MAX_RETRIES": "0", "CLAUDE_CODE_EAGER_FLUSH": "1"}
    proc = await asyncio.create_subprocess_exec(
        *argv, env=bare_env, cwd=ws, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL, limit=1 << 22, start_new_session=True,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    seen: list[tuple[str, float]] = []
    try:
        for n in range(turns):  # the first turn starts the program: like seamline's, not measured
            message = {"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": f"t{n}"}]}}
            proc.stdin.write(json.dumps(message).encode() + b"\n")
            await proc.stdin.drain()
            got = False
            async for line in proc.stdout:
                now = time.time()
                if not got and (found := TOKEN.search(line)):
                    if n:
                        seen.append((found.group().decode(), now))
                    got = True
                if line.startswith(b'{"type":"result"'):
                    break
    finally:
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 20)
        except TimeoutError:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    return seen


def _delays(samples: list[tuple[str, float]], stamps: dict[str, float]) -> list[float]:
    return [(received - stamps[token]) * 1000 for token, received in samples if token in stamps]


def _summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50_ms": statistics.median(values), "p99_ms": _percentile(values, 0.99)}


async def _measure(base: str, pid: int, args: argparse.Namespace, tokens: Tokens, bare: Any) -> dict[str, Any]:
    client = _Client(base)
    # Warm-up: one session of each CLI, one turn, deleted: first-use costs are not billed.
    for agent in ("cc", "cx"):
        sid = (await client.json("POST", "/v1/sessions", {"agent": agent}))["id"]
        warm = await _run_turn(client, sid, "warm up")
        if warm["failed"]:
            raise RuntimeError(f"the warm-up turn failed: {warm['failed']}")
        await client.json("DELETE", f"/v1/sessions/{sid}")
    await asyncio.sleep(1.0)  # the deleted programs' pipes and tasks wind down
    idle = _memory(pid)
    idle_fds = fd_targets(pid)
    agents = ["cc"] * args.claude + ["cx"] * args.codex
    ids = [str((await client.json("POST", "/v1/sessions", {"agent": a}))["id"]) for a in agents]
    failures = [r["failed"] for r in await asyncio.gather(*(_run_turn(client, sid, "first turn") for sid in ids))]
    live = _memory(pid)
    cli_rss = _children_rss_kb(pid)
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    load_before = load_avg()
    cpu_before = _cpu_s(pid)
    samples: list[tuple[str, float, float]] = []
    for n in range(2, args.turns + 1):
        results = await asyncio.gather(*(_run_turn(client, sid, f"turn {n}") for sid in ids))
        for result in results:
            failures.append(result["failed"])
            if result["first_token"] is not None:
                samples.append((*result["first_token"], result["subscribed"]))
    peak = _memory(pid)["hwm_kb"]
    load_after = load_avg()
    server_cpu_ms_per_turn = (_cpu_s(pid) - cpu_before) * 1000 / (len(ids) * (args.turns - 1))
    stamps = tokens.stamps()
    missing = [token for token, _, _ in samples if token not in stamps]
    if missing:
        raise RuntimeError(f"no relay stamp for {missing[:5]}")
    # A stream subscribed after its line came would bill the subscription's wait: left out.
    timely = [(token, received) for token, received, subscribed in samples if stamps[token] >= subscribed]
    late = len(samples) - len(timely)
    delays = _delays(timely, stamps)
    sessions = len(ids)
    for sid in ids:
        await client.json("DELETE", f"/v1/sessions/{sid}")
    closed = await _wait_closed(pid, idle_fds)
    closed["memory_after_close"] = _memory(pid)
    # The floor, once the sessions are gone: as many warm Claude Code processes as seamline
    # held, behind the same relay, their turns at once, read by one asyncio loop here.
    floor_load = load_avg()
    runs = await asyncio.gather(*(bare(args.turns) for _ in range(args.claude)))
    floor = _delays([sample for run in runs for sample in run], tokens.stamps())
    return {
        "sessions": {"claude_code": args.claude, "codex": args.codex, "turns": args.turns},
        "idle": idle,
        "live": live,
        "peak_kb": peak,
        "own_memory_per_session_kb": {
            "rss": (live["rss_kb"] - idle["rss_kb"]) / sessions,
            "uss": (live["uss_kb"] - idle["uss_kb"]) / sessions,
            "peak_rss": (peak - idle["rss_kb"]) / sessions,
            "goal": GOAL_MEMORY_KB,
        },
        "cli_rss_per_session_kb": cli_rss / sessions,
        "line_to_event": {**_summary(delays), "late_subscriptions": late, "goal_p99_ms": GOAL_P99_MS},
        "failed_turns": [f for f in failures if f],
        "floor_line_to_read": {**_summary(floor), "processes": args.claude, "load_before": floor_load},
        "server_cpu_ms_per_turn": server_cpu_ms_per_turn,
        "load": {"before": load_before, "after": load_after},
        "after_close": closed,
    }


async def _wait_closed(pid: int, idle_fds: list[str]) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        left = descendants(pid)
        extra = fd_targets(pid)
        for target in idle_fds:
            if target in extra:
                extra.remove(target)
        if (not left and not extra) or time.monotonic() > deadline:
            # SQLite keeps a closed connection's descriptor while another connection of the
            # process holds the file locked, and reuses it: the sessions' edit-journal
            # connections leave up to one each beside the server's own (see the test).
            journal = [t for t in extra if t.endswith(".edits.db")]
            others = [t for t in extra if not t.endswith(".edits.db")]
            return {
                "processes_left": len(left),
                "journal_fds_kept_by_sqlite": len(journal),
                "other_fds_over_idle": others,
            }
        await asyncio.sleep(0.2)


def _agents_file(work: Path, claude: Path, codex: Path, anthropic: str, openai: str, sandbox: str) -> Path:
    path = work / "agents.toml"
    path.write_text(
        f"""
[agents.cc]
provider = "claude-code"
model = "claude-sonnet-4-5"
sandbox = "{sandbox}"
options = {{ executable = "{claude}", base_url = "{anthropic}", max_retries = "0" }}

[agents.cx]
provider = "codex"
model = "gpt-5.5"
sandbox = "{sandbox}"
options = {{ executable = "{codex}", base_url = "{openai}", max_retries = "0", codex_sandbox = "danger-full-access" }}
"""
    )
    return path


def _cpu_profiler(work: Path) -> Path:
    """A launcher that runs `seamline` under cProfile timed by the main thread's CPU time
    (not the wall clock: on a loaded machine a wall-clock profile bills the waits for a
    core to whatever function was running), its stats written when the server exits."""
    script = work / "cpu_profile.py"
    script.write_text(
        "import cProfile, runpy, sys, time\n"
        "out = sys.argv[1]\n"
        "sys.argv = ['seamline', *sys.argv[2:]]\n"
        "profile = cProfile.Profile(time.thread_time)\n"
        "profile.enable()\n"
        "try:\n"
        "    runpy.run_module('seamline', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "finally:\n"
        "    profile.disable()\n"
        "    profile.dump_stats(out)\n"
    )
    return script


def bench_env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "CODEX_", "CLAUDE"))}
    env.pop("SEAMLINE_BLOCK_REAL_PROVIDERS", None)
    (work / "home" / ".codex").mkdir(parents=True, exist_ok=True)
    (work / "run").mkdir(mode=0o700, exist_ok=True)
    env.update(
        HOME=str(work / "home"),
        CODEX_HOME=str(work / "home" / ".codex"),
        XDG_RUNTIME_DIR=str(work / "run"),
        XDG_DATA_HOME=str(work / "data"),
        ANTHROPIC_API_KEY="sk-ant-bench",
        OPENAI_API_KEY="sk-bench",
        DISABLE_AUTOUPDATER="1",
        NO_COLOR="1",
        PYTHONPATH=str(ROOT / "src"),
    )
    return env


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--claude", type=int, default=20, help="warm Claude Code sessions (default 20)")
    parser.add_argument("--codex", type=int, default=20, help="warm Codex sessions (default 20)")
    parser.add_argument("--turns", type=int, default=3, help="turns per session; the first starts the program")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--profile", type=Path, help="run the server under cProfile (CPU time), its stats here")
    args = parser.parse_args()
    per_claude = 2 * (args.claude * args.turns) + 4  # sessions, floor, warm-up
    per_codex = (args.codex * args.turns) + 4
    with tempfile.TemporaryDirectory(prefix="seamline-many-", dir="/tmp") as tmp:
        work = Path(tmp)
        logdir = work / "stamps"
        logdir.mkdir()
        tokens = Tokens(logdir)
        claude_script = [{"text": f"Claude says {tokens.next()}."} for _ in range(per_claude)]
        codex_script = [{"text": f"Codex says {tokens.next()}."} for _ in range(per_codex)]
        env = bench_env(work)
        (work / "ws").mkdir()
        with AgentAnthropic(claude_script, fallback={"text": "side"}) as anthropic, AgentOpenAI(codex_script) as openai:
            claude = make_relay(work, "claude", TOOLS_BIN / "claude", logdir)
            codex = make_relay(work, "codex", TOOLS_BIN / "codex", logdir)
            agents = _agents_file(work, claude, codex, anthropic.root_url, openai.base_url, "none")
            profiled = [str(_cpu_profiler(work)), str(args.profile)] if args.profile else []
            command = [sys.executable, *(profiled or ["-m", "seamline"]), "serve", "--port", "0"]
            command += ["--store", str(work / "serve.db")]
            command += ["--workspace", str(work / "ws"), "--agents", str(agents)]
            proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
            try:
                assert proc.stderr is not None
                line = proc.stderr.readline()
                found = re.search(r"serving (http://127\.0\.0\.1:\d+)/", line)
                if not found:
                    raise RuntimeError(f"seamline serve did not start: {line!r}")

                async def bare(turns: int) -> list[tuple[str, float]]:
                    return await _bare_claude(claude, env, work / "ws", turns, anthropic.root_url)

                result = asyncio.run(_measure(found.group(1), proc.pid, args, tokens, bare))
            finally:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            runtime_left = sorted(p.name for p in (work / "run" / "seamline").glob("*"))
            homes_left = sorted(str(p) for p in (work / "data" / "seamline" / "envelopes").glob("*/*"))
            result["after_close"].update(runtime_folders_left=len(runtime_left), envelope_homes_left=len(homes_left))
    result["sandbox"] = "none"
    result["machine"] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    result["when"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    own, lat, fl = result["own_memory_per_session_kb"], result["line_to_event"], result["floor_line_to_read"]
    print(f"{args.claude} warm Claude Code + {args.codex} warm Codex sessions in one `seamline serve` (sandbox none)")
    print(
        f"  seamline's own memory per live session: RSS {own['rss']:.0f} KB, USS {own['uss']:.0f} KB, "
        f"peak RSS {own['peak_rss']:.0f} KB (goal ≤ {GOAL_MEMORY_KB} KB); server idle RSS "
        f"{result['idle']['rss_kb'] / 1024:.1f} MB; the CLIs' own RSS per session {result['cli_rss_per_session_kb'] / 1024:.0f} MB"
    )
    print(
        f"  line → event: p50 {lat.get('p50_ms', float('nan')):.1f} ms, p99 {lat.get('p99_ms', float('nan')):.1f} ms "
        f"over {lat['n']} turns, {lat['late_subscriptions']} left out (goal p99 ≤ {GOAL_P99_MS:.0f} ms)\n"
        f"  floor: {fl['processes']} bare warm Claude Code read by one asyncio loop, turns at once: "
        f"p50 {fl.get('p50_ms', float('nan')):.1f} ms, p99 {fl.get('p99_ms', float('nan')):.1f} ms over {fl['n']}"
    )
    if result["failed_turns"]:
        print(f"  failed turns: {len(result['failed_turns'])}: {result['failed_turns'][:3]}")
    print(f"  the server's CPU per measured turn: {result['server_cpu_ms_per_turn']:.1f} ms")
    print(
        f"  load (1 min) {result['load']['before']:.1f} → {result['load']['after']:.1f}; after close: {result['after_close']}"
    )
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    left = result["after_close"]
    bad = (
        left["processes_left"]
        or left["other_fds_over_idle"]
        or left["runtime_folders_left"]
        or left["envelope_homes_left"]
    )
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
