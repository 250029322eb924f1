"""``seamline run --pipeline``, ``seamline pipelines`` and ``seamline trace`` from the command line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from seamline.cli.main import EXIT_CODES, main

from .support import FABRICATED, make_workspace, read_then_answer


def cli(cmd: list[str], env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, *args], capture_output=True, text=True, env=env, timeout=120)


def test_exit_codes_are_distinct_and_documented() -> None:
    codes = {
        k: EXIT_CODES[k]
        for k in (
            "completed",
            "failed",
            "usage",
            "budget",
            "oscillating",
            "exhausted",
            "vetoed",
            "invalid_transition",
            "aborted",
        )
    }
    assert len(set(codes.values())) == len(codes)
    assert (codes["oscillating"], codes["exhausted"], codes["vetoed"], codes["invalid_transition"]) == (4, 5, 6, 7)


def test_pipelines_list_and_show(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pipelines", "list", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["name"] for r in rows] == ["single", "answer-review"]
    assert main(["pipelines", "show", "answer-review", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["definition_hash"] == rows[1]["definition_hash"]
    assert shown["definition"]["convergence"]["strategy"] == "reviewer-approval"
    assert main(["pipelines", "show", "answer-review"]) == 0
    assert "review       roles: reviewer" in capsys.readouterr().out
    assert main(["pipelines", "show", "no-such"]) == 2
    assert "unknown pipeline 'no-such'" in capsys.readouterr().err


def test_vetoed_run_exits_6_and_its_exported_trace_verifies(
    tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]
) -> None:
    ws = make_workspace(tmp_path)
    script = tmp_path / "writer.json"
    script.write_text(json.dumps(read_then_answer(FABRICATED)))
    done = cli(
        seamline_cmd,
        cli_env,
        "run",
        "--pipeline",
        "answer-review",
        "-p",
        "scripted",
        "-o",
        f"script={script}",
        "-w",
        str(ws),
        "q",
    )
    assert done.returncode == 6, done.stderr
    assert "answer-review aborted (vetoed)" in done.stderr
    run_id = done.stderr.split(" · run ")[1].split(" ")[0]
    trace_file = Path(cli_env["SEAMLINE_STORE"]).parent / "traces" / f"{run_id}.jsonl"
    assert trace_file.is_file()
    exported = tmp_path / "exported.jsonl"
    assert cli(seamline_cmd, cli_env, "trace", "export", run_id, "-o", str(exported)).returncode == 0
    assert exported.read_bytes() == trace_file.read_bytes()
    verified = cli(seamline_cmd, cli_env, "trace", "verify", "--file", str(exported), "--json")
    assert verified.returncode == 0 and json.loads(verified.stdout)["stop_reason"] == "vetoed"


def test_budget_run_exits_3(tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]) -> None:
    script = tmp_path / "writer.json"
    script.write_text(json.dumps(read_then_answer("x\n", cost=0.01)))
    done = cli(
        seamline_cmd,
        cli_env,
        "run",
        "--pipeline",
        "single",
        "-p",
        "scripted",
        "-o",
        f"script={script}",
        "-w",
        str(make_workspace(tmp_path)),
        "--budget-usd",
        "0.005",
        "--json",
        "q",
    )
    assert done.returncode == 3
    last = json.loads(done.stdout.splitlines()[-1])
    assert (last["type"], last["outcome"], last["stop_reason"]) == ("complete", "budget", "budget")


def test_plain_run_is_unchanged(tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]) -> None:
    done = cli(seamline_cmd, cli_env, "run", "--json", "-w", str(make_workspace(tmp_path)), "What is a provider?")
    assert done.returncode == 0
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines[0]["type"] == "session" and all("run_id" not in line for line in lines)
    assert not (Path(cli_env["SEAMLINE_STORE"]).parent / "traces").exists()


def test_trace_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", "show", "nope"]) == 2
    assert "no trace at" in capsys.readouterr().err
    assert main(["trace", "show", "../etc"]) == 2
    assert "not a run id" in capsys.readouterr().err
    assert main(["trace", "verify"]) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text("hello\n")
    assert main(["trace", "replay", "--file", str(bad)]) == 1
    assert "not a trace record" in capsys.readouterr().err


def test_a_failed_pipeline_says_why_and_trace_show_too(
    tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]
) -> None:
    env = {k: v for k, v in cli_env.items() if k not in ("ANTHROPIC_API_KEY", "SEAMLINE_BLOCK_REAL_PROVIDERS")}
    done = cli(seamline_cmd, env, "run", "--pipeline", "answer-review", "--provider", "anthropic", "How?")
    assert done.returncode == EXIT_CODES["failed"]
    lines = done.stderr.splitlines()
    assert any("writer failed (auth)" in line and "ANTHROPIC_API_KEY" in line for line in lines), done.stderr
    assert "Traceback" not in done.stderr
    run_id = lines[-1].split("· run ")[1].split()[0]
    shown = cli(seamline_cmd, env, "trace", "show", run_id)
    assert "why" in shown.stdout and "ANTHROPIC_API_KEY" in shown.stdout
    as_json = json.loads(cli(seamline_cmd, env, "trace", "show", run_id, "--json").stdout)
    assert "auth" in as_json["detail"]
