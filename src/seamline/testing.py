"""Helpers for users' own tests: the scripted provider and a switch against real calls.

>>> from seamline.testing import scripted
>>> provider = scripted([{"text": "hello"}])
>>> provider.name
'scripted'

It records what it was sent: ``provider.calls`` (every model call, in order) and
``provider.last_call`` (its messages, tools, model and params), so a test can assert on
the requests as well as on the answers.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from seamline.providers.base import BLOCK_ENV
from seamline.providers.local.scripted import ScriptedProvider, load_script

__all__ = ["ScriptedProvider", "block_real_providers", "load_script", "scripted"]


def scripted(script: Sequence[Mapping[str, Any]], *, model: str | None = None) -> ScriptedProvider:
    """A scripted provider playing ``script`` (see :mod:`seamline.providers.local.scripted`)."""
    return ScriptedProvider(model=model, script=script)


@contextmanager
def block_real_providers() -> Iterator[None]:
    """Inside this block any provider that would call a real backend fails with a
    ``permission`` error. The same switch is the environment variable
    ``SEAMLINE_BLOCK_REAL_PROVIDERS=1``, which the test suite sets."""
    before = os.environ.get(BLOCK_ENV)
    os.environ[BLOCK_ENV] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(BLOCK_ENV, None)
        else:
            os.environ[BLOCK_ENV] = before
