"""Modules: use() configures, required modules are checked before any session opens,
nameless modules satisfy nothing, installed is not active."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from seamline.errors import InvalidRequest
from seamline.runner import run
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.stages import AgentBuilder, AgentProfile, MissingModules, StageSlot, available_modules, load_module
from seamline.stages.builder import RunParts
from seamline.testing import scripted
from seamline.tools import Toolset, tool


class Named:
    def __init__(self, name: str | None, log: list[str] | None = None) -> None:
        self._name = name
        self.log = log if log is not None else []

    @property
    def name(self) -> str | None:
        return self._name

    def configure(self, builder: AgentBuilder) -> None:
        self.log.append(f"configure:{self._name}")


def test_use_calls_configure_and_records_the_name() -> None:
    log: list[str] = []
    builder = AgentBuilder().use(Named("a", log)).use(Named(None, log))
    assert log == ["configure:a", "configure:None"]
    assert builder.module_names == ["a"]


def test_missing_modules_are_all_named_and_no_session_opens(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    builder = AgentBuilder().use(Named("present"))
    profile = AgentProfile(required_modules=("present", "first.missing", "second.missing"))
    with pytest.raises(MissingModules) as caught:
        asyncio.run(
            run(
                "go",
                provider=scripted([{"text": "x"}]),
                workspace=tmp_path,
                store=store,
                builder=builder,
                profile=profile,
            )
        )
    assert caught.value.missing == ("first.missing", "second.missing")
    assert "first.missing, second.missing" in caught.value.message
    assert caught.value.kind == "invalid_request"
    assert store.list_sessions() == []
    store.close()


def test_a_nameless_module_cannot_satisfy_a_requirement() -> None:
    builder = AgentBuilder().use(Named(None))
    with pytest.raises(MissingModules, match="missing required modules: None"):
        builder.check(AgentProfile(required_modules=("None",)))


def test_same_module_name_twice_is_refused() -> None:
    builder = AgentBuilder().use(Named("a"))
    with pytest.raises(InvalidRequest, match="already in use"):
        builder.use(Named("a"))


def test_required_modules_present_lets_the_run_go(tmp_path: Path) -> None:
    result = asyncio.run(
        run(
            "go",
            provider=scripted([{"text": "fine"}]),
            workspace=tmp_path,
            builder=AgentBuilder().use(Named("a")),
            profile=AgentProfile(required_modules=("a",)),
        )
    )
    assert result.outcome == "completed" and result.text == "fine"


_PLUGIN = """
CONFIGURED = []

class PluginModule:
    name = "example.plugin"

    def configure(self, builder):
        CONFIGURED.append(builder)
"""


@pytest.fixture
def installed_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A package installed the way pip installs one: a module and a dist-info with entry points."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "example_plugin.py").write_text(_PLUGIN)
    info = site / "example_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: example-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[seamline.modules]\nexample.plugin = example_plugin:PluginModule\n")
    monkeypatch.syspath_prepend(str(site))
    yield site
    sys.modules.pop("example_plugin", None)


def test_an_installed_module_is_found_by_entry_point_but_not_active(installed_plugin: Path, tmp_path: Path) -> None:
    assert available_modules()["example.plugin"] == "example_plugin:PluginModule"
    result = asyncio.run(run("go", provider=scripted([{"text": "x"}]), workspace=tmp_path))
    assert result.outcome == "completed"
    plugin = sys.modules.get("example_plugin")
    assert plugin is None or plugin.CONFIGURED == []  # installed, never imported or configured
    module = load_module("example.plugin")
    assert module.name == "example.plugin"
    builder = AgentBuilder().use(module)
    assert sys.modules["example_plugin"].CONFIGURED == [builder]


def test_unknown_module_name_lists_what_exists() -> None:
    with pytest.raises(InvalidRequest, match=r"unknown module 'nope'; available: .*masking"):
        load_module("nope")


def test_builtin_masking_module_loads_by_name() -> None:
    module = load_module("masking")
    assert module.name == "masking"
    builder = AgentBuilder().use(module)
    stages = builder.stages()
    assert [slot for slot, _ in stages.chat] == [StageSlot.MASKING]
    assert [slot for slot, _ in stages.tool] == [StageSlot.MASKING]


def test_host_tool_wins_over_a_source_tool_and_the_shadowing_is_reported(tmp_path: Path) -> None:
    @tool
    def echo(text: str) -> str:
        """Host echo."""
        return "host:" + text

    class Source:
        name = "extra"

        async def get_tools(self, context):  # type: ignore[no-untyped-def]
            @tool(name="echo")
            def other(text: str) -> str:
                return "source:" + text

            @tool
            def ping() -> str:
                """Ping."""
                return "pong"

            return [other, ping]

    notes: list[str] = []

    async def go() -> RunParts:
        builder = AgentBuilder().add_tool_source(Source())
        async with builder.open_run(host=Toolset([echo]), report=notes.append) as parts:
            return parts

    parts = asyncio.run(go())
    assert parts.tools.names() == ["echo", "ping"]
    assert parts.tools.get("echo") is echo
    assert notes == ["tool 'echo' of source extra is shadowed by the host tool of the same name"]


def test_profile_allowlist_limits_the_offered_tools(tmp_path: Path) -> None:
    @tool
    def a() -> str:
        """A."""
        return "a"

    @tool
    def b() -> str:
        """B."""
        return "b"

    async def go() -> list[str]:
        async with AgentBuilder().open_run(host=Toolset([a, b]), profile=AgentProfile(allowed_tools=("b",))) as parts:
            return parts.tools.names()

    assert asyncio.run(go()) == ["b"]


def test_cli_run_module_masking_and_an_unknown_module(
    tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]
) -> None:
    import json
    import subprocess

    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "I will not repeat [MASKED_KEY_1] to anyone else."}]))
    cli_env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    base = [*seamline_cmd, "run", "--provider", "scripted", "-o", f"script={script}", "-w", str(tmp_path), "--no-store"]
    ok = subprocess.run(
        [*base, "--module", "masking", "--json", "keep sk-abcdefghijklmnopqrstu safe"],
        capture_output=True,
        text=True,
        env=cli_env,
        timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    final = json.loads(ok.stdout.splitlines()[-1])
    assert final["text"] == "I will not repeat sk-abcdefghijklmnopqrstu to anyone else."
    bad = subprocess.run([*base, "--module", "nope", "hi"], capture_output=True, text=True, env=cli_env, timeout=60)
    assert bad.returncode == 2
    assert bad.stderr.startswith("seamline: invalid_request error: unknown module 'nope'; available: masking")
