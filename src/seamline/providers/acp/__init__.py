"""ACP agents: any program speaking the Agent Client Protocol on stdio, as a backend.

``agent_process`` is the shared agent subprocess (one per command line, several
sessions), ``translator`` turns ``session/update`` into seamline's events, ``provider``
is :class:`~seamline.providers.acp.provider.AcpProvider`.
"""

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    # `from seamline.providers.acp import AcpProvider` worked when this room was one module.
    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(importlib.import_module("seamline.providers.acp.provider"), name)
