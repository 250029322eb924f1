"""``--judge-provider``: a judge scores the trials of the tasks that have a rubric, from the
rubric and the trial's diff; an answer without the verdict line is unreadable, never a score."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import yaml

from seamline.cli.main import main
from seamline.evals.judge import read_verdict
from tests.evals.lab import script


def _judge(lab: Path, text: str) -> str:
    path = lab / "judge.json"
    path.write_text(json.dumps([{"text": text, "usage": {"input_tokens": 50, "output_tokens": 9, "cost_usd": 0.003}}]))
    return str(path)


def _dataset(lab: Path) -> Path:
    tasks = yaml.safe_load((lab / "tasks.yaml").read_text())[:2]
    tasks[0]["rubric"] = "The answer file holds one short word: RUBRIC-MARK."
    (lab / "two.yaml").write_text(yaml.safe_dump(tasks))
    return lab / "two.yaml"


def _run(lab: Path, capsys: pytest.CaptureFixture[str], judge_text: str) -> dict:  # type: ignore[type-arg]
    argv = [
        "eval",
        str(_dataset(lab)),
        *("-p", "scripted", "-o", f"script={script(lab / 'good.json', 'ok', 0.006)}"),
        *("--judge-provider", "scripted", "--judge-option", f"script={_judge(lab, judge_text)}"),
        *("--store", str(lab / "store" / "s.db"), "--yes", "--json"),
    ]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_the_judge_scores_the_trials_with_a_rubric_from_the_rubric_and_the_diff(
    lab: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _run(lab, capsys, 'The file holds "ok".\n{"verdict": "pass", "score": 0.75}')
    variant = data["variants"][0]
    assert (variant["judged"], variant["judge_passes"], variant["mean_judge_score"]) == (1, 1, 0.75)
    assert variant["judge_cost_usd"] == pytest.approx(0.003)
    assert variant["cost_usd"] == pytest.approx(2 * 0.012)  # the agents' cost, the judge's apart
    # The judge was asked with the rubric and the trial's diff (its session is in the store).
    with sqlite3.connect(lab / "store" / "s.db") as db:
        prompts = [str(row) for row in db.execute("select * from raw_log") if "RUBRIC-MARK" in str(row)]
    assert len(prompts) == 1 and "answer.txt" in prompts[0] and "+ok" in prompts[0], prompts


def test_an_answer_without_the_verdict_line_is_unreadable_and_has_no_score(
    lab: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _run(lab, capsys, "Looks fine to me, 9/10.")
    variant = data["variants"][0]
    assert (variant["judged"], variant["judge_passes"], variant["mean_judge_score"]) == (1, 0, None)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('why\n{"verdict": "pass", "score": 1}', ("pass", 1.0)),
        ('```\n{"verdict": "fail", "score": 0.2}\n```', ("fail", 0.2)),
        ('{"verdict": "pass", "score": 1.5}', None),
        ('{"verdict": "maybe", "score": 0.5}', None),
        ('{"verdict": "pass", "score": true}', None),
        ('{"verdict": "pass", "score": 0.5}\nand more', None),
        ("", None),
    ],
)
def test_the_verdict_is_read_from_the_last_line_only(text: str, expected: tuple[str, float] | None) -> None:
    assert read_verdict(text) == expected
