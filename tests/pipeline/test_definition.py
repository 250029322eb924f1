"""Pipeline definitions: stable hashes, validation, YAML and JSON files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from seamline.errors import InvalidRequest
from seamline.pipeline import BUILTIN_PIPELINES, definition_from_data, load_definition, resolve_pipeline

SOURCE = {
    "name": "draft-check",
    "phases": [
        {"name": "draft", "role": "writer", "next": "check"},
        {"name": "check", "role": "checker", "judge": True, "on_continue": "draft", "next": "done"},
    ],
    "terminal_phases": ["done", "aborted"],
    "transitions": {"draft": ["check"], "check": ["draft", "done"]},
    "roles": {"writer": {"kind": "agent"}, "checker": {"kind": "citation-reviewer"}},
    "convergence": {"strategy": "reviewer-approval", "max_rounds": 2},
}


def test_hash_ignores_key_order_and_whitespace(tmp_path: Path) -> None:
    yaml_file = tmp_path / "p.yaml"
    yaml_file.write_text(yaml.safe_dump(SOURCE, sort_keys=True, indent=4))
    json_file = tmp_path / "p.json"
    reordered = dict(reversed(list(SOURCE.items())))
    json_file.write_text(json.dumps(reordered, indent=None, separators=(" ,  ", " :  ")))
    a, b = load_definition(yaml_file), load_definition(json_file)
    assert a.definition_hash() == b.definition_hash() == definition_from_data(SOURCE).definition_hash()
    assert len(a.definition_hash()) == 64


def test_hash_changes_with_the_contract() -> None:
    base = definition_from_data(SOURCE).definition_hash()
    changed = json.loads(json.dumps(SOURCE))
    changed["convergence"]["max_rounds"] = 3
    assert definition_from_data(changed).definition_hash() != base


def test_builtins_are_distinct_and_valid() -> None:
    hashes = {d.definition_hash() for d in BUILTIN_PIPELINES.values()}
    assert set(BUILTIN_PIPELINES) == {"single", "answer-review"} and len(hashes) == 2
    assert resolve_pipeline("answer-review").phase("review").judge


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"phases": []}, "no phases"),
        ({"terminal_phases": ["done"]}, "'aborted' must be a terminal phase"),
        ({"transitions": {"draft": ["nowhere"], "check": ["draft", "done"]}}, "unknown phase 'nowhere'"),
        ({"transitions": {"draft": ["done"], "check": ["draft", "done"]}}, "not an allowed transition"),
        ({"roles": {"writer": {"kind": "agent"}}}, "undeclared role 'checker'"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_bad_definitions_are_refused_by_name(patch: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        definition_from_data({**SOURCE, **patch})


def test_unknown_pipeline_and_bad_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest, match="unknown pipeline 'nope'"):
        resolve_pipeline("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(InvalidRequest, match="not valid YAML"):
        load_definition(bad)


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_pipeline_file_nested_thousands_deep_is_refused_not_a_crash(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"deep{suffix}"
    body = "[" * 5000 + "]" * 5000
    path.write_text('{"name": ' + body + "}" if suffix == ".json" else "name: " + body + "\n")
    with pytest.raises(InvalidRequest, match="nested too deep"):
        load_definition(path)
