"""The examples of the extension-seam pages run: every ```python block of a page in one
namespace, every `$ seamline …` line of a ```console block as a real command."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = ["modules.md", "stages.md", "tool-sources.md", "mcp.md", "permissions.md"]
PYTHON = re.compile(r"```python\n(.*?)```", re.S)
CONSOLE = re.compile(r"```console\n(.*?)```", re.S)
EVERYTHING = ROOT / ".tools/mcp-servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js"


@pytest.mark.parametrize("page", PAGES)
def test_python_examples_run(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (DOCS / page).read_text()
    blocks = PYTHON.findall(text)
    assert blocks, f"{page} has no python example"
    if "SEAMLINE_DOCS_EVERYTHING" in text:
        if not EVERYTHING.is_file():
            pytest.fail(f"{EVERYTHING} is missing; run `bash scripts/setup --dev` (scripts/system/30-mcp-servers.sh)")
        monkeypatch.setenv("SEAMLINE_DOCS_EVERYTHING", str(EVERYTHING))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "empty-config"))
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs_{page.replace('.', '_').replace('-', '_')}"}
    for block in blocks:
        exec(compile(block, f"{page}:example", "exec"), namespace)


def test_permissions_console_example_runs(tmp_path: Path, cli_env: dict[str, str]) -> None:
    lines = [
        line[2:]
        for block in CONSOLE.findall((DOCS / "permissions.md").read_text())
        for line in block.splitlines()
        if line.startswith("$ ")
    ]
    assert len(lines) == 5
    outputs = []
    for line in lines:
        argv = shlex.split(line)
        assert argv[0] == "seamline"
        proc = subprocess.run(
            [sys.executable, "-m", "seamline", *argv[1:]],
            capture_output=True,
            text=True,
            env=cli_env,
            cwd=tmp_path,
            timeout=30,
        )
        assert proc.returncode == 0, (line, proc.stderr)
        outputs.append(proc.stdout)
    assert outputs[3].splitlines() == [
        "#1 allow tool=shell pattern=command=git status*",
        "#2 deny class=network",
        "#3 ask tool=write_file pattern=path=*.env",
    ]
    assert outputs[4].strip() == "removed rule #2"


def test_the_mcp_command_example_calls_the_servers_tool(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """docs/mcp.md's command really calls the reference server's tool (on the offline
    provider it called none): its config and script saved as the page says, its
    `$ seamline` line run, the tool lines it shows are the ones the run gives."""
    import json

    if not EVERYTHING.is_file():
        pytest.fail(f"{EVERYTHING} is missing; run `bash scripts/setup --dev` (scripts/system/30-mcp-servers.sh)")
    text = (DOCS / "mcp.md").read_text()
    config, script = re.findall(r"```json\n(.*?)```", text, re.S)[:2]
    (tmp_path / "mcp.json").write_text(config)  # "at the root of a seamline clone": its .tools/ beside it
    (tmp_path / ".tools").symlink_to(ROOT / ".tools")
    (tmp_path / "echo.json").write_text(script)
    (console,) = CONSOLE.findall(text)
    lines = console.splitlines()
    (command,) = [line[2:] for line in lines if line.startswith("$ ")]
    argv = shlex.split(command)
    assert argv[0] == "seamline" and "--mcp-config" in argv
    env = {**cli_env, "XDG_CONFIG_HOME": str(tmp_path / "empty-config")}
    proc = subprocess.run(
        [sys.executable, "-m", "seamline", *argv[1:]], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    shown = [json.loads(line) for line in lines if line.startswith('{"type":"tool_')]
    assert [e for e in events if e["type"].startswith("tool_")] == shown
    assert shown[0]["source"] == "mcp:everything" and shown[1]["is_error"] is False
