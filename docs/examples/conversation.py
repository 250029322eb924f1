"""4. Conversation: several turns on one session, then resumed from the store later."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import seamline
from seamline.testing import scripted


async def main(folder: Path) -> list[str]:
    store = folder / "store.db"
    first = seamline.Agent(
        provider=scripted([{"text": "Noted: 42."}, {"text": "You said 42."}]),
        instructions="Remember numbers.",
        store=store,
    )
    async with first.session() as session:
        answers = [(await session.run("My number is 42.")).text, (await session.run("Which number?")).text]
        kept = session.session_id
    later = seamline.Agent(provider=scripted([{"text": "Still 42."}]), store=store)
    async with later.session(resume=kept) as session:  # the instructions come back with the session
        answers.append((await session.run("And now?")).text)
    return answers


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        print(asyncio.run(main(Path(folder))))
