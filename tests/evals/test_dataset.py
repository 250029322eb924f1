"""A dataset file is read from YAML or JSONL, and every mistake is named with its line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seamline.cli.main import main
from seamline.errors import InvalidRequest
from seamline.evals import Dataset, DatasetError, Task, load_dataset
from seamline.evals.dataset import DEFAULT_TIMEOUT_S, parse_dataset

GOOD_YAML = """\
# two tasks
- id: add-fn
  repository: repos/calc
  commit: main
  setup: make deps
  prompt: Add double.
  check: python -c "import calc"
  rubric: Small.
  timeout_s: 60
  budget_usd: 0.5
  tags: [py, small]
- id: docs.fix_1
  repository: repos/calc
  prompt: Fix the docs.
  check: test -f README.md
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "repos" / "calc").mkdir(parents=True)
    return tmp_path


def test_a_yaml_dataset_gives_typed_tasks_with_repositories_beside_the_file(folder: Path) -> None:
    (folder / "d.yaml").write_text(GOOD_YAML)
    dataset = load_dataset(folder / "d.yaml")
    first, second = dataset.tasks
    assert first == Task(
        id="add-fn",
        repository=str((folder / "repos" / "calc").resolve()),
        commit="main",
        setup="make deps",
        prompt="Add double.",
        check='python -c "import calc"',
        rubric="Small.",
        timeout_s=60.0,
        budget_usd=0.5,
        tags=("py", "small"),
    )
    assert second.timeout_s == DEFAULT_TIMEOUT_S and second.budget_usd is None and second.tags == ()
    assert [t.id for t in dataset.tagged(["small"]).tasks] == ["add-fn"]
    with pytest.raises(InvalidRequest, match="no task carries"):
        dataset.tagged(["rust"])


def test_the_same_tasks_in_jsonl_and_under_a_tasks_key_read_the_same(folder: Path) -> None:
    (folder / "d.yaml").write_text(GOOD_YAML)
    tasks = yaml.safe_load(GOOD_YAML)
    (folder / "d.jsonl").write_text("\n".join(json.dumps(t) for t in tasks) + "\n\n")
    (folder / "w.yml").write_text(yaml.safe_dump({"tasks": tasks}))
    expected = load_dataset(folder / "d.yaml").tasks
    assert load_dataset(folder / "d.jsonl").tasks == expected
    assert load_dataset(folder / "w.yml").tasks == expected


def test_every_mistake_is_named_with_its_line(folder: Path) -> None:
    text = GOOD_YAML + (
        "- id: bad id\n"  # line 16
        "  repository: repos/nope\n"
        '  prompt: ""\n'
        "  timeout_s: -3\n"
        "  budget_usd: lots\n"
        "  colour: red\n"
        "- id: add-fn\n"  # line 22: a second add-fn
        "  repository: repos/calc\n"
        "  prompt: again\n"
        "  check: 'true'\n"
        "  tags: [1]\n"
        "- just a string\n"  # line 27
    )
    (folder / "d.yaml").write_text(text)
    with pytest.raises(DatasetError) as caught:
        load_dataset(folder / "d.yaml")
    found = [(p.line, p.message.split(" ")[0]) for p in caught.value.problems]
    assert found == [
        (16, "missing"),
        (16, "id"),
        (17, "repository"),
        (18, "'prompt'"),
        (19, "timeout_s"),
        (20, "budget_usd"),
        (21, "unknown"),
        (22, "task"),
        (26, "tags"),
        (27, "a"),
    ]
    assert "first on line 2" in caught.value.problems[7].message


def test_broken_files_are_named_too(folder: Path) -> None:
    cases = {
        "a.jsonl": ('{"id": "x"}\n{oops\n[1]\n', [1, 1, 1, 2, 3]),
        "b.yaml": ("- id: x\n  prompt: [unclosed\n", [3]),
        "c.yaml": ("", [0]),
        "d.yaml": ("tasks: 3\n", [1]),
        "e.yaml": ("task:\n  - id: x\n", [1]),
        "f.jsonl": ("\n# only a comment\n", [0]),
    }
    for name, (text, lines) in cases.items():
        (folder / name).write_text(text)
        with pytest.raises(DatasetError) as caught:
            load_dataset(folder / name)
        assert [p.line for p in caught.value.problems] == lines, (name, caught.value.problems)
    with pytest.raises(DatasetError, match="no such file"):
        load_dataset(folder / "missing.yaml")


def test_the_python_form_checks_the_same_fields(folder: Path) -> None:
    task = Task(id="t1", repository=str(folder), prompt="p", check="true")
    assert Dataset(tasks=(task,)).tasks == (task,)
    with pytest.raises(InvalidRequest, match="timeout_s"):
        Task(id="t1", repository=str(folder), prompt="p", check="true", timeout_s=0)
    with pytest.raises(InvalidRequest, match="appears twice"):
        Dataset(tasks=(task, task))
    with pytest.raises(InvalidRequest, match="at least one"):
        Dataset(tasks=())


_field_text = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=20).filter(str.strip)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ids=st.lists(st.from_regex(r"[a-z][a-z0-9._-]{0,10}", fullmatch=True), min_size=1, max_size=4, unique=True),
    prompt=_field_text,
    tags=st.lists(_field_text, max_size=3),
)
def test_any_valid_dataset_reads_back_the_same_from_yaml_and_jsonl(
    folder: Path, ids: list[str], prompt: str, tags: list[str]
) -> None:
    tasks = [{"id": i, "repository": "repos/calc", "prompt": prompt, "check": "true", "tags": tags} for i in ids]
    from_yaml = parse_dataset(yaml.safe_dump(tasks), source=folder / "d.yaml", jsonl=False)
    from_jsonl = parse_dataset("\n".join(json.dumps(t) for t in tasks), source=folder / "d.jsonl", jsonl=True)
    assert from_yaml.tasks == from_jsonl.tasks
    assert [(t.id, t.prompt, t.tags) for t in from_yaml.tasks] == [(i, prompt, tuple(tags)) for i in ids]


@settings(max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=200), jsonl=st.booleans())
def test_any_text_is_a_dataset_or_a_dataset_error(folder: Path, text: str, jsonl: bool) -> None:
    try:
        parse_dataset(text, source=folder / "d", jsonl=jsonl)
    except DatasetError as exc:
        assert exc.problems and all(p.line >= 0 for p in exc.problems)


def test_eval_validate_lists_the_tasks_or_every_mistake(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (folder / "d.yaml").write_text(GOOD_YAML)
    assert main(["eval", "validate", str(folder / "d.yaml")]) == 0
    out = capsys.readouterr()
    assert out.out.split()[0] == "add-fn" and "2 task(s), valid" in out.err
    (folder / "bad.jsonl").write_text('{"id": "x", "repository": "repos/calc", "prompt": "p"}\nnot json\n')
    assert main(["eval", "validate", str(folder / "bad.jsonl")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"{folder / 'bad.jsonl'}:1: missing field 'check'"
    assert err[1].startswith(f"{folder / 'bad.jsonl'}:2: not JSON")
    assert main(["eval", "validate", str(folder / "bad.jsonl"), "--json"]) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["valid"] is False and [p["line"] for p in data["problems"]] == [1, 2]


def test_the_documented_examples_are_valid_and_say_the_same() -> None:
    examples = Path(__file__).resolve().parents[2] / "docs" / "examples" / "eval"
    from_yaml = load_dataset(examples / "dataset.yaml")
    assert [t.id for t in from_yaml.tasks] == ["greet-function", "readme-usage"]
    assert load_dataset(examples / "dataset.jsonl").tasks == from_yaml.tasks
