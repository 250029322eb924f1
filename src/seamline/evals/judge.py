"""A judge model's verdict on a trial: the task's rubric and the trial's diff in, a verdict
and a 0 to 1 score out.

The judge is a backend like any (``--judge-provider P [--judge-model M] [--judge-option K=V]``),
opened fresh for each trial of a task that has a rubric, in the trial's worktree, without
the right to write or run anything (its tool calls are refused). Its answer must end with
one line of JSON, ``{"verdict": "pass"|"fail", "score": 0.0 to 1.0}``; an answer without it is
recorded as ``unreadable`` with no score, never guessed. What the judge spends counts
against the evaluation's budget and is reported apart from the agents' cost.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Final

import msgspec

from seamline.events import Complete, Text, TextDelta, Usage
from seamline.providers.base import Provider
from seamline.sessions.portable_store import SessionStore
from seamline.sessions.rules import permission_service

__all__ = ["JUDGE_PROMPT", "Judgement", "JudgeFactory", "judge_trial", "read_verdict"]

#: Builds a fresh judge backend for one trial.
JudgeFactory = Callable[[], Provider]

_DIFF_CAP: Final = 20_000
JUDGE_PROMPT: Final = """\
Judge one attempt at a task against a rubric. You may read the repository; do not change it.

The task the agent was given:
{prompt}

The rubric:
{rubric}

The task's check command {check}.

The agent's diff:

{diff}

Give your reasons, then end with one line of JSON and nothing after it:
{{"verdict": "pass" or "fail", "score": a number from 0 to 1}}"""


class Judgement(msgspec.Struct, frozen=True, kw_only=True):
    """What the judge said: ``verdict`` is ``pass``, ``fail`` or ``unreadable``."""

    verdict: str
    score: float | None
    cost_usd: float | None = 0.0
    reasons: str = ""


def read_verdict(text: str) -> tuple[str, float] | None:
    """The verdict and score from the last non-empty line of ``text``, or None."""
    lines = [line.strip().strip("`") for line in text.strip().splitlines() if line.strip().strip("`")]
    if not lines:
        return None
    try:
        data = json.loads(lines[-1])
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    verdict, score = data.get("verdict"), data.get("score")
    if verdict not in ("pass", "fail") or isinstance(score, bool) or not isinstance(score, int | float):
        return None
    if not math.isfinite(score) or not 0.0 <= score <= 1.0:
        return None
    return str(verdict), float(score)


async def judge_trial(
    judge: Provider,
    *,
    workspace: Path,
    store: SessionStore,
    prompt: str,
    rubric: str,
    passed: bool,
    diff: str,
    max_steps: int,
    budget_usd: float | None,
    metadata: dict[str, str],
) -> Judgement:
    """Ask ``judge`` about one trial; its session is recorded in ``store`` like any."""
    question = JUDGE_PROMPT.format(
        prompt=prompt,
        rubric=rubric,
        check="passed" if passed else "failed",
        diff=diff[:_DIFF_CAP] or "(no changes)",
    )
    session = await judge.open(
        workspace=workspace,
        store=store,
        approval=permission_service(store=store, workspace=workspace, yes=False),
        metadata=metadata,
    )
    texts: list[str] = []
    deltas: list[str] = []
    cost: float | None = 0.0
    outcome = "failed"
    try:
        async for event in session.send(question, max_steps=max_steps, budget_usd=budget_usd):
            if isinstance(event, Usage):
                cost = None if cost is None or event.cost_usd is None else cost + event.cost_usd
            elif isinstance(event, Text):
                texts.append(event.text)
            elif isinstance(event, TextDelta):
                deltas.append(event.text)
            elif isinstance(event, Complete):
                outcome = event.outcome
                if event.text:
                    texts.append(event.text)
    finally:
        await judge.close(session)
    answer = texts[-1] if texts else "".join(deltas)
    found = read_verdict(answer) if outcome == "completed" else None
    if found is None:
        return Judgement(verdict="unreadable", score=None, cost_usd=cost, reasons=answer[-2000:])
    return Judgement(verdict=found[0], score=found[1], cost_usd=cost, reasons=answer[-2000:])
