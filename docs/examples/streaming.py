"""3. Streaming: events as they happen, narrowed by their ``type``."""

from __future__ import annotations

import asyncio

import seamline
from seamline.testing import scripted


async def main() -> str:
    agent = seamline.Agent(provider=scripted([{"text": "Streaming works."}]), store=None)
    live: list[str] = []
    async for event in agent.stream("Say something"):
        if event.type == "text_delta":
            live.append(event.text)  # narrowed to TextDelta: print it as it comes
        elif event.type == "usage":
            live.append(f"<{event.output_tokens} tokens>")  # narrowed to Usage
        elif event.type == "complete":
            return f"{event.text} [{event.outcome}]"  # narrowed to Complete
    raise RuntimeError("every turn ends with a complete event")


if __name__ == "__main__":
    print(asyncio.run(main()))
