"""Install hints say what works for this install: the clone's own pip from a source
checkout (where `pip install 'seamline[x]'` would fetch another copy), the package's extra
otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from seamline import extras

ROOT = Path(__file__).resolve().parents[1]


def test_a_source_checkout_is_told_to_install_its_own_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    hint = extras.install_hint("openai")
    assert hint.endswith("install -e '.[openai]'") and not hint.startswith("cd ")
    monkeypatch.chdir(ROOT / "docs")
    assert extras.install_hint("openai").startswith(f"cd {ROOT} && ")


def test_an_installed_package_is_told_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(extras, "_checkout", lambda: None)
    assert extras.install_hint("mcp") == "pip install 'seamline[mcp]'"
