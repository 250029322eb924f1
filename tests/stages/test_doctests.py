"""The examples in the docstrings of the extension-seam modules run."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "seamline.stages.slots",
    "seamline.stages.chain",
    "seamline.stages.builder",
    "seamline.stages.masking",
    "seamline.tools.sources",
    "seamline.sessions.rules",
    "seamline.tools.mcp",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    failed, attempted = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert attempted > 0, f"{name} has no example"
    assert failed == 0
