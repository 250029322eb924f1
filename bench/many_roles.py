"""`seamline race` and a pipeline with many agent-CLI racers or roles at once (issue 44 §2).

    .venv/bin/python bench/many_roles.py                  10 racers, then 10 parallel roles
    .venv/bin/python bench/many_roles.py --agents 4 --out F

Half the agents are Claude Code, half Codex (the real pinned CLIs, warm by default, no
envelope), against the fake APIs in this process on 127.0.0.1; the race and the pipeline
run in this process too (the Python API under `seamline race` and `seamline pipeline`), so
its memory and descriptors are seamline's, and the CLIs are its child processes.

Figures, beside their goals (those of `seamline serve` with many sessions):

- **seamline's own memory per agent**: this process's peak RSS during the race (VmHWM,
  reset before) less its RSS before, divided by the agents, after a warm-up race and
  pipeline of two (first-use imports are not billed); the CLIs are separate processes
  and not in it.
- **delay from a CLI's line to the event** the caller reads from `stream_pipeline` (p50,
  p99): every CLI runs behind the relay of bench/many_agents.py, which stamps the line that
  carries the agent's answer token; the caller stamps the first event carrying it.
- **after it is over**: processes still running that it started, descriptors over the
  count before, runtime folders left.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from bench.many_agents import (  # noqa: E402
    GOAL_MEMORY_KB,
    GOAL_P99_MS,
    TOKEN,
    Tokens,
    bench_env,
    load_avg,
    make_relay,
    proc_kb,
)
from bench.serve_load import _percentile  # noqa: E402  # pyright: ignore[reportPrivateUsage]
from tests.leftovers import Leftovers  # noqa: E402
from tests.providers.agent_cli_support import TOOLS_BIN, AgentAnthropic, AgentOpenAI  # noqa: E402


def _options(kind: str, claude: Path, codex: Path, anthropic: str, openai: str) -> tuple[str, str, dict[str, str]]:
    if kind == "claude":
        return (
            "claude-code",
            "claude-sonnet-4-5",
            {"executable": str(claude), "base_url": anthropic, "max_retries": "0"},
        )
    options = {"executable": str(codex), "base_url": openai, "max_retries": "0", "codex_sandbox": "danger-full-access"}
    return "codex", "gpt-5.5", options


async def _drive(stream: Any, watch: Leftovers) -> tuple[list[tuple[str, float]], str]:
    """Read the events, stamping the first one that carries each answer token."""
    from seamline.events import Complete

    seen: dict[str, float] = {}
    last = ""
    polling = True

    async def poll() -> None:
        while polling:
            watch.watch()
            await asyncio.sleep(0.1)

    poller = asyncio.create_task(poll())
    try:
        async for event in stream:
            now = time.time()
            for found in TOKEN.findall(repr(event).encode()):
                seen.setdefault(found.decode(), now)
            if isinstance(event, Complete):
                last = event.outcome
    finally:
        polling = False
        await poller
    return list(seen.items()), last


def _measure(
    kind: str, agents: int, work: Path, tokens: Tokens, urls: tuple[str, str], *, warm_up: bool = False
) -> dict[str, Any]:
    from seamline.live import open_run
    from seamline.live.race import Racer, open_race
    from seamline.pipeline import resolve_pipeline, stream_pipeline
    from seamline.providers.registry import create_provider
    from seamline.sessions.sqlite_store import open_store
    from seamline.tools.workspace import Workspace, workspace_tools
    from seamline.worktrees import create

    claude, codex = (
        make_relay(work, "claude", TOOLS_BIN / "claude", tokens.logdir),
        make_relay(work, "codex", TOOLS_BIN / "codex", tokens.logdir),
    )
    kinds = ["claude" if n % 2 == 0 else "codex" for n in range(agents)]
    store = open_store(work / f"{kind}-{agents}-{int(warm_up)}.db")
    watch = Leftovers(folders=(Path(os.environ["XDG_RUNTIME_DIR"]) / "seamline",))
    watch.baseline()
    pid = os.getpid()
    before = proc_kb(pid, "status", "VmRSS")
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    load_before = load_avg()
    started = time.perf_counter()
    try:
        if kind == "race":
            racers: list[Racer] = []
            for n, which in enumerate(kinds, 1):
                name, model, options = _options(which, claude, codex, *urls)
                tree = create(
                    work / "repo", run_id=f"{int(warm_up)}{agents:02d}{n:02d}" + "0" * 27, store=store.location
                )
                backend = create_provider(name, model=model, options=options)
                racers.append(
                    Racer(label=name, provider=backend, tree=tree, tools=workspace_tools(Workspace(tree.workspace)))
                )
            controller, race_agents = open_race(
                racers, store=store, yes=True, trace_file=work / f"race-{agents}-{int(warm_up)}.jsonl"
            )
            samples, outcome = asyncio.run(_drive(stream_pipeline(controller, "say it"), watch))
            race_agents.release()
        else:
            roles = {f"r{n}": _options(which, claude, codex, *urls) for n, which in enumerate(kinds)}
            definition = {
                "name": "many-at-once",
                "phases": [{"name": "fan", "roles": list(roles), "next": "done"}],
                "transitions": {"fan": ["done"]},
                "roles": {
                    r: {"kind": "agent", "provider": p, "model": m, "options": o} for r, (p, m, o) in roles.items()
                },
                "team": {"max_parallel": len(roles)},
            }
            path = work / f"many-{agents}-{int(warm_up)}.json"
            path.write_text(json.dumps(definition))
            ws = work / "ws"
            ws.mkdir(exist_ok=True)
            controller = open_run(
                resolve_pipeline(str(path)),
                workspace=ws,
                store=store,
                trace_file=work / f"run-{agents}-{int(warm_up)}.jsonl",
            )
            samples, outcome = asyncio.run(_drive(stream_pipeline(controller, "say it"), watch))
    finally:
        store.close()
    wall = time.perf_counter() - started
    peak = proc_kb(pid, "status", "VmHWM")
    load_after = load_avg()
    deadline = time.monotonic() + 60
    while (problems := watch.problems()) and time.monotonic() < deadline:
        time.sleep(0.2)
    stamps = tokens.stamps()
    delays = [(received - stamps[t]) * 1000 for t, received in samples if t in stamps]
    return {
        "agents": agents,
        "outcome": outcome,
        "wall_s": wall,
        "own_memory_per_agent_kb": {"peak_rss": (peak - before) / agents, "goal": GOAL_MEMORY_KB},
        "line_to_event": {
            "n": len(delays),
            "p50_ms": statistics.median(delays) if delays else None,
            "p99_ms": _percentile(delays, 0.99) if delays else None,
            "goal_p99_ms": GOAL_P99_MS,
        },
        "load": {"before": load_before, "after": load_after},
        "left_after": problems,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=10, help="racers, and parallel roles (default 10)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()
    from tests.worktrees.git_repo import environ_with, git_home, make_repo

    with tempfile.TemporaryDirectory(prefix="seamline-roles-", dir="/tmp") as tmp:
        work = Path(tmp)
        logdir = work / "stamps"
        logdir.mkdir()
        tokens = Tokens(logdir)
        environment = bench_env(work)  # the CLIs get only this (real providers allowed: the APIs are fakes)
        os.environ.clear()
        os.environ.update(environment)
        os.environ.update(git_home(work / "git-home"))
        make_repo(work / "repo", environ_with({}))
        count = 2 * args.agents + 6
        with (
            AgentAnthropic(
                [{"text": f"Claude says {tokens.next()}."} for _ in range(count)], fallback={"text": "side"}
            ) as anthropic,
            AgentOpenAI([{"text": f"Codex says {tokens.next()}."} for _ in range(count)]) as openai,
        ):
            urls = (anthropic.root_url, openai.base_url)
            # Warm-up: a race and a pipeline of two, so first-use imports are not billed.
            _measure("race", 2, work, tokens, urls, warm_up=True)
            _measure("pipeline", 2, work, tokens, urls, warm_up=True)
            result: dict[str, Any] = {
                "race": _measure("race", args.agents, work, tokens, urls),
                "pipeline": _measure("pipeline", args.agents, work, tokens, urls),
            }
    result["machine"] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    result["when"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for name in ("race", "pipeline"):
        r = result[name]
        lat = r["line_to_event"]
        print(
            f"{name}: {r['agents']} agent-CLI {'racers' if name == 'race' else 'roles'} at once ({r['outcome']}, {r['wall_s']:.1f} s)"
        )
        print(
            f"  seamline's own memory per agent: peak RSS {r['own_memory_per_agent_kb']['peak_rss']:.0f} KB "
            f"(goal ≤ {GOAL_MEMORY_KB} KB)"
        )
        if lat["n"]:
            print(
                f"  line → event: p50 {lat['p50_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} ms over {lat['n']} answers "
                f"(goal p99 ≤ {GOAL_P99_MS:.0f} ms)"
            )
        print(
            f"  load (1 min) {r['load']['before']:.1f} → {r['load']['after']:.1f}; left after: {r['left_after'] or 'nothing'}"
        )
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 1 if result["race"]["left_after"] or result["pipeline"]["left_after"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
