"""Helpers for users' own tests: the scripted provider, a switch against real calls, and
cassettes.

>>> from seamline.testing import scripted
>>> provider = scripted([{"text": "hello"}])
>>> provider.name
'scripted'

It records what it was sent: ``provider.calls`` (every model call, in order) and
``provider.last_call`` (its messages, tools, model and params), so a test can assert on
the requests as well as on the answers.

:func:`cassette` runs a real backend (an agent CLI) from a recording: the first run
records its model exchanges to a file, later runs replay them with no network and no key
(docs/gateway.md, "Cassettes").

>>> from seamline.testing import cassette
>>> cassette("tests/cassettes/never-recorded.jsonl")
{'record': 'tests/cassettes/never-recorded.jsonl'}
"""

from __future__ import annotations

import os
from collections.abc import Generator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, Literal, TypedDict

from seamline.errors import InvalidRequest
from seamline.providers.base import BLOCK_ENV
from seamline.providers.local.scripted import ScriptedProvider, load_script

__all__ = [
    "CASSETTE_MODE_ENV",
    "CassetteFields",
    "ScriptedProvider",
    "block_real_providers",
    "cassette",
    "load_script",
    "scripted",
]

CASSETTE_MODE_ENV: Final = "SEAMLINE_CASSETTE_MODE"


def scripted(script: Sequence[Mapping[str, Any]], *, model: str | None = None) -> ScriptedProvider:
    """A scripted provider playing ``script`` (see :mod:`seamline.providers.local.scripted`)."""
    return ScriptedProvider(model=model, script=script)


@contextmanager
def block_real_providers() -> Generator[None]:
    """Inside this block any provider that would call a real backend fails with a
    ``permission`` error. The same switch is the environment variable
    ``SEAMLINE_BLOCK_REAL_PROVIDERS=1``, which the test suite sets. A session that replays
    a cassette calls nothing real and runs all the same."""
    before = os.environ.get(BLOCK_ENV)
    os.environ[BLOCK_ENV] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(BLOCK_ENV, None)
        else:
            os.environ[BLOCK_ENV] = before


class CassetteFields(TypedDict, total=False):
    """The run options :func:`cassette` gives: ``record`` or ``replay``."""

    record: str
    replay: str


def cassette(
    path: str | os.PathLike[str], *, mode: Literal["auto", "record", "replay"] | None = None
) -> CassetteFields:
    """The run options that record a run's model exchanges to ``path``, or replay them.

    ``mode="auto"`` (the default) records when the file is missing and replays when it is
    there: commit the file and the test runs offline from then on; delete it, or set
    ``SEAMLINE_CASSETTE_MODE=record``, to record anew. ``"replay"`` needs the file. Without
    ``mode``, ``SEAMLINE_CASSETTE_MODE`` (``auto``, ``record`` or ``replay``) gives it.
    Pass the result as keywords to :func:`seamline.run`, :class:`~seamline.runner.RunOptions`
    or :class:`~seamline.Agent`::

        agent = Agent(provider="claude-code", workspace=tmp_path, yes=True, **cassette(HERE / "fix.jsonl"))

    Recording needs the backend's key and API; replaying needs neither, and runs with
    :func:`block_real_providers` on.
    """
    chosen = mode or os.environ.get(CASSETTE_MODE_ENV) or "auto"
    if chosen not in ("auto", "record", "replay"):
        raise InvalidRequest(f"{CASSETTE_MODE_ENV}={chosen!r}: choose auto, record or replay")
    where = os.fspath(path)
    if chosen == "record" or (chosen == "auto" and not Path(where).exists()):
        return {"record": where}
    return {"replay": where}
