"""Agent-CLI parsers and wrapping: lines per second, and seamline run vs the bare CLI.

1. Parser throughput: every golden fixture of tests/fixtures/<provider>/ (lines the real
   CLIs printed) fed to its parser, over and over, in lines per second (target: 200,000).
   Each pass checks its own result (the tools fixture gives its tool calls and one
   ``complete``).
2. Wrapping cost: wall time of ``seamline run --provider claude-code --json`` against the
   bare ``claude -p ... --output-format stream-json --verbose`` it wraps, both against the
   same fake Anthropic API on 127.0.0.1; reported as a ratio (close to 1 is the aim).
   Needs the pinned CLI (bash scripts/system/40-agent-clis.sh); without it this part says so.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from seamline.events import Complete, ToolCall  # noqa: E402
from seamline.providers.agent_clis.parsers import (  # noqa: E402
    ClaudeStreamJsonParser,
    CodexJsonParser,
    GeminiStreamJsonParser,
)
from seamline.providers.agent_clis.parsers.base import StreamParser  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
PARSERS: dict[str, type[StreamParser]] = {
    "claude-code": ClaudeStreamJsonParser,
    "codex": CodexJsonParser,
    "gemini-cli": GeminiStreamJsonParser,
}
EXPECTED_TOOL_CALLS = {"claude-code": 3, "codex": 3, "gemini-cli": 3}
CLAUDE = ROOT / ".tools" / "agent-clis" / "node_modules" / ".bin" / "claude"


def _throughput(provider: str, passes: int) -> dict[str, Any]:
    cls = PARSERS[provider]
    files = {p.stem: p.read_bytes().splitlines() for p in sorted((FIXTURES / provider).glob("*.jsonl"))}
    lines = sum(len(v) for v in files.values())
    started = time.perf_counter()
    for _ in range(passes):
        for name, content in files.items():
            parser = cls()
            events = []
            for line in content:
                events.extend(parser.feed(line))
            events.extend(parser.finish(returncode=0))
            if name == "tools":
                assert sum(isinstance(e, ToolCall) for e in events) == EXPECTED_TOOL_CALLS[provider]
            assert isinstance(events[-1], Complete)
    elapsed = time.perf_counter() - started
    return {"lines_per_s": round(lines * passes / elapsed), "lines": lines * passes, "bytes_per_line": round(
        sum(len(line) for v in files.values() for line in v) / max(lines, 1)
    )}  # fmt: skip


def _wall(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
    elapsed = time.perf_counter() - started
    assert done.returncode == 0, done.stderr[-500:]
    return elapsed, done.stdout


def _wrapping(reps: int) -> dict[str, Any]:
    if not CLAUDE.exists():
        return {"skipped": f"{CLAUDE} missing; run bash scripts/system/40-agent-clis.sh"}
    from tests.providers.agent_cli_support import AgentAnthropic

    with tempfile.TemporaryDirectory() as tmp, AgentAnthropic([], fallback={"text": "Hello from the fake."}) as fake:
        home, ws = Path(tmp) / "home", Path(tmp) / "ws"
        home.mkdir()
        ws.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "SEAMLINE_BLOCK"))}
        env.update(HOME=str(home), ANTHROPIC_API_KEY="sk-ant-bench", PYTHONPATH=str(ROOT / "src"))
        env["SEAMLINE_STORE"] = str(Path(tmp) / "store.db")
        bare = [str(CLAUDE), "-p", "hi", "--output-format", "stream-json", "--verbose", "--model", "claude-sonnet-4-5"]
        bare_env = {**env, "ANTHROPIC_BASE_URL": fake.root_url, "CLAUDE_CODE_MAX_RETRIES": "0"}
        ours = [
            sys.executable, "-m", "seamline", "run", "--provider", "claude-code", "--model", "claude-sonnet-4-5",
            "--json", "-o", f"executable={CLAUDE}", "-o", f"base_url={fake.root_url}", "-o", "max_retries=0",
            "--workspace", str(ws), "hi",
        ]  # fmt: skip
        bare_times, our_times, turn_times = [], [], []
        _wall(bare, bare_env, ws)  # warm the file cache once for both
        for _ in range(reps):
            elapsed, out = _wall(bare, bare_env, ws)
            assert '"result":"Hello from the fake."' in out
            bare_times.append(elapsed)
            elapsed, out = _wall(ours, env, ROOT)
            assert '"outcome":"completed"' in out and "Hello from the fake." in out
            our_times.append(elapsed)
            turn_times.append(_in_process_turn(env, ws, fake.root_url))
    bare_s, our_s, turn_s = (statistics.median(t) for t in (bare_times, our_times, turn_times))
    return {
        "bare_claude_s": round(bare_s, 3),
        "seamline_run_s": round(our_s, 3),
        "ratio": round(our_s / bare_s, 3),
        # The same turn through the provider API in a running Python: no interpreter start-up.
        "provider_turn_s": round(turn_s, 3),
        "provider_turn_ratio": round(turn_s / bare_s, 3),
    }


def _in_process_turn(env: dict[str, str], ws: Path, base_url: str) -> float:
    import asyncio

    from seamline.providers.agent_clis.claude_code import ClaudeCodeProvider

    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        provider = ClaudeCodeProvider(
            model="claude-sonnet-4-5", options={"executable": str(CLAUDE), "base_url": base_url, "max_retries": "0"}
        )

        async def turn() -> float:
            started = time.perf_counter()
            session = await provider.open(workspace=ws)
            final = [e async for e in session.send("hi")][-1]
            assert isinstance(final, Complete) and final.text == "Hello from the fake."
            return time.perf_counter() - started

        return asyncio.run(turn())
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run(*, quick: bool = False) -> dict[str, Any]:
    passes = 100 if quick else 1000
    result: dict[str, Any] = {}
    rates = []
    for provider in PARSERS:
        figures = _throughput(provider, passes)
        result[f"{provider}_lines_per_s"] = figures["lines_per_s"]
        rates.append(figures["lines_per_s"])
    result["min_lines_per_s"] = min(rates)
    result["target_lines_per_s"] = 200_000
    wrapping = _wrapping(1 if quick else 5)
    result.update({f"claude_{k}": v for k, v in wrapping.items()})
    return result


if __name__ == "__main__":
    print(run(quick="--quick" in sys.argv))
