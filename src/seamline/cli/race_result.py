"""The end of ``seamline race``: the ranking read back from the race's trace, the table
(or ``--json``), and ``--merge-best`` through the merge ``seamline merge`` uses."""

from __future__ import annotations

import json
import sys
from typing import Any

from seamline.errors import WorktreeRefused
from seamline.live.race import RaceAgents
from seamline.pipeline.controller import PipelineController
from seamline.pipeline.race import ranking_in
from seamline.sessions.portable_store import SessionStore
from seamline.trace.verify import verify_trace
from seamline.worktrees import merge

__all__ = ["finish", "table"]


def _cost(value: object) -> str:
    return "unknown" if value is None else f"${float(str(value)):.4f}"


def _check(entry: dict[str, Any]) -> str:
    if entry.get("outcome") != "completed":
        return "no (run " + str(entry.get("outcome")) + ")"
    if entry.get("error"):
        return "no (" + str(entry["error"])[:40] + ")"
    code = entry.get("exit_code")
    if code is None:
        return "yes" if entry.get("passed") else "no"
    return f"{'yes' if entry.get('passed') else 'no'} (exit {code})"


def table(ranking: list[dict[str, Any]], winner: str | None) -> str:
    """The ranking as a plain-text table, best first; the winner is starred."""
    head = ("rank", "racer", "variant", "passed", "review", "cost", "time", "diff", "run")
    rows = [head]
    for e in ranking:
        star = "*" if e.get("racer") == winner else ""
        diff = f"+{e.get('insertions', 0)} -{e.get('deletions', 0)} ({e.get('files', 0)} files)"
        rows.append(
            (
                f"{e.get('rank')}{star}",
                str(e.get("racer")),
                str(e.get("label")),
                _check(e),
                str(e.get("review") or "-"),
                _cost(e.get("cost_usd")),
                f"{float(e.get('elapsed_s') or 0.0):.2f}s",
                diff,
                str(e.get("session_id", ""))[:12],
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def _outcome(outcome: str, stop_reason: str) -> str:
    # The controller calls a vetoed pipeline aborted; a race is vetoed when no run passed
    # (or none was approved), which is a failure, not an interruption (that one is cancelled).
    return "failed" if stop_reason == "vetoed" else outcome


def finish(
    controller: PipelineController,
    agents: RaceAgents,
    code: int,
    *,
    store: SessionStore,
    merge_best: bool,
    json_out: bool,
) -> int:
    """Say how the race ended; merge the winner when asked. The exit code."""
    report = controller.report
    trace = controller.writer.path
    ranked = ranking_in(verify_trace(trace).records) if trace is not None else None
    winner = ranked.get("winner") if ranked else None
    ranking: list[dict[str, Any]] = list(ranked.get("ranking", [])) if ranked else []
    runs = {role: racer.tree.run_id for role, racer in agents.racers.items() if role in agents.opened}
    result: dict[str, Any] = {
        "race": report.run_id,
        "outcome": _outcome(report.outcome, report.stop_reason),
        "stop_reason": report.stop_reason,
        "trace": str(trace) if trace is not None else None,
        "winner": next((e for e in ranking if e.get("racer") == winner), None),
        "ranking": ranking,
        "runs": runs,
        "merged": None,
    }
    refused: WorktreeRefused | None = None
    if winner is not None and merge_best:
        try:
            done = merge(str(result["winner"]["session_id"]), store=store)
        except WorktreeRefused as exc:  # said after the ranking: exit 2, nothing changed
            refused = exc
        else:
            result["merged"] = {"run_id": done.run_id, "branch": done.branch, "into": done.into, "commit": done.commit}
    if json_out:
        print(json.dumps(result))
    elif ranking:
        print(table(ranking, winner))
    _say(result, report.detail, trace)  # on stderr, --json or not
    if refused is not None:
        raise refused
    return code


def _say(result: dict[str, Any], detail: str, trace: object) -> None:
    err = sys.stderr
    race = str(result["race"])
    where = f" · trace {trace}" if trace else ""
    merged = result["merged"]
    winner = result["winner"]
    if merged is not None:
        into = merged["into"]
        what = f"{merged['commit'][:12]}" if merged["commit"] else "nothing to merge (it changed nothing)"
        print(
            f"seamline: race {race[:12]}: merged {winner['racer']} ({winner['label']}) into {into}: {what}{where}",
            file=err,
        )
    elif winner is not None:
        short = str(winner["session_id"])[:12]
        print(f"seamline: race {race[:12]}: winner {winner['racer']} ({winner['label']}); merge it with: "
              f"seamline merge {short}{where}", file=err)  # fmt: skip
    elif result["stop_reason"] == "budget":
        print(f"seamline: race {race[:12]} stopped: its budget was spent ({detail}); nothing merged{where}", file=err)
    elif any(e.get("passed") for e in result["ranking"]):
        # Runs passed the check (with no --check, every completed run does); the review did not.
        print(f"seamline: race {race[:12]}: the reviewer rejected every run that passed; nothing merged{where}",
              file=err)  # fmt: skip
    elif result["ranking"]:
        print(f"seamline: race {race[:12]}: no run passed the check; nothing merged{where}", file=err)
    else:
        print(f"seamline: race {race[:12]} {result['outcome']} ({result['stop_reason']}): {detail}{where}", file=err)
    left = [run for role, run in result["runs"].items() if merged is None or role != winner["racer"]]
    if left:
        print(f"seamline: left for seamline diff|merge|discard: {' '.join(r[:12] for r in left)}", file=err)
