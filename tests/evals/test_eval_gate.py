"""The baseline gate (exit 8 when a variant did worse) and rescore (verdicts again, no agent)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from seamline.cli.main import main
from tests.evals.lab import script


def _run(
    lab: Path, capsys: pytest.CaptureFixture[str], *extra: str, good: str = "ok", cost: float = 0.006
) -> tuple[int, dict, str]:  # type: ignore[type-arg]
    (lab / "checks.log").unlink(missing_ok=True)  # the flaky variant's count starts again
    variants = [
        *("-p", "scripted", "-o", f"script={script(lab / 'good.json', good, cost)}"),
        *("-p", "scripted", "-o", f"script={script(lab / 'flaky.json', 'flaky', 0.002)}"),
    ]
    store = lab / "store" / "s.db"
    code = main(
        ["eval", str(lab / "tasks.yaml"), *variants, "--samples", "2", "--store", str(store), "--yes", "--json", *extra]
    )
    out = capsys.readouterr()
    return code, json.loads(out.out), out.err


def test_the_gate_fails_when_a_variant_is_made_worse_and_passes_on_a_rerun_of_the_same(
    lab: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, baseline, _ = _run(lab, capsys)
    assert code == 0
    (lab / "baseline.json").write_text(json.dumps(baseline))
    # The same again, against the stored evaluation and against its file: no regression.
    for given in (baseline["id"][:8], str(lab / "baseline.json")):
        code, _, err = _run(lab, capsys, "--baseline", given)
        assert code == 0, err
        assert "scripted#1: pass rate 1.00 -> 1.00 on 12 paired trials" in err and "REGRESSED" not in err
    # The first variant made worse: every answer wrong now.
    code, worse, err = _run(lab, capsys, "--baseline", baseline["id"][:8], good="no")
    assert code == 8, err
    assert "scripted#1: pass rate 1.00 -> 0.00" in err and "REGRESSED: pass rate fell" in err
    assert "scripted#2: pass rate 0.75 -> 0.75" in err and err.count("REGRESSED") == 1
    # Its cost per pass doubled: a regression past 50 %, not past 150 %.
    code, _, err = _run(lab, capsys, "--baseline", baseline["id"][:8], "--max-cost-increase", "50%", cost=0.012)
    assert code == 8 and "cost per pass rose +100%, past 50%" in err
    code, _, err = _run(lab, capsys, "--baseline", baseline["id"][:8], "--max-cost-increase", "1.5", cost=0.012)
    assert code == 0, err
    # show compares the same way.
    assert (
        main(
            ["eval", "show", worse["id"][:8], "--store", str(lab / "store" / "s.db"), "--baseline", baseline["id"][:8]]
        )
        == 8
    )


def _sessions(store: Path) -> int:
    with sqlite3.connect(store) as db:
        return int(db.execute("select count(*) from sessions").fetchone()[0])


def test_rescore_with_a_changed_check_changes_the_verdicts_and_runs_no_agent(
    lab: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, first, _ = _run(lab, capsys)
    assert code == 0 and first["variants"][0]["passes"] == 12
    store = lab / "store" / "s.db"
    sessions = _sessions(store)
    (lab / "good.json").unlink()  # an agent run now could not even load its script
    (lab / "flaky.json").unlink()
    args = ["eval", "rescore", first["id"][:8], "--store", str(store), "--json"]
    assert main([*args, "--check", "grep -qx no answer.txt"]) == 0
    none = json.loads(capsys.readouterr().out)
    assert [v["passes"] for v in none["variants"]] == [0, 0]
    assert main([*args, "--check", "grep -qx flaky answer.txt"]) == 0
    rescored = json.loads(capsys.readouterr().out)
    assert [v["passes"] for v in rescored["variants"]] == [0, 12]  # every flaky trial wrote "flaky"
    # Cost and tokens are the original trials'.
    assert [v["cost_usd"] for v in rescored["variants"]] == pytest.approx([v["cost_usd"] for v in first["variants"]])
    assert _sessions(store) == sessions
    assert main(["eval", "list", "--store", str(store)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
