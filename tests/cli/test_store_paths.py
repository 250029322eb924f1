"""Where the store goes: a missing folder is a usage error; reading commands create nothing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import seamline
from seamline.sessions.sqlite_store import SQLiteStore


def sh(cmd: list[str], env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=120)


def test_store_in_a_missing_folder_is_a_usage_error(
    seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path
) -> None:
    store = tmp_path / "missing" / "deeper" / "s.db"
    for args in (
        ["run", "--store", str(store), "x"],
        ["sessions", "list", "--store", str(store)],
        ["permissions", "--store", str(store), "add", "allow", "--tool", "shell"],
        ["run", "--pipeline", "single", "--store", str(store), "x"],
    ):
        done = sh(seamline_cmd, cli_env, *args)
        assert done.returncode == 2, (args, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "does not exist" in lines[0] and str(store.parent) in lines[0], (args, lines)
        assert not (tmp_path / "missing").exists(), args


def test_reading_commands_create_no_store(seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path) -> None:
    explicit = tmp_path / "none.db"
    default = Path(cli_env["SEAMLINE_STORE"])
    for store_args, path in (([], default), (["--store", str(explicit)], explicit)):
        listed = sh(seamline_cmd, cli_env, "permissions", *store_args, "list")
        assert listed.returncode == 0 and listed.stdout.strip() == "no permission rules", listed.stderr
        sessions = sh(seamline_cmd, cli_env, "sessions", "list", *store_args)
        assert sessions.returncode == 0 and sessions.stdout == "", sessions.stderr
        shown = sh(seamline_cmd, cli_env, "sessions", "show", "abcd1234", *store_args)
        assert shown.returncode == 2 and "no session 'abcd1234'" in shown.stderr
        assert not path.exists() and not Path(f"{path}-wal").exists(), store_args


def test_run_sync_takes_a_store_path(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("the store keeps sessions\n")
    for where in (str(tmp_path / "str.db"), tmp_path / "path.db"):
        result = seamline.run_sync("store", workspace=ws, store=where)
        assert result.outcome == "completed"
        store = SQLiteStore(where)
        try:
            record = store.require(result.session_id)
            assert record.status == "completed" and store.usage_rows(record.id)
        finally:
            store.close()
