"""OpenCode: its HTTP server (``server``) started in the envelope, and the provider that
drives it (``provider``)."""

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    # `from seamline.providers.opencode import OpenCodeProvider` worked when this room was one module.
    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(importlib.import_module("seamline.providers.opencode.provider"), name)
