"""An evaluation's dataset: the tasks, read from YAML or JSONL and checked field by field.

A task is a repository to start from, a prompt, and a check command whose exit status is
the verdict (0 passed), with an optional set-up command, a rubric for a judge model, a
timeout, a budget and tags. The YAML form is a list of tasks (or a mapping with a
``tasks`` list); the JSONL form is one task per line::

    - id: add-fn
      repository: repos/calc          # relative to the dataset file
      commit: main                    # optional: what the trial's worktree starts from
      setup: pip install -e .         # optional, run in the worktree before the agent
      prompt: Add a function `double(x)` to calc.py.
      check: python -c "import calc; assert calc.double(2) == 4"
      rubric: Small, readable, no new dependencies.   # optional: for --judge-provider
      timeout_s: 600                  # optional, default 900
      budget_usd: 0.5                 # optional, a cap for one trial
      tags: [python, small]

:func:`load_dataset` reads a file and raises :class:`DatasetError` naming every mistake
with its line; :class:`Dataset` and :class:`Task` are the same fields in Python.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import msgspec
import yaml

from seamline.errors import InvalidRequest

__all__ = ["DEFAULT_TIMEOUT_S", "Dataset", "DatasetError", "DatasetProblem", "Task", "load_dataset", "parse_dataset"]

DEFAULT_TIMEOUT_S: Final = 900.0
_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_FIELDS: Final = (
    "id",
    "repository",
    "commit",
    "setup",
    "prompt",
    "check",
    "rubric",
    "timeout_s",
    "budget_usd",
    "tags",
)
_REQUIRED: Final = ("id", "repository", "prompt", "check")


class Task(msgspec.Struct, frozen=True, kw_only=True):
    """One task of a dataset. ``repository`` is a folder, absolute once loaded from a file."""

    id: str
    repository: str
    prompt: str
    check: str
    commit: str | None = None
    setup: str | None = None
    rubric: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    budget_usd: float | None = None
    tags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        problems = [m for f, m in _task_problems(_as_mapping(self)) if f != "repository"]
        if problems:
            raise InvalidRequest(f"task {self.id!r}: " + "; ".join(problems))


class Dataset(msgspec.Struct, frozen=True, kw_only=True):
    """The tasks of an evaluation, ids unique, in the file's order."""

    tasks: tuple[Task, ...]
    source: Path | None = None

    def __post_init__(self) -> None:
        if not self.tasks:
            raise InvalidRequest("a dataset needs at least one task")
        seen: set[str] = set()
        for task in self.tasks:
            if task.id in seen:
                raise InvalidRequest(f"task id {task.id!r} appears twice")
            seen.add(task.id)

    def tagged(self, tags: Iterable[str]) -> Dataset:
        """The tasks carrying any of ``tags`` (all tasks when ``tags`` is empty)."""
        wanted = set(tags)
        if not wanted:
            return self
        kept = tuple(t for t in self.tasks if wanted.intersection(t.tags))
        if not kept:
            raise InvalidRequest(f"no task carries the tags {sorted(wanted)}")
        return Dataset(tasks=kept, source=self.source)


class DatasetProblem(msgspec.Struct, frozen=True):
    """One mistake: the line it is on (1-based; 0 when the file as a whole is wrong)."""

    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}" if self.line else self.message


class DatasetError(InvalidRequest):
    """A dataset file that cannot be used; ``problems`` names every mistake with its line."""

    def __init__(self, path: Path | str, problems: Sequence[DatasetProblem]) -> None:
        self.path = str(path)
        self.problems = tuple(problems)
        listed = "\n".join(f"  {self.path}:{p.line}: {p.message}" if p.line else f"  {p.message}" for p in problems)
        super().__init__(f"{self.path}: {len(problems)} problem(s) in the dataset\n{listed}")


def load_dataset(path: Path | str) -> Dataset:
    """Read a dataset file (``.jsonl`` as JSON lines, anything else as YAML)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DatasetError(file, [DatasetProblem(0, "no such file")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(file, [DatasetProblem(0, f"cannot read it: {exc}")]) from None
    return parse_dataset(text, source=file, jsonl=file.suffix.lower() in (".jsonl", ".ndjson"))


def parse_dataset(text: str, *, source: Path | str, jsonl: bool) -> Dataset:
    """Parse a dataset's text; relative repositories are resolved against ``source``'s folder."""
    source_path = Path(source)
    entries = _jsonl_entries(text) if jsonl else _yaml_entries(text)
    problems = [p for p in entries if isinstance(p, DatasetProblem)]
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for entry in entries:
        if isinstance(entry, DatasetProblem):
            continue
        line, fields, lines = entry
        found = _task_problems(fields)
        task_id = fields.get("id")
        if isinstance(task_id, str) and task_id in seen:
            found.append(("id", f"task id {task_id!r} appears twice (first on line {seen[task_id]})"))
        elif isinstance(task_id, str):
            seen[task_id] = line
        repository = fields.get("repository")
        if isinstance(repository, str) and repository and not any(f == "repository" for f, _ in found):
            folder = (source_path.parent / repository).resolve()
            if not folder.is_dir():
                found.append(("repository", f"repository {repository!r} is not a folder ({folder})"))
        if found:
            problems += [DatasetProblem(lines.get(field, line), message) for field, message in found]
            continue
        tasks.append(_task(fields, source_path))
    if not problems and not tasks:
        problems.append(DatasetProblem(0, "the dataset has no task"))
    if problems:
        raise DatasetError(source_path, sorted(problems, key=lambda p: p.line))
    return Dataset(tasks=tuple(tasks), source=source_path.resolve())


_Entry = tuple[int, dict[str, Any], dict[str, int]]


def _jsonl_entries(text: str) -> list[_Entry | DatasetProblem]:
    entries: list[_Entry | DatasetProblem] = []
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            entries.append(DatasetProblem(number, f"not JSON: {exc.msg} (column {exc.colno})"))
            continue
        if not isinstance(value, dict):
            entries.append(DatasetProblem(number, f"a task is a JSON object, not {type(value).__name__}"))
            continue
        entries.append((number, value, dict.fromkeys(value, number)))
    return entries


def _yaml_entries(text: str) -> list[_Entry | DatasetProblem]:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        return [DatasetProblem(mark.line + 1 if mark is not None else 0, f"not YAML: {problem}")]
    if root is None:
        return [DatasetProblem(0, "the dataset is empty")]
    if isinstance(root, yaml.MappingNode):
        items = {k.value: v for k, v in root.value if isinstance(k, yaml.ScalarNode)}
        unknown = [k for k, _ in root.value if isinstance(k, yaml.ScalarNode) and k.value != "tasks"]
        if unknown:
            return [
                DatasetProblem(k.start_mark.line + 1, f"unknown key {k.value!r} (the file holds `tasks:`)")
                for k in unknown
            ]
        if "tasks" not in items:
            return [DatasetProblem(root.start_mark.line + 1, "a mapping at the top needs a `tasks` list")]
        root = items["tasks"]
    if not isinstance(root, yaml.SequenceNode):
        return [DatasetProblem(root.start_mark.line + 1, "the dataset is a list of tasks")]
    entries: list[_Entry | DatasetProblem] = []
    for node in root.value:
        line = node.start_mark.line + 1
        if not isinstance(node, yaml.MappingNode):
            entries.append(DatasetProblem(line, "a task is a mapping of fields (id, repository, prompt, check, …)"))
            continue
        try:
            value = yaml.safe_load(yaml.serialize(node))
        except yaml.YAMLError as exc:
            entries.append(DatasetProblem(line, f"not YAML: {exc}"))
            continue
        lines = {str(k.value): v.start_mark.line + 1 for k, v in node.value if isinstance(k, yaml.ScalarNode)}
        entries.append((line, value if isinstance(value, dict) else {}, lines))
    return entries


def _task_problems(fields: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every mistake of one task's fields, as (field, message)."""
    found: list[tuple[str, str]] = []
    for key in fields:
        if key not in _FIELDS:
            found.append((str(key), f"unknown field {key!r} (fields: {', '.join(_FIELDS)})"))
    for key in _REQUIRED:
        value = fields.get(key)
        if value is None:
            found.append((key, f"missing field {key!r}"))
        elif not isinstance(value, str | Path) or not str(value).strip():
            found.append((key, f"{key!r} must be a non-empty string"))
    task_id = fields.get("id")
    if isinstance(task_id, str) and task_id.strip() and not _ID.fullmatch(task_id):
        found.append(("id", f"id {task_id!r}: letters, digits, '.', '_' and '-' only, at most 128"))
    for key in ("commit", "setup", "rubric"):
        value = fields.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            found.append((key, f"{key!r} must be a non-empty string when given"))
    timeout = fields.get("timeout_s")
    if timeout is not None and not _positive(timeout):
        found.append(("timeout_s", f"timeout_s must be a number of seconds above 0, not {timeout!r}"))
    budget = fields.get("budget_usd")
    if budget is not None and not (_number(budget) and float(budget) >= 0):
        found.append(("budget_usd", f"budget_usd must be a number of dollars, 0 or more, not {budget!r}"))
    tags = fields.get("tags")
    if tags is not None and not (
        isinstance(tags, list | tuple) and all(isinstance(t, str) and t.strip() for t in tags)
    ):
        found.append(("tags", "tags must be a list of non-empty strings"))
    return found


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _positive(value: object) -> bool:
    return _number(value) and float(value) > 0  # type: ignore[arg-type]


def _task(fields: Mapping[str, Any], source: Path) -> Task:
    return Task(
        id=str(fields["id"]),
        repository=str((source.parent / str(fields["repository"])).resolve()),
        prompt=str(fields["prompt"]),
        check=str(fields["check"]),
        commit=fields.get("commit"),
        setup=fields.get("setup"),
        rubric=fields.get("rubric"),
        timeout_s=float(fields.get("timeout_s") or DEFAULT_TIMEOUT_S),
        budget_usd=None if fields.get("budget_usd") is None else float(fields["budget_usd"]),
        tags=tuple(fields.get("tags") or ()),
    )


def _as_mapping(task: Task) -> dict[str, Any]:
    return {f: getattr(task, f) for f in _FIELDS}
