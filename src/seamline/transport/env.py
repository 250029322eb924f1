"""Environment composition for spawned programs.

Layers are applied in order over a base environment; a key valued ``None`` in a layer
removes the key, which is how a provider scrubs what an ancestor process set (a routing
key, a base URL) from the environment of the program it starts.

>>> compose_env({"A": "1", "B": "2"}, {"B": None, "C": "3"})
{'A': '1', 'C': '3'}
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["EnvLayer", "compose_env"]

EnvLayer = Mapping[str, str | None]


def compose_env(base: Mapping[str, str] | None = None, *layers: EnvLayer) -> dict[str, str]:
    """``base`` (default: this process's environment) with ``layers`` applied in order.

    A value of ``None`` unsets the key; any other value replaces it.
    """
    env = dict(os.environ if base is None else base)
    for layer in layers:
        for key, value in layer.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
    return env
