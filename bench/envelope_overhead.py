"""What the envelope (issue 28) costs: sandbox start-up per agent-CLI turn, and the latency
the egress path (bridge, unix socket, forwarder or proxy) adds to each model request.

    .venv/bin/python bench/envelope_overhead.py [--turns 5] [--requests 200]

1. turns: the same one-text Claude Code turn against the fake Anthropic API on 127.0.0.1,
   ``sandbox=none`` then ``sandbox=bwrap``; the median wall time of each and the difference
   (bubblewrap, the bridge, the gate, the private home).
2. requests: ``--requests`` sequential HTTP requests (a new connection each, the worst case;
   the CLIs keep theirs alive) to a local server, made from inside the envelope through the
   forwarded model port and through the proxy (absolute-URI HTTP), and the same from the host
   directly; the median per request of each.

Prints one JSON object. Needs bubblewrap and the CLIs of ``scripts/setup --dev``.
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
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.providers.agent_cli_support import TOOLS_BIN, AgentAnthropic  # noqa: E402
from tests.sandbox.envelope_support import second_server  # noqa: E402

from seamline.providers.agent_clis.claude_code import ClaudeCodeProvider  # noqa: E402
from seamline.providers.programs.envelope_launch import enter_envelope  # noqa: E402
from seamline.transport.subprocess import LineProcess  # noqa: E402

_LOOP = """
import os, sys, time, urllib.request
url, n = sys.argv[1], int(sys.argv[2])
proxy = os.environ["HTTP_PROXY"] if sys.argv[3] == "PROXY" else ""
if proxy:
    os.environ.pop("NO_PROXY", None); os.environ.pop("no_proxy", None)
handlers = [urllib.request.ProxyHandler({"http": proxy} if proxy else {})]
opener = urllib.request.build_opener(*handlers)
times = []
for _ in range(n):
    t = time.perf_counter(); opener.open(url, timeout=10).read(); times.append(time.perf_counter() - t)
times.sort(); print(times[len(times) // 2])
"""


async def _turns(n: int, mode: str) -> list[float]:
    spent: list[float] = []
    with AgentAnthropic([{"text": "ok"}] * n, fallback={"text": "side"}) as fake:
        options = {
            "executable": str(TOOLS_BIN / "claude"),
            "base_url": fake.root_url,
            "max_retries": "0",
            "sandbox": mode,
        }
        provider = ClaudeCodeProvider(model="claude-sonnet-4-5", options=options)
        for _ in range(n):
            session = await provider.open(workspace=Path(tempfile.mkdtemp(prefix="sl-bench-ws-")))
            started = time.perf_counter()
            [e async for e in session.send("hello")]
            spent.append(time.perf_counter() - started)
            await provider.close(session)
    return spent


async def _inside(url: str, n: int, *, via_proxy: bool, endpoint: tuple[str, int] | None, allow: str) -> float:
    workspace = Path(tempfile.mkdtemp(prefix="sl-bench-ws-"))
    state: dict[str, Any] = {}
    argv = ["/usr/bin/python3", "-c", _LOOP, url, str(n), "PROXY" if via_proxy else ""]
    envelope = await enter_envelope(
        who="bench",
        mode="bwrap",
        session_id=f"bench-{os.getpid()}-{via_proxy}",
        state=state,
        workspace=workspace,
        argv=argv,
        env={"PATH": "/usr/bin:/bin"},
        keep_env=lambda name: False,
        endpoints=[endpoint] if endpoint else [],
        allow_hosts=allow,
        seed=lambda home: None,
    )
    proc = await LineProcess.spawn(envelope.argv, env=envelope.env, cwd=workspace)
    out = [line async for line in proc.lines()]
    await proc.wait()
    await envelope.close()
    if proc.returncode != 0:
        raise SystemExit(f"inside loop failed: {proc.stderr_tail()}")
    return float(out[-1])


def _outside(url: str, n: int) -> float:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    times = []
    for _ in range(n):
        started = time.perf_counter()
        opener.open(url, timeout=10).read()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sl-bench-home-") as home:
        os.environ.update(HOME=home, ANTHROPIC_API_KEY="sk-ant-bench", XDG_DATA_HOME=f"{home}/data")
        os.environ.pop("SEAMLINE_BLOCK_REAL_PROVIDERS", None)
        plain = await _turns(args.turns, "none")
        boxed = await _turns(args.turns, "bwrap")
        with second_server() as (port, _):
            url = f"http://127.0.0.1:{port}/x"
            direct = _outside(url, args.requests)
            forwarded = await _inside(url, args.requests, via_proxy=False, endpoint=("127.0.0.1", port), allow="")
            proxied = await _inside(url, args.requests, via_proxy=True, endpoint=None, allow=f"127.0.0.1:{port}")
    result = {
        "turn_median_s": {"none": statistics.median(plain), "bwrap": statistics.median(boxed)},
        "turn_startup_added_s": statistics.median(boxed) - statistics.median(plain),
        "request_median_ms": {
            "host_direct": direct * 1000,
            "envelope_forwarded": forwarded * 1000,
            "envelope_proxied": proxied * 1000,
        },
        "request_added_ms": {"forwarded": (forwarded - direct) * 1000, "proxied": (proxied - direct) * 1000},
        "turns": args.turns,
        "requests": args.requests,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
