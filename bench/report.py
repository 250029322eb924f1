"""Print the side-by-side table of a bench run, and put it in bench/README.md.

    python bench/report.py [bench/results/latest.json] [--readme]

Each row is one figure; each cell the target's value and, after it, how many times the
floor's cost it is (for "higher is better" figures, the floor's value over the target's),
so every cell reads the same way: 1x is the floor, more is worse.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
README = HERE / "README.md"
START = "<!-- bench-table:start -->"
END = "<!-- bench-table:end -->"
COLUMNS = (
    "floor",
    "seamline",
    "seamline_nostore",
    "seamline_agent",
    "seamline_agent_nostore",
    "pydantic_ai",
    "openai_agents",
    "langgraph",
    "smolagents",
)
LABELS = {
    "floor": "floor",
    "seamline": "**seamline**",
    "seamline_nostore": "seamline, store off",
    "seamline_agent": "seamline.Agent",
    "seamline_agent_nostore": "seamline.Agent, store off",
    "pydantic_ai": "pydantic-ai",
    "openai_agents": "openai-agents",
    "langgraph": "langgraph",
    "smolagents": "smolagents",
}


def _number(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _cell(metric: dict[str, Any], target: str) -> str:
    cell = metric["cells"].get(target)
    if cell is None:
        return "–"
    if cell["status"] != "ok":
        detail = cell.get("detail") or ""
        if cell["status"] == "n/a":
            return "n/a"
        return f"{cell['status']} {detail}".strip() if len(detail) < 60 else cell["status"]
    text = _number(cell["value"])
    floor = metric["cells"].get("floor")
    if target != "floor" and floor and floor["status"] == "ok" and floor["value"] and cell["value"]:
        ratio = cell["value"] / floor["value"] if metric["better"] == "lower" else floor["value"] / cell["value"]
        text += f" ({ratio:,.1f}×)" if ratio < 100 else f" ({ratio:,.0f}×)"
    return text


_GOAL = re.compile(r"^\s*(≤|<|≥|>)\s*([⅓⅛] of floor|[\d,.]+× floor|[\d,.]+)\s*(\S*)")
_FRACTIONS = {"⅓": 1 / 3, "⅛": 1 / 8}
_SCALE = {"µs": 1e-6, "ms": 1e-3, "s": 1.0, "KB": 1.0, "MB": 1024.0}


def goal_met(metric: dict[str, Any]) -> bool | None:
    """Whether seamline's figure meets the metric's goal (``≤ 50 µs``, ``≥ ⅓ of floor``…);
    None when there is no goal, no figure, or the goal cannot be read."""
    match = _GOAL.match(metric.get("goal") or "")
    # the goals are for what users call: seamline.Agent where the run measured it (issue 44)
    cell = metric["cells"].get("seamline_agent") or metric["cells"].get("seamline")
    if match is None or cell is None or cell.get("status") != "ok":
        return None
    op, amount, unit = match.groups()
    value = float(cell["value"])
    if amount.endswith("of floor") or amount.endswith("× floor"):
        floor = metric["cells"].get("floor")
        if floor is None or floor.get("status") != "ok":
            return None
        times = _FRACTIONS.get(amount[0]) or float(amount.split("×")[0].replace(",", ""))
        bound = float(floor["value"]) * times
    else:
        bound = float(amount.replace(",", ""))
        here, wanted = _SCALE.get(metric["unit"]), _SCALE.get(unit)
        if unit and here and wanted:
            bound = bound * wanted / here  # the goal in the figure's own unit
    return {"≤": value <= bound, "<": value < bound, "≥": value >= bound, ">": value > bound}[op]


def side_by_side(results: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for r in results.values() if isinstance(r, dict) for m in r.get("metrics", [])]


def render_table(report: dict[str, Any]) -> str:
    """The markdown table of every side-by-side figure, then the seamline-only workloads."""
    results = report.get("results", {})
    metrics = side_by_side(results)
    present = [c for c in COLUMNS if any(c in m["cells"] for m in metrics)]
    lines = [
        "| figure | unit | goal | " + " | ".join(LABELS[c] for c in present) + " |",
        "|---|---|---|" + "---:|" * len(present),
    ]
    for m in metrics:
        arrow = "↓" if m["better"] == "lower" else "↑"
        goal = m.get("goal") or ""
        if goal and goal_met(m) is False:
            goal += " — **missed**"
        row = [m["label"], f"{m['unit']} {arrow}", goal] + [_cell(m, c) for c in present]
        lines.append("| " + " | ".join(row) + " |")
    goals = store_goals(metrics)
    if goals:
        lines.append("\nThe store's goals (issue 44), through `seamline.Agent`:\n")
        lines.extend(goals)
    notes = sorted({r["note"] for r in results.values() if isinstance(r, dict) and r.get("note")})
    bullets = [f"- {m['label']}: {m['note']}" for m in metrics if m.get("note")]
    if bullets:
        lines.append("")
        lines.extend(bullets)
    for note in notes:
        lines.append(f"\n**Note:** {note}")
    others = {name: r for name, r in results.items() if isinstance(r, dict) and "metrics" not in r}
    if others:
        lines.append("\nseamline-only workloads:\n")
        for name, r in others.items():
            flat = ", ".join(f"{k}={v}" for k, v in r.items() if not isinstance(v, dict | list))
            lines.append(f"- `{name}`: {flat}")
    return "\n".join(lines)


def _value(metrics: dict[str, dict[str, Any]], key: str, target: str) -> float | None:
    cell = metrics.get(key, {}).get("cells", {}).get(target)
    return float(cell["value"]) if cell and cell.get("status") == "ok" and cell.get("value") else None


def store_goals(metrics: list[dict[str, Any]]) -> list[str]:
    """Each figure of issue 44's store goals beside its goal and the floor, one line each;
    empty when the run did not measure ``seamline_agent``."""
    by_key = {m["key"]: m for m in metrics if "key" in m}
    lines: list[str] = []

    def line(text: str, met: bool) -> None:
        lines.append(f"- {text}: {'met' if met else '**missed**'}")

    on, off = _value(by_key, "w1_us_per_model_call", "seamline_agent"), None
    off = _value(by_key, "w1_us_per_model_call", "seamline_agent_nostore")
    floor = _value(by_key, "w1_us_per_model_call", "floor")
    if on is not None and off is not None:
        at_floor = f", {on / floor:,.0f}× the floor" if floor else ""
        line(f"W1 store on {on:.1f} µs per model call (goal ≤ 50 µs{at_floor})", on <= 50)
        line(f"W1 store on {on / off:.2f}× store off ({off:.1f} µs; goal ≤ 2×)", on <= 2 * off)
    key = "w2_10000_"
    calls = _value(by_key, key + "calls_per_s", "seamline_agent")
    floor = _value(by_key, key + "calls_per_s", "floor")
    if calls is not None and floor is not None:
        line(
            f"W2 10,000 runs store on {calls:,.0f} calls/s, 1/{floor / calls:.1f} of the floor (goal ≥ 1/8)",
            calls * 8 >= floor,
        )
    for suffix, unit, bound in (
        ("objects_per_run", "tracked objects per run", 40.0),
        ("kb_per_run", "KB per run", 16.0),
    ):
        value = _value(by_key, key + suffix, "seamline_agent")
        if value is None:
            continue
        base = _value(by_key, key + suffix, "floor")
        beside = f", floor {base:.1f} ({value / base:.1f}×)" if base else ""
        line(f"W2 10,000 runs store on {value:.1f} {unit} (goal ≤ {bound:.0f}{beside})", value <= bound)
    return lines


def report_machine() -> dict[str, Any]:
    """What the figures were measured on: CPU model, cores, memory (Linux /proc)."""
    info: dict[str, Any] = {"cpus": os.cpu_count()}
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("MemTotal:"):
                info["memory_gb"] = round(int(line.split()[1]) / 1024 / 1024, 1)
                break
    except OSError:
        pass
    return info


def machine_line(report: dict[str, Any]) -> str:
    m = report.get("machine", {})
    parts = [f"Python {m.get('python', '?')}", m.get("platform", "?")]
    for key in ("cpu", "cpus", "memory_gb"):
        if m.get(key):
            parts.append(f"{key.replace('_gb', '')}: {m[key]}{' GB' if key == 'memory_gb' else ''}")
    if report.get("date"):
        parts.append(f"run {report['date']}")
    return "; ".join(str(p) for p in parts)


def update_readme(report: dict[str, Any], readme: Path = README) -> None:
    text = readme.read_text(encoding="utf-8")
    if START not in text or END not in text:
        raise SystemExit(f"{readme} lacks the {START} / {END} markers")
    block = f"{START}\nMachine: {machine_line(report)}\n\n{render_table(report)}\n{END}"
    head, rest = text.split(START, 1)
    tail = rest.split(END, 1)[1]
    readme.write_text(head + block + tail, encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="?", type=Path, default=HERE / "results" / "latest.json")
    parser.add_argument("--readme", action="store_true", help="write the table into bench/README.md")
    args = parser.parse_args()
    report = json.loads(args.results.read_text(encoding="utf-8"))
    if report.get("quick"):
        print("note: these are quick-mode figures (tiny sizes)", file=sys.stderr)
    print(render_table(report))
    if args.readme:
        update_readme(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
