"""Shared fixtures of the transport tests."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest


@pytest.fixture
def sigint_ignored() -> Iterator[None]:
    """This process ignores SIGINT for the test, as one started with ``&`` from a script does."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
