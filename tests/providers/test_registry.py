"""A backend from a separately installed package runs through `seamline run --provider`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from seamline.errors import InvalidRequest
from seamline.providers.registry import create_provider, provider_names

PLUGIN = '''
from typing import ClassVar
from seamline.providers.base import Provider, OptionSpec
from seamline.events import Text, Usage

class EchoProvider(Provider):
    """Repeats the prompt back, shouting."""
    name: ClassVar[str] = "echo"
    description: ClassVar[str] = "repeats the prompt (a third-party plug-in)"
    default_model: ClassVar[str] = "echo-1"
    options: ClassVar[dict] = {"suffix": OptionSpec("added to the answer", default="!")}
    real = False

    async def _answer(self, request):
        prompt = next(m.content for m in reversed(request.messages) if m.role == "user")
        yield Text(text=prompt.upper() + self.option_values["suffix"])
        yield Usage(input_tokens=3, output_tokens=3, cost_usd=0.0, priced=True)

    def _step(self, request):
        return self._answer(request)
'''


def install_plugin(site: Path) -> None:
    """Lay the plug-in out as pip installs a wheel: the module and its dist-info."""
    (site / "seamline_echo_plugin.py").write_text(PLUGIN)
    info = site / "seamline_echo_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: seamline-echo-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[seamline.providers]\necho = seamline_echo_plugin:EchoProvider\n")
    (info / "RECORD").write_text("")


def test_entry_point_provider_runs_through_the_cli(
    tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    install_plugin(site)
    env = dict(cli_env, PYTHONPATH=f"{cli_env['PYTHONPATH']}:{site}")
    listed = subprocess.run([*seamline_cmd, "providers", "list"], env=env, capture_output=True, text=True, timeout=60)
    assert "echo" in listed.stdout and "third-party" in listed.stdout
    done = subprocess.run(
        [*seamline_cmd, "run", "--provider", "echo", "-o", "suffix=?!", "--json", "hello plug-in"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert events[0]["type"] == "session" and events[0]["provider"] == "echo" and events[0]["model"] == "echo-1"
    assert {k: v for k, v in events[-1].items() if k != "totals"} == {  # the line ends with the run's totals
        "type": "complete",
        "outcome": "completed",
        "stop_reason": "end_turn",
        "text": "HELLO PLUG-IN?!",
    }


def test_installed_is_not_active(tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]) -> None:
    """A plug-in whose import would fail is harmless until named."""
    site = tmp_path / "site"
    site.mkdir()
    install_plugin(site)
    (site / "seamline_echo_plugin.py").write_text("raise RuntimeError('imported without being named')\n")
    env = dict(cli_env, PYTHONPATH=f"{cli_env['PYTHONPATH']}:{site}")
    done = subprocess.run(
        [*seamline_cmd, "run", "--json", "--no-store", "What is here?"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    named = subprocess.run(
        [*seamline_cmd, "run", "-p", "echo", "x"], env=env, capture_output=True, text=True, timeout=60
    )
    assert named.returncode == 2
    assert named.stderr.strip().count("\n") == 0 and "imported without being named" in named.stderr


def test_unknown_provider_names_the_known_ones() -> None:
    with pytest.raises(InvalidRequest, match="unknown provider 'nope'; known: offline, scripted"):
        create_provider("nope")
    assert provider_names()[:2] == ["offline", "scripted"]


def test_a_missing_class_and_an_import_time_bug_are_told_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from seamline.providers import registry

    (tmp_path / "buggy_backend.py").write_text("raise AttributeError('oops at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(registry._BUILTIN, "nameless", "seamline.events:NoSuchProvider")
    monkeypatch.setitem(registry._BUILTIN, "buggy", "buggy_backend:Backend")
    with pytest.raises(InvalidRequest, match=r"seamline\.events has no NoSuchProvider"):
        registry.provider_class("nameless")
    with pytest.raises(InvalidRequest, match="cannot be loaded: AttributeError: oops at import"):
        registry.provider_class("buggy")
