"""One options type for a run: :class:`seamline.RunOptions` carries every option, the
functions take it and/or the same names as keywords (which win), and the keyword form and
the object never drift apart."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path
from typing import get_type_hints

import pytest

import seamline
from seamline.runner import RunFields, RunOptions
from seamline.testing import scripted


def test_the_keyword_form_names_every_option_and_nothing_else() -> None:
    fields = {f.name for f in dataclasses.fields(RunOptions)}
    assert set(get_type_hints(RunFields, include_extras=True)) == fields
    # The same types, so a keyword is checked exactly as the field is.
    hints = get_type_hints(RunOptions)
    assert get_type_hints(RunFields) == {name: hints[name] for name in fields}


def test_options_are_frozen_and_replace_makes_a_copy() -> None:
    base = RunOptions(provider="offline", max_steps=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        base.max_steps = 4  # type: ignore[misc]
    changed = base.replace(max_steps=7, instructions="Be brief.")
    assert (base.max_steps, base.instructions) == (3, None)
    assert (changed.max_steps, changed.instructions, changed.provider) == (7, "Be brief.", "offline")
    assert base.replace() is base


def test_an_options_object_runs_and_keywords_override_it(tmp_path: Path) -> None:
    provider = scripted([{"text": "one"}, {"text": "two"}])
    options = RunOptions(provider=provider, workspace=tmp_path, store=None, instructions="Be brief.")
    first = seamline.run_sync("hi", options)
    assert first.text == "one"
    assert provider.last_call is not None
    assert provider.last_call.messages[0].role == "system" and provider.last_call.messages[0].content == "Be brief."
    second = seamline.run_sync("again", options, instructions="Be long.")
    assert second.text == "two"
    assert provider.last_call.messages[0].content == "Be long."


def test_the_agent_builds_the_same_options(tmp_path: Path) -> None:
    provider = scripted([{"text": "ok"}])
    agent = seamline.Agent(provider=provider, instructions="Answer in French.", store=None, workspace=tmp_path)
    built = agent._run_options()
    assert isinstance(built, RunOptions)
    assert (built.instructions, built.store, built.max_steps) == ("Answer in French.", None, 50)
    assert agent.run_sync("hi").text == "ok"
    assert provider.last_call is not None and provider.last_call.messages[0].content == "Answer in French."


def test_the_names_in_public_signatures_are_exported() -> None:
    for name in ("RunOptions", "RunFields", "Approval", "Sandbox", "SandboxMode", "SessionStore", "SQLiteStore"):
        assert name in seamline.__all__ and getattr(seamline, name) is not None


def _public_callables() -> list[tuple[str, object]]:
    found: list[tuple[str, object]] = []
    for name in seamline.__all__:
        obj = getattr(seamline, name)
        if inspect.isfunction(obj):
            found.append((name, obj))
        elif inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if (attr == "__init__" or not attr.startswith("_")) and inspect.isfunction(member):
                    found.append((f"{name}.{attr}", member))
    return found


def test_no_public_signature_says_any() -> None:
    said = []
    for label, function in _public_callables():
        signature = inspect.signature(function)  # type: ignore[arg-type]
        shown = [p.annotation for p in signature.parameters.values()] + [signature.return_annotation]
        said += [(label, a) for a in shown if a is not inspect.Parameter.empty and re.search(r"\bAny\b", str(a))]
    assert said == []
    assert len(_public_callables()) > 50  # the walk sees the surface (functions and methods)
