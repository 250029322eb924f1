"""Codex kept warm (issue 32 item 2): turns 2 and 5 of a five-turn session.

The Codex half of the warm-sessions workload (``warm_sessions.py`` is Claude Code's). Four
ways to run the same session, all with the real pinned ``codex`` against the fake Responses
API on 127.0.0.1 (the same answer every turn, streamed in deltas):

- ``warm``: seamline's ``codex`` provider, one ``codex app-server`` per session (the default),
  with the store on, as ``seamline run`` has it; ``warm_nostore``: the same without a store
  (so without the raw log and the edit journal);
- ``cold``: the same provider with ``warm=false``: a ``codex exec --json … resume ID PROMPT``
  process per turn;
- ``bare``: that command run by hand, no seamline (the same ``-c`` configuration);
- ``bare_warm``: one ``codex app-server`` driven by hand: the handshake, then a
  ``turn/start`` per turn, read to its ``turn/completed`` (what ``warm`` does, without
  seamline).

Per turn: time to first event (the answer's first text: a text delta from the app-server;
``codex exec`` prints the message whole, so for ``cold`` and ``bare`` its one ``text``) and
wall time (to seamline's ``complete``; for a bare process, to its exit or, warm, to its
``turn/completed``). In ``warm`` turns seamline's own time is also measured directly: from
``send`` to the ``turn/start`` written, plus from ``turn/completed`` read to ``complete``. Medians over the sessions, interleaved. Goals as for Claude Code: warm
turns reach their first event at least 3 times sooner than cold ones; seamline's wall within
5% of the bare CLI run the same way. Every turn checks its answer. Needs the pinned CLI
(bash scripts/system/40-agent-clis.sh).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from seamline.events import Complete, Text, TextDelta  # noqa: E402
from seamline.providers.agent_clis.codex import CodexProvider  # noqa: E402
from seamline.providers.agent_clis.codex_warm import is_turn_end, turn_message  # noqa: E402
from seamline.sessions.sqlite_store import SQLiteStore  # noqa: E402
from workloads.warm_common import MEASURED, TURNS, Taps, Turn, environment, figures  # noqa: E402

CODEX = ROOT / ".tools" / "agent-clis" / "node_modules" / ".bin" / "codex"
MODEL = "gpt-5.5"
ANSWER = "The warm answer streams in a few short deltas."


def _options(base_url: str, **more: str) -> dict[str, str]:
    return {
        "executable": str(CODEX),
        "base_url": base_url,
        "max_retries": "0",
        "codex_sandbox": "danger-full-access",  # Codex's own sandbox cannot work under /tmp
        **more,
    }


async def _seamline_session(
    base_url: str, ws: Path, store_path: Path | None, *, warm: bool, taps: Taps | None = None
) -> list[Turn]:
    provider = CodexProvider(model=MODEL, options=_options(base_url, warm=str(warm).lower()))
    store = SQLiteStore(store_path) if store_path is not None else None
    session = await provider.open(workspace=ws, store=store)
    turns: list[Turn] = []
    try:
        for n in range(1, TURNS + 1):
            started = time.perf_counter()
            first: float | None = None
            final: Complete | None = None
            async for event in session.send(f"turn {n}"):
                if first is None and isinstance(event, TextDelta | Text):
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
        if store is not None:
            store.close()
    return turns


async def _bare_session(flags: list[str], env: dict[str, str], ws: Path) -> list[Turn]:
    thread = ""
    turns: list[Turn] = []
    for n in range(1, TURNS + 1):
        which = ["resume", *flags, thread] if thread else flags
        started = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(
            str(CODEX), "exec", "--json", "--skip-git-repo-check", *which, f"turn {n}",
            env=env, cwd=ws, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        assert proc.stdout is not None
        first: float | None = None
        said = ""
        async for line in proc.stdout:
            frame = json.loads(line)
            if frame.get("type") == "thread.started":
                thread = frame["thread_id"]
            item = frame.get("item") or {}
            if frame.get("type") == "item.completed" and item.get("type") == "agent_message":
                first = first if first is not None else time.perf_counter() - started
                said = item.get("text", "")
        await proc.wait()
        wall = time.perf_counter() - started
        assert said == ANSWER and first is not None, said
        turns.append((first, wall))
    return turns


async def _bare_warm_session(flags: list[str], env: dict[str, str], ws: Path) -> list[Turn]:
    proc = await asyncio.create_subprocess_exec(
        str(CODEX), "app-server", *flags,
        env=env, cwd=ws, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL, limit=16 * 1024 * 1024,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    turns: list[Turn] = []
    try:
        opening = [
            {"id": 1, "method": "initialize", "params": {"clientInfo": {"name": "bench", "version": "0"}}},
            {"method": "initialized"},
            {"id": 2, "method": "thread/start", "params": {}},
        ]
        proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in opening))
        await proc.stdin.drain()
        thread = ""
        while not thread:
            answer = json.loads(await proc.stdout.readline())
            if answer.get("id") == 2:
                thread = answer["result"]["thread"]["id"]
        for n in range(1, TURNS + 1):
            started = time.perf_counter()
            proc.stdin.write(turn_message(f"turn {n}", thread))
            await proc.stdin.drain()
            first: float | None = None
            while line := await proc.stdout.readline():
                if first is None and b'"item/agentMessage/delta"' in line:
                    first = time.perf_counter() - started
                if is_turn_end(line):
                    assert ANSWER in line.decode()
                    break
            wall = time.perf_counter() - started
            assert first is not None
            turns.append((first, wall))
    finally:
        proc.stdin.close()
        await proc.wait()
    return turns


def run(*, quick: bool = False) -> dict[str, Any]:
    if not CODEX.exists():
        return {"skipped": f"{CODEX} missing; run bash scripts/system/40-agent-clis.sh"}
    from tests.fakes.openai_api import FakeOpenAI

    sessions = 1 if quick else 5
    kinds = ("warm", "warm_nostore", "cold", "bare", "bare_warm")
    runs: dict[str, list[list[Turn]]] = {k: [] for k in kinds}
    taps, taps_nostore = Taps(is_turn_end), Taps(is_turn_end)
    with tempfile.TemporaryDirectory() as tmp, FakeOpenAI([], fallback={"text": ANSWER}) as fake:
        home, ws = Path(tmp) / "home", Path(tmp) / "ws"
        (home / ".codex").mkdir(parents=True)
        ws.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CODEX_", "SEAMLINE_BLOCK"))}
        env.update(HOME=str(home), CODEX_HOME=str(home / ".codex"), OPENAI_API_KEY="sk-bench")
        # The bare runs get the very -c configuration seamline gives, written by hand.
        probe = CodexProvider(model=MODEL, options=_options(fake.base_url))
        flags, _ = probe._config(_no_session())

        def store(kind: str, n: int) -> Path:
            return Path(tmp) / f"{kind}-{n}.db"  # the store on, as `seamline run` has it

        with environment(env):
            asyncio.run(_bare_session(flags, env, ws))  # warm the file cache once for all
            for n in range(sessions):
                # Interleaved, so a slow moment of the shared machine hits every kind alike.
                for kind in kinds:
                    if kind == "warm":
                        with taps.installed():
                            session = _seamline_session(fake.base_url, ws, store(kind, n), warm=True, taps=taps)
                            turns = asyncio.run(session)
                    elif kind == "warm_nostore":  # no store: no raw log, no edit journal
                        with taps_nostore.installed():
                            session = _seamline_session(fake.base_url, ws, None, warm=True, taps=taps_nostore)
                            turns = asyncio.run(session)
                    elif kind == "cold":
                        turns = asyncio.run(_seamline_session(fake.base_url, ws, store(kind, n), warm=False))
                    elif kind == "bare":
                        turns = asyncio.run(_bare_session(flags, env, ws))
                    else:
                        turns = asyncio.run(_bare_warm_session(flags, env, ws))
                    runs[kind].append(turns)
    result = figures(runs, kinds, sessions)
    result["warm_seamline_own_share"] = round(statistics.median(taps.own), 3)
    result["warm_nostore_seamline_own_share"] = round(statistics.median(taps_nostore.own), 3)
    result["goal_first_event_ratio"] = 3.0
    result["goal_added_wall"] = 1.05
    return result


def _no_session() -> Any:
    """A session object for ``_config``: it reads only the approval hook from the state."""
    return type("_Bare", (), {"state": {}})()


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
