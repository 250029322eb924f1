"""Claude Code kept warm (issue 32 item 2): turns 2 and 5 of a five-turn session.

Four ways to run the same session, all with the real pinned ``claude`` against the fake
Anthropic API on 127.0.0.1 (the same answer every turn, streamed in deltas):

- ``warm``: seamline's ``claude-code`` provider, one live process per session (the default);
- ``cold``: the same provider with ``warm=false``: a ``claude -p PROMPT --resume ID``
  process per turn;
- ``bare``: that command run by hand, no seamline: a process per turn, ``--session-id`` on
  the first, ``--resume`` after;
- ``bare_warm``: one ``claude -p --input-format stream-json`` process driven by hand, a
  user message per turn on its stdin, with ``CLAUDE_CODE_EAGER_FLUSH=1`` as seamline sets
  it (what ``warm`` does, without seamline).

Per turn: time to first event (the first text delta of the answer, from the moment the turn
is asked for) and wall time (to seamline's ``complete``; for a bare process, to its exit or,
warm, to its ``result`` line). Medians over the sessions. The goals: warm turns reach their
first event at least 3 times sooner than cold ones; seamline's own wall is within 5% of the
bare CLI run the same way (``cold`` against ``bare``, ``warm`` against ``bare_warm``).

The CLI's own time varies from turn to turn by more than seamline adds to a warm turn, so
that is also measured directly: in ``warm`` turns, the time from ``send`` to the message
written on stdin plus the time from the ``result`` line read to ``complete`` (the store,
the edit journal, the settle), against the turn's wall.
Every turn checks its answer. Needs the pinned CLI (bash scripts/system/40-agent-clis.sh).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from seamline.events import Complete, TextDelta  # noqa: E402
from seamline.providers.agent_clis.claude_code import ClaudeCodeProvider  # noqa: E402
from seamline.sessions.sqlite_store import SQLiteStore  # noqa: E402
from workloads.warm_common import MEASURED, TURNS, Taps, Turn, environment, figures  # noqa: E402

CLAUDE = ROOT / ".tools" / "agent-clis" / "node_modules" / ".bin" / "claude"
MODEL = "claude-sonnet-4-5"
ANSWER = "The warm answer streams in a few short deltas."
BARE_FLAGS = ["--output-format", "stream-json", "--verbose", "--include-partial-messages", "--model", MODEL]


async def _seamline_session(
    base_url: str, ws: Path, store_path: Path, *, warm: bool, taps: Taps | None = None
) -> list[Turn]:
    options = {"executable": str(CLAUDE), "base_url": base_url, "max_retries": "0", "warm": str(warm).lower()}
    provider = ClaudeCodeProvider(model=MODEL, options=options)
    store = SQLiteStore(store_path)
    session = await provider.open(workspace=ws, store=store)
    turns: list[Turn] = []
    try:
        for n in range(1, TURNS + 1):
            started = time.perf_counter()
            first: float | None = None
            final: Complete | None = None
            async for event in session.send(f"turn {n}"):
                if first is None and isinstance(event, TextDelta):
                    first = time.perf_counter() - started
                if isinstance(event, Complete):
                    final = event
            ended = time.perf_counter()
            wall = ended - started
            if taps is not None and n in MEASURED:
                taps.own.append(((taps.sent - started) + (ended - taps.ended)) / wall)
            assert final is not None and final.outcome == "completed" and final.text == ANSWER, final
            assert first is not None
            turns.append((first, wall))
    finally:
        await provider.close(session)
        store.close()
    return turns


def _first_delta(line: bytes) -> bool:
    return b'"text_delta"' in line and line.startswith(b'{"type":"stream_event"')


async def _bare_session(env: dict[str, str], ws: Path) -> list[Turn]:
    sid = str(uuid.uuid4())
    turns: list[Turn] = []
    for n in range(1, TURNS + 1):
        which = ["--session-id", sid] if n == 1 else ["--resume", sid]
        started = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(
            str(CLAUDE), "-p", f"turn {n}", *which, *BARE_FLAGS,
            env=env, cwd=ws, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        assert proc.stdout is not None
        first: float | None = None
        result: dict[str, Any] = {}
        async for line in proc.stdout:
            if first is None and _first_delta(line):
                first = time.perf_counter() - started
            if line.startswith(b'{"type":"result"'):
                result = json.loads(line)
        await proc.wait()
        wall = time.perf_counter() - started
        assert result.get("result") == ANSWER and first is not None, result
        turns.append((first, wall))
    return turns


async def _bare_warm_session(env: dict[str, str], ws: Path) -> list[Turn]:
    proc = await asyncio.create_subprocess_exec(
        str(CLAUDE), "-p", "--input-format", "stream-json", "--session-id", str(uuid.uuid4()), *BARE_FLAGS,
        env=env, cwd=ws, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    turns: list[Turn] = []
    try:
        for n in range(1, TURNS + 1):
            message = {"role": "user", "content": [{"type": "text", "text": f"turn {n}"}]}
            started = time.perf_counter()
            proc.stdin.write(json.dumps({"type": "user", "message": message}).encode() + b"\n")
            await proc.stdin.drain()
            first: float | None = None
            while line := await proc.stdout.readline():
                if first is None and _first_delta(line):
                    first = time.perf_counter() - started
                if line.startswith(b'{"type":"result"'):
                    assert json.loads(line).get("result") == ANSWER
                    break
            wall = time.perf_counter() - started
            assert first is not None
            turns.append((first, wall))
    finally:
        proc.stdin.close()
        await proc.wait()
    return turns


def run(*, quick: bool = False) -> dict[str, Any]:
    if not CLAUDE.exists():
        return {"skipped": f"{CLAUDE} missing; run bash scripts/system/40-agent-clis.sh"}
    from tests.providers.agent_cli_support import AgentAnthropic

    sessions = 1 if quick else 5
    kinds = ("warm", "cold", "bare", "bare_warm")
    runs: dict[str, list[list[Turn]]] = {k: [] for k in kinds}
    taps = Taps(lambda line: line.startswith(b'{"type":"result"'))
    with tempfile.TemporaryDirectory() as tmp, AgentAnthropic([], fallback={"text": ANSWER}) as fake:
        home, ws = Path(tmp) / "home", Path(tmp) / "ws"
        home.mkdir()
        ws.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "SEAMLINE_BLOCK", "CLAUDE"))}
        env.update(HOME=str(home), ANTHROPIC_API_KEY="sk-ant-bench", DISABLE_AUTOUPDATER="1")
        bare_env = {**env, "ANTHROPIC_BASE_URL": fake.root_url, "CLAUDE_CODE_MAX_RETRIES": "0"}

        def store(kind: str, n: int) -> Path:
            return Path(tmp) / f"{kind}-{n}.db"  # the store on, as `seamline run` has it

        with environment(env):
            asyncio.run(_bare_session(bare_env, ws))  # warm the file cache once for all
            for n in range(sessions):
                # Interleaved, so a slow moment of the shared machine hits every kind alike.
                for kind in kinds:
                    if kind == "warm":
                        with taps.installed():
                            turns = asyncio.run(
                                _seamline_session(fake.root_url, ws, store(kind, n), warm=True, taps=taps)
                            )
                    elif kind == "cold":
                        turns = asyncio.run(_seamline_session(fake.root_url, ws, store(kind, n), warm=False))
                    elif kind == "bare":
                        turns = asyncio.run(_bare_session(bare_env, ws))
                    else:
                        turns = asyncio.run(_bare_warm_session({**bare_env, "CLAUDE_CODE_EAGER_FLUSH": "1"}, ws))
                    runs[kind].append(turns)
    result = figures(runs, kinds, sessions)
    result["warm_seamline_own_share"] = round(statistics.median(taps.own), 3)
    result["goal_first_event_ratio"] = 3.0
    result["goal_added_wall"] = 1.05
    return result


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
