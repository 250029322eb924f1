"""5. Guard: an observer that vetoes a tool, and a budget for the turn."""

from __future__ import annotations

import seamline
from seamline.testing import scripted


class NoDelete(seamline.Observer):
    authorizes = True

    async def on_tool_call(self, ctx: seamline.LoopContext, call: seamline.ToolCall) -> seamline.Intervention | None:
        return seamline.Intervention.stop("deleting is not allowed") if call.name == "delete" else None


@seamline.tool(tool_class="write")
def delete(path: str) -> str:
    """Delete a file.

    Args:
        path: the file to delete.
    """
    raise AssertionError("never called: the observer stops it")


def main() -> list[str]:
    provider = scripted(
        [
            {"tool_calls": [{"name": "delete", "arguments": {"path": "notes.txt"}}]},
            {"text": "I may not delete it.", "usage": {"input_tokens": 20, "output_tokens": 5, "cost_usd": 0.001}},
        ]
    )
    agent = seamline.Agent(
        provider=provider, tools=[delete], observers=[NoDelete()], budget_usd=0.50, yes=True, store=None
    )
    result = agent.run_sync("Delete notes.txt")
    refusals = [e.output for e in result.events if e.type == "tool_result" and e.is_error]
    return [result.outcome, result.text, *refusals]


if __name__ == "__main__":
    print(main())
