"""MCP configuration: user file < workspace .mcp.json < profile < --mcp-config, each server declaring its transport."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seamline.errors import InvalidRequest
from seamline.tools.mcp_config import load_mcp_config, parse_mcp_servers, read_mcp_file


def _write(path: Path, servers: dict[str, object]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


def test_layers_merge_later_winning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("DEMO_TOKEN", "t0ken")
    _write(
        tmp_path / "config/seamline/mcp.json",
        {
            "a": {"type": "stdio", "command": "user-a"},
            "b": {"type": "stdio", "command": "user-b"},
            "gone": {"command": "user-gone"},
        },
    )
    workspace = tmp_path / "ws"
    _write(
        workspace / ".mcp.json",
        {"b": {"type": "http", "url": "http://127.0.0.1:1/mcp"}, "c": {"command": "ws-c"}, "gone": {"disabled": True}},
    )
    extra = _write(
        tmp_path / "extra.json",
        {"c": {"type": "stdio", "command": "cli-c", "args": ["--token", "${DEMO_TOKEN}"], "required": True}},
    )
    servers = load_mcp_config(
        workspace=workspace,
        profile_servers={
            "d": {"type": "streamable-http", "url": "http://127.0.0.1:2/mcp", "headers": {"X-Key": "${DEMO_TOKEN}"}}
        },
        files=[extra],
    )
    by_name = {s.name: s for s in servers}
    assert sorted(by_name) == ["a", "b", "c", "d"]
    assert by_name["a"].command == "user-a" and by_name["a"].origin.endswith("config/seamline/mcp.json")
    assert by_name["b"].transport == "http" and by_name["b"].origin.endswith(".mcp.json")
    assert by_name["c"].command == "cli-c" and by_name["c"].args == ("--token", "t0ken") and by_name["c"].required
    assert (
        by_name["d"].transport == "http"
        and by_name["d"].headers == {"X-Key": "t0ken"}
        and by_name["d"].origin == "profile"
    )


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"url": "http://127.0.0.1/mcp"}, "declare its transport"),
        ({"type": "sse", "url": "http://127.0.0.1/sse"}, "transport 'sse' is not supported"),
        ({"type": "stdio"}, "a stdio server needs a command"),
        ({"type": "http", "url": "ftp://x"}, "needs a url starting with http"),
        ({"command": "x", "args": "not a list"}, "args is a list of strings"),
        ({"command": "x", "color": "blue"}, "unknown keys ['color']"),
        ({"command": "x", "tool_class": "admin"}, "tool_class is one of"),
        ({"command": "x", "call_timeout": -1}, "call_timeout is a positive number"),
    ],
)
def test_mistakes_are_clear(entry: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidRequest, match="server 'demo'") as caught:
        parse_mcp_servers({"demo": entry}, origin="test.json")
    assert message in caught.value.message


def test_bad_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InvalidRequest, match="not valid JSON"):
        read_mcp_file(bad)
    with pytest.raises(InvalidRequest, match="does not exist"):
        read_mcp_file(tmp_path / "missing.json")
    assert read_mcp_file(tmp_path / "missing.json", missing_ok=True) == {}
    empty = tmp_path / "empty.json"
    empty.write_text("{}")
    with pytest.raises(InvalidRequest, match="no mcpServers"):
        read_mcp_file(empty)


def test_cli_reports_a_bad_mcp_config_as_one_line(
    tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]
) -> None:
    config = _write(tmp_path / "mcp.json", {"demo": {"type": "carrier-pigeon"}})
    cli_env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    proc = subprocess.run(
        [*seamline_cmd, "run", "--mcp-config", str(config), "-w", str(tmp_path), "hello"],
        capture_output=True,
        text=True,
        env=cli_env,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"seamline: invalid_request error: {config}: server 'demo': transport 'carrier-pigeon' is not supported; use stdio or http (streamable HTTP)"
    ]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)
_keys = st.sampled_from(
    ["type", "command", "args", "env", "url", "headers", "required", "call_timeout", "tool_class", "x"]
)


@given(st.dictionaries(st.text(max_size=12), st.dictionaries(_keys, _json, max_size=6), max_size=4))
def test_any_entries_give_configs_or_a_classified_error(entries: dict[str, dict[str, object]]) -> None:
    try:
        servers = parse_mcp_servers(entries)
    except InvalidRequest as exc:
        assert exc.message
    else:
        assert [s.name for s in servers] == list(entries)
        assert all(s.transport in ("stdio", "http") for s in servers)


def test_mcp_config_dir_is_the_folder_of_the_declaring_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    config = folder / "mcp.json"
    entry = {"command": "${MCP_CONFIG_DIR}/bin/server", "args": ["${MCP_CONFIG_DIR}/index.js", "stdio"]}
    config.write_text(json.dumps({"mcpServers": {"local": {**entry, "cwd": "${MCP_CONFIG_DIR}"}}}))
    monkeypatch.chdir(tmp_path)  # not the file's folder: a relative path would miss
    (server,) = parse_mcp_servers(read_mcp_file("project/mcp.json"))
    assert server.command == f"{folder}/bin/server"
    assert server.args == (f"{folder}/index.js", "stdio") and server.cwd == str(folder)
