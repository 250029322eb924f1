"""A seamline worker whose ``seamline.advance`` misbehaves once, for the fault tests.

``python faulty_advance.py MODE DIR FINISHED worker --temporal ...``: the first attempt of
the advance pass that finds FINISHED role turns finished either hangs until the process is
killed (MODE ``hang``; the worker's PID goes to ``DIR/hung``, written by one worker only) or
fails with a transport error (MODE ``transport``). Every advance attempt appends
``PID FINISHED ATTEMPT`` to ``DIR/advances.log``. Everything else is the real worker.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from temporalio import activity

import seamline.durable.worker as durable_worker
from seamline.cli.main import main
from seamline.durable.ledger import RunLedger
from seamline.errors import TransportFailure
from seamline.sessions.sqlite_store import open_store

_MODE, _DIR, _FINISHED = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
_real_advance = durable_worker.advance


def _finished_turns(store: str, run_id: str) -> int:
    kept = open_store(store)
    try:
        return sum(1 for turn in RunLedger(kept).turns(run_id).values() if turn["status"] == "finished")
    finally:
        kept.close()


def _claim() -> bool:
    """Whether this process is the one that misbehaves (the first to claim it)."""
    try:
        fd = os.open(_DIR / "hung", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    return True


async def _faulty_advance(store: str, run_id: str) -> dict[str, Any]:
    attempt = activity.info().attempt
    finished = _finished_turns(store, run_id)
    with open(_DIR / "advances.log", "a") as log:
        log.write(f"{os.getpid()} {finished} {attempt}\n")
    if finished == _FINISHED and attempt == 1:
        if _MODE == "transport":
            raise TransportFailure("connection reset by peer (injected)")
        if _MODE == "hang" and _claim():
            await asyncio.Future()  # until kill -9
    return await _real_advance(store, run_id)


durable_worker.advance = _faulty_advance  # type: ignore[assignment]
sys.exit(main(sys.argv[4:]))
