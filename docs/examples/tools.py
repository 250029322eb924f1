"""2. Tools: typed functions, a dataclass parameter, descriptions from the docstring."""

from __future__ import annotations

from dataclasses import dataclass

import seamline
from seamline.testing import scripted


@dataclass
class Order:
    item: str
    quantity: int = 1


@seamline.tool
def price(order: Order) -> str:
    """Price an order.

    Args:
        order: what to price, and how many.
    """
    return f"{order.quantity} x {order.item} = ${2.5 * order.quantity:.2f}"


def main() -> str:
    provider = scripted(
        [
            {"tool_calls": [{"name": "price", "arguments": {"order": {"item": "tea", "quantity": 4}}}]},
            {"text": "Four teas cost $10.00."},
        ]
    )
    agent = seamline.Agent(provider=provider, tools=[price], store=None)
    result = agent.run_sync("How much are four teas?")
    outputs = [event.output for event in result.events if isinstance(event, seamline.ToolResult)]
    assert outputs == ["4 x tea = $10.00"]
    return result.text


if __name__ == "__main__":
    print(main())
