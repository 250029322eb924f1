"""1. Hello: one prompt, one answer, with instructions."""

from __future__ import annotations

import seamline
from seamline.testing import scripted


def main() -> str:
    agent = seamline.Agent(
        provider=scripted([{"text": "Paris.", "usage": {"input_tokens": 9, "output_tokens": 2, "cost_usd": 0.0001}}]),
        # or: provider="openai", model="gpt-4o"; or provider=seamline.OpenAISettings(base_url=...)
        instructions="Answer in one word.",
        store=None,
    )
    result = agent.run_sync("What is the capital of France?")
    assert result.outcome == "completed"
    return f"{result.text} ({result.input_tokens} in, {result.output_tokens} out, ${result.cost_usd or 0:.4f})"


if __name__ == "__main__":
    print(main())
