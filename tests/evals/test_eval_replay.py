"""``--record`` keeps every trial's model exchanges in a cassette; ``seamline eval replay ID``
runs every trial again from them with the model API gone and reproduces each verdict, and
says which trial did not when one cannot be replayed; a rescore asks the API nothing. The
openai provider against the fake
OpenAI API on 127.0.0.1, its requests through seamline's gateway."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from seamline.cli.main import main
from tests.fakes.openai_api import FakeOpenAI
from tests.providers.model_api_support import model_api_env

__all__ = ["model_api_env"]

pytestmark = pytest.mark.usefixtures("model_api_env")


def _turn(content: str) -> list[dict[str, object]]:
    return [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "answer.txt", "content": content}}]},
        {"text": "Written."},
    ]


def test_a_recorded_evaluation_replays_with_the_api_gone_and_the_same_verdicts(
    lab: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = yaml.safe_load((lab / "tasks.yaml").read_text())[:2]
    tasks[1]["check"] = "grep -qx nope answer.txt"  # the second task fails whatever is written
    (lab / "two.yaml").write_text(yaml.safe_dump(tasks))
    store = lab / "store" / "s.db"
    common = ["--store", str(store), "--yes", "--json"]
    with FakeOpenAI(script=[*_turn("ok\n"), *_turn("ok\n")]) as fake:
        argv = ["eval", str(lab / "two.yaml"), "-p", "openai", "-m", "gpt-4o", "-o", f"base_url={fake.base_url}"]
        assert main([*argv, "--record", *common]) == 0
        recorded = json.loads(capsys.readouterr().out)
        sent = len(fake.model_requests())
        # A rescore with another check changes the verdicts and asks the API nothing.
        rescore = ["eval", "rescore", recorded["id"][:8], "--check", "grep -qx ok answer.txt", *common]
        assert main(rescore) == 0
        assert [t["passes"] for t in json.loads(capsys.readouterr().out)["tasks"]] == [1, 1]
        assert len(fake.model_requests()) == sent
    assert sent == 4
    assert [t["passes"] for t in recorded["tasks"]] == [1, 0]
    eval_id = recorded["id"]
    cassettes = sorted((lab / "store" / "evals" / eval_id / "cassettes").iterdir())
    assert len(cassettes) == 2
    # The fake is gone: the replay reaches nothing, and every verdict comes out the same.
    assert main(["eval", "replay", eval_id[:8], *common]) == 0
    out = capsys.readouterr()
    replayed = json.loads(out.out)
    assert "all 2 verdicts reproduced from the cassettes" in out.err
    assert [t["passes"] for t in replayed["tasks"]] == [1, 0]
    assert replayed["id"] != eval_id
    # A cassette gone: that trial cannot run again, and the replay says which and exits 1.
    trials = [
        json.loads(line) for line in (lab / "store" / "evals" / eval_id / "trials.jsonl").read_text().splitlines()
    ]
    first = next(t for t in trials if t["task"] == "t1")
    (lab / "store" / "evals" / eval_id / "cassettes" / first["cassette"]).unlink()
    assert main(["eval", "replay", eval_id[:8], *common]) == 1
    err = capsys.readouterr().err
    assert "t1 / openai/gpt-4o / sample 1: passed when recorded, failed on replay" in err


def test_record_is_refused_for_a_backend_whose_requests_do_not_pass_the_gateway(
    lab: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["eval", str(lab / "tasks.yaml"), "-p", "scripted", "--record", "--store", str(lab / "s.db")]
    assert main(argv) == 2
    assert "cannot be recorded" in capsys.readouterr().err
    assert not (lab / "evals").exists()
