"""`seamline trace` and `seamline revert` take the short ids `sessions list` and `trace list`
print (a unique prefix); an ambiguous one is an error; `trace list` shows the traces kept."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from seamline.cli.main import main
from seamline.sandbox.journal import EditJournal, journal_path_for


def sh(cmd: list[str], env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=120, check=False)


def pipeline_run(cmd: list[str], env: dict[str, str], workspace: Path) -> str:
    done = sh(cmd, env, "run", "--pipeline", "single", "--json", "-w", str(workspace), "What is a provider?")
    assert done.returncode == 0, done.stderr
    return next(json.loads(ln)["payload"]["run_id"] for ln in done.stdout.splitlines() if '"run_id"' in ln)


def test_trace_takes_short_run_ids_session_ids_and_lists_runs(
    seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path
) -> None:
    run_id = pipeline_run(seamline_cmd, cli_env, tmp_path)
    shown = sh(seamline_cmd, cli_env, "trace", "show", run_id[:12], "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["run_id"] == run_id
    # The session ids `sessions list` prints, cut to 12, name the run they belong to.
    listed = sh(seamline_cmd, cli_env, "sessions", "list")
    short_session = listed.stdout.split()[0]
    verified = sh(seamline_cmd, cli_env, "trace", "verify", short_session, "--json")
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout)["run_id"] == run_id
    traces = sh(seamline_cmd, cli_env, "trace", "list", "--json")
    rows = [json.loads(ln) for ln in traces.stdout.splitlines()]
    assert [(r["run_id"], r["pipeline"], r["outcome"]) for r in rows] == [(run_id, "single", "completed")]
    text = sh(seamline_cmd, cli_env, "trace", "list")
    assert text.stdout.split()[0] == run_id[:12] and "single" in text.stdout


def test_an_ambiguous_or_too_short_prefix_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SEAMLINE_TRACES", str(tmp_path))
    for name in ("abcd1111", "abcd2222"):
        (tmp_path / f"{name}.jsonl").write_text("")
    assert main(["trace", "show", "abcd"]) == 2
    assert "ambiguous" in capsys.readouterr().err
    assert main(["trace", "show", "abc"]) == 2
    assert "ambiguous" in capsys.readouterr().err
    (tmp_path / "abcd2222.jsonl").unlink()
    assert main(["trace", "show", "ab"]) == 2
    assert "too short" in capsys.readouterr().err


def test_revert_takes_a_unique_prefix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store.db"
    ws = tmp_path / "ws"
    ws.mkdir()
    journal = EditJournal(journal_path_for(store))
    for run_id in ("5f0c1aaa9999", "5f0c2bbb9999"):
        with journal.track(run_id=run_id, workspace=ws, tool="write_file", call_id="c1", paths=[ws / "a.txt"]):
            (ws / "a.txt").write_text(run_id)
    journal.close()
    assert main(["revert", "5f0c", "--store", str(store)]) == 2
    assert "ambiguous" in capsys.readouterr().err
    assert main(["revert", "5f0c1a", "--list", "--json", "--store", str(store)]) == 0
    steps = json.loads(capsys.readouterr().out)
    assert [s["paths"] for s in steps] == [["a.txt"]]
