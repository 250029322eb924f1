"""docs/providers-acp-opencode.md says what the code does: its example commands parse and
name real options, and the options it lists carry the defaults it states."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from seamline.cli.main import parse_options
from seamline.providers.acp.provider import AcpProvider
from seamline.providers.base import Provider
from seamline.providers.opencode.provider import OpenCodeProvider
from seamline.providers.registry import create_provider

DOC = Path(__file__).resolve().parents[2] / "docs" / "providers-acp-opencode.md"


def examples() -> list[list[str]]:
    text = DOC.read_text()
    blocks = re.findall(r"```sh\n(.*?)```", text, flags=re.S)
    commands = []
    for block in blocks:
        joined = block.replace("\\\n", " ")
        words = shlex.split(joined)
        while words and "=" in words[0] and not words[0].startswith("-"):
            words.pop(0)  # environment assignments before the command
        commands.append(words)
    return commands


def test_every_example_names_a_provider_and_options_it_accepts() -> None:
    found = examples()
    assert len(found) == 2
    for words in found:
        assert words[:2] == ["seamline", "run"]
        provider = words[words.index("--provider") + 1]
        options = [words[i + 1] for i, w in enumerate(words) if w == "--provider-option"]
        instance = create_provider(provider, options=parse_options(options))
        assert instance.name == provider


@pytest.mark.parametrize(("heading", "cls"), [("## `acp`", AcpProvider), ("## `opencode`", OpenCodeProvider)])
def test_listed_options_and_defaults_match(heading: str, cls: type[Provider]) -> None:
    text = DOC.read_text()
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    listing = section.split("Options:", 1)[1].split("\n\n", 1)[0]
    named = re.findall(r"`(\w+)`(?: \(([^)]*)\))?", listing)
    assert {name for name, _ in named} == set(cls.options)
    for name, default in named:
        spec = cls.options[name]
        if default == "required":
            assert spec.default is None
        elif default:
            number = re.match(r"[\w.]+", default.strip("`"))
            assert number is not None and spec.default == number.group(0), (name, default, spec.default)
