"""``seamline eval … --html FILE``: the figures as one self-contained page.

No script, no font, no image, no request: inline CSS, the table of variants, the per-task
table, the comparisons, and an inline SVG chart of each variant's pass rate (with its
Wilson interval) against its cost per pass. A variant whose cost per pass is unknown is
listed under the chart instead of placed on it at a made-up cost.
"""

from __future__ import annotations

from html import escape
from typing import Any, Final

__all__ = ["render"]

_W: Final = 640
_H: Final = 360
_PAD: Final = 56
_STYLE: Final = """
body{font:14px/1.45 system-ui,sans-serif;margin:2rem;color:#1b1f24;background:#fff}
h1{font-size:1.3rem}h2{font-size:1.05rem;margin-top:2rem}
table{border-collapse:collapse;margin:.5rem 0}th,td{padding:.3rem .7rem;border-bottom:1px solid #d0d7de;text-align:right}
th:first-child,td:first-child{text-align:left}th{background:#f6f8fa}
.muted{color:#57606a}svg text{font:12px system-ui,sans-serif;fill:#1b1f24}
"""
_COLOURS: Final = ("#0969da", "#cf222e", "#1a7f37", "#8250df", "#bc4c00", "#116329", "#a40e26", "#0550ae")


def render(data: dict[str, Any]) -> str:
    """The page of one evaluation's report (what :func:`seamline.evals.report.report` gives)."""
    k = data["samples"]
    title = f"Evaluation {str(data['id'])[:12]}"
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        '<meta name=viewport content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f"<p class=muted>dataset {escape(str(data['dataset']))} · status {escape(str(data['status']))} · "
        f"{data['trials']['finished']} of {data['trials']['planned']} trials · {k} sample(s) per task and variant</p>",
        _variants_table(data, k),
        "<h2>Pass rate against cost per pass</h2>",
        _chart(data),
        _comparisons(data),
        _tasks_table(data, k),
        "</body></html>",
    ]
    return "\n".join(parts)


def _variants_table(data: dict[str, Any], k: int) -> str:
    head = ["variant", "trials", "passed", "pass rate", "95% interval", "pass@1", f"pass@{k}", f"pass^{k}"]
    head += ["cost", "cost per pass", "tokens in/out", "mean time", "mean diff lines"]
    rows = []
    for v in data["variants"]:
        low, high = v["interval"] or (None, None)
        cells = [
            v["variant"],
            v["trials"],
            v["passes"],
            _rate(v["pass_rate"]),
            "-" if low is None else f"{low:.2f}–{high:.2f}",
            _rate(v["pass@1"]),
            _rate(v[f"pass@{k}"]),
            _rate(v[f"pass^{k}"]),
            _money(v["cost_usd"]),
            _money(v["cost_per_pass"]),
            f"{v['input_tokens']}/{v['output_tokens']}",
            "-" if v["mean_elapsed_s"] is None else f"{v['mean_elapsed_s']:.1f} s",
            "-" if v["mean_diff_lines"] is None else f"{v['mean_diff_lines']:.1f}",
        ]
        rows.append(
            '<tr data-variant="'
            + escape(str(v["variant"]))
            + '">'
            + "".join(f"<td>{escape(str(c))}</td>" for c in cells)
            + "</tr>"
        )
    return (
        "<table id=variants><thead><tr>"
        + "".join(f"<th>{escape(h)}</th>" for h in head)
        + "</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )


def _tasks_table(data: dict[str, Any], k: int) -> str:
    head = ["task", "variant", "samples", "passed", "pass@1", f"pass@{k}", f"pass^{k}"]
    rows = [
        "<tr>"
        + "".join(
            f"<td>{escape(str(c))}</td>"
            for c in (
                t["task"],
                t["variant"],
                t["samples"],
                t["passes"],
                _rate(t["pass@1"]),
                _rate(t[f"pass@{k}"]),
                _rate(t[f"pass^{k}"]),
            )
        )
        + "</tr>"
        for t in data["tasks"]
    ]
    return (
        "<h2>By task</h2><table id=tasks><thead><tr>"
        + "".join(f"<th>{escape(h)}</th>" for h in head)
        + "</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )


def _comparisons(data: dict[str, Any]) -> str:
    if not data["comparisons"]:
        return ""
    items = [
        f"<li>{escape(p['a'])} vs {escape(p['b'])}: {p['a_only']} trials only {escape(p['a'])} passed, "
        f"{p['b_only']} only {escape(p['b'])}; p = {p['p_value']:.3g} ({p['pairs']} pairs)</li>"
        for p in data["comparisons"]
    ]
    return f"<h2>Variants compared ({escape(str(data['test']))})</h2><ul id=comparisons>{''.join(items)}</ul>"


def _chart(data: dict[str, Any]) -> str:
    placed = [v for v in data["variants"] if v["cost_per_pass"] is not None and v["pass_rate"] is not None]
    unplaced = [v for v in data["variants"] if v not in placed]
    top = max([v["cost_per_pass"] for v in placed] + [0.0]) or 1.0
    top *= 1.1

    def x(cost: float) -> float:
        return _PAD + (_W - 2 * _PAD) * cost / top

    def y(rate: float) -> float:
        return _H - _PAD - (_H - 2 * _PAD) * rate

    shapes = [
        f'<line x1={_PAD} y1={_H - _PAD} x2={_W - _PAD} y2={_H - _PAD} stroke="#57606a"/>',
        f'<line x1={_PAD} y1={_PAD} x2={_PAD} y2={_H - _PAD} stroke="#57606a"/>',
        f"<text x={_W / 2:.0f} y={_H - 16} text-anchor=middle>cost per pass (USD)</text>",
        f'<text x=14 y={_H / 2:.0f} transform="rotate(-90 14 {_H / 2:.0f})" text-anchor=middle>pass rate</text>',
        f"<text x={_PAD - 6} y={y(1.0) + 4:.1f} text-anchor=end>1</text>",
        f"<text x={_PAD - 6} y={y(0.0) + 4:.1f} text-anchor=end>0</text>",
        f"<text x={_W - _PAD} y={_H - _PAD + 16} text-anchor=end>${top:.4g}</text>",
    ]
    for n, v in enumerate(placed):
        colour = _COLOURS[n % len(_COLOURS)]
        cx, cy = x(v["cost_per_pass"]), y(v["pass_rate"])
        low, high = v["interval"]
        label = escape(str(v["variant"]))
        shapes.append(
            f'<line x1={cx:.1f} y1={y(low):.1f} x2={cx:.1f} y2={y(high):.1f} stroke="{colour}" stroke-width=2/>'
        )
        shapes.append(
            f'<circle class=point data-variant="{label}" cx={cx:.1f} cy={cy:.1f} r=6 fill="{colour}">'
            f"<title>{label}: pass rate {v['pass_rate']:.2f}, ${v['cost_per_pass']:.4f} per pass</title></circle>"
        )
        shapes.append(f"<text x={cx + 9:.1f} y={cy - 8:.1f}>{label}</text>")
    svg = f'<svg id=chart xmlns="http://www.w3.org/2000/svg" width={_W} height={_H} viewBox="0 0 {_W} {_H}" role=img aria-label="pass rate against cost per pass">{"".join(shapes)}</svg>'
    if unplaced:
        names = ", ".join(escape(str(v["variant"])) for v in unplaced)
        svg += f"<p class=muted id=unplaced>Not on the chart (cost per pass unknown: a price unknown, or nothing passed): {names}</p>"
    return svg


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _money(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.4f}"
