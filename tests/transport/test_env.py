"""Environment composition: layers in order, ``None`` unsets."""

from __future__ import annotations

import pytest

from seamline.transport.env import compose_env


def test_layers_apply_in_order_and_none_unsets() -> None:
    base = {"KEEP": "1", "ROUTE": "openrouter", "KEY": "old"}
    env = compose_env(base, {"KEY": "new", "ROUTE": None}, {"EXTRA": "x", "KEY": "newest", "ABSENT": None})
    assert env == {"KEEP": "1", "KEY": "newest", "EXTRA": "x"}
    assert base == {"KEEP": "1", "ROUTE": "openrouter", "KEY": "old"}  # the base is not touched


def test_default_base_is_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEAMLINE_ENV_PROBE", "yes")
    monkeypatch.setenv("SEAMLINE_ENV_GONE", "yes")
    env = compose_env(None, {"SEAMLINE_ENV_GONE": None})
    assert env["SEAMLINE_ENV_PROBE"] == "yes" and "SEAMLINE_ENV_GONE" not in env
