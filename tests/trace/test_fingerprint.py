"""Fingerprints: deterministic fields only; two deterministic runs share one."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from seamline.pipeline import resolve_pipeline
from seamline.trace.verify import verify_trace
from tests.pipeline.support import make_workspace, run_pipeline


def test_two_offline_runs_share_the_fingerprint(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    a, _ = run_pipeline(resolve_pipeline("answer-review"), "How do I add a provider?", workspace=ws)
    b, _ = run_pipeline(resolve_pipeline("answer-review"), "How do I add a provider?", workspace=ws)
    c, _ = run_pipeline(resolve_pipeline("answer-review"), "What about budgets?", workspace=ws)
    assert a.run_id != b.run_id and a.report.head_hash != b.report.head_hash  # run ids and times differ
    assert a.report.fingerprint == b.report.fingerprint != c.report.fingerprint
    assert verify_trace(a.writer.data()).fingerprint == a.report.fingerprint  # recomputable from the file


def test_cli_run_answer_review_is_deterministic_and_tagged(
    tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]
) -> None:
    ws = make_workspace(tmp_path)
    prints = []
    for _ in range(2):
        done = subprocess.run(
            [
                *seamline_cmd,
                "run",
                "--pipeline",
                "answer-review",
                "--json",
                "--workspace",
                str(ws),
                "How do I add a provider?",
            ],
            capture_output=True,
            text=True,
            env=cli_env,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        lines = [json.loads(line) for line in done.stdout.splitlines()]
        run_id = lines[0]["run_id"]
        assert all(line["run_id"] == run_id for line in lines)  # every event carries the run id
        assert lines[-1]["type"] == "complete" and lines[-1]["stop_reason"] == "converged"
        end = lines[-2]
        assert end["type"] == "raw" and end["source"] == "run"
        shown = subprocess.run(
            [*seamline_cmd, "trace", "show", run_id, "--json"], capture_output=True, text=True, env=cli_env, timeout=60
        )
        summary = json.loads(shown.stdout)
        assert summary["run_id"] == run_id and summary["ok"]
        assert summary["fingerprint"] == end["payload"]["fingerprint"]
        assert summary["head_hash"] == end["payload"]["head_hash"]
        assert summary["definition_hash"] == resolve_pipeline("answer-review").definition_hash()
        prints.append(summary["fingerprint"])
    assert prints[0] == prints[1]
