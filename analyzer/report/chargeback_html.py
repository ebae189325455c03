"""The chargeback's HTML: per group one bar of used / idle / unknown held hours and a daily line of
each, the fleet's unallocated hours beside them. One self-contained file: inline SVG, no plot library."""

from __future__ import annotations

from importlib import resources

from jinja2 import Environment, FunctionLoader, StrictUndefined, select_autoescape

from analyzer.chargeback.model import ChargebackReport, DailyHours

TEMPLATE = "chargeback.html.j2"
COLOURS = {
    "used": "#2e7d32",
    "idle": "#c62828",
    "unknown": "#9e9e9e",
    "other": "#90caf9",
    "unallocated": "#6d4c41",
}
WIDTH, HEIGHT = 480.0, 120.0


def _load(name: str) -> str:
    return resources.files("analyzer.report.templates").joinpath(name).read_text(encoding="utf-8")


def _bar(held: float, used: float, idle: float, unknown: float, scale: float) -> list[dict[str, object]]:
    """Segments of one bar: used, idle, unknown, and the held rest (busy yet not used: capacity the
    activity left)."""
    rest = max(0.0, held - used - idle - unknown)
    out, x = [], 0.0
    for name, value in (("used", used), ("idle", idle), ("unknown", unknown), ("other", rest)):
        w = WIDTH * value / scale if scale > 0 else 0.0
        out.append(
            {"name": name, "x": round(x, 2), "width": round(w, 2), "colour": COLOURS[name], "value": value}
        )
        x += w
    return out


def _lines(days: list[DailyHours], with_unallocated: bool = False) -> list[dict[str, str]]:
    if not days:
        return []
    fields = ["used_gpu_hours", "idle_gpu_hours", "unknown_gpu_hours"]
    if with_unallocated:
        fields.append("unallocated_gpu_hours")
    top = max((getattr(d, f) for d in days for f in fields), default=0.0) or 1.0
    step = WIDTH / max(1, len(days) - 1)
    lines = []
    for f in fields:
        points = " ".join(
            f"{i * step:.1f},{HEIGHT - HEIGHT * getattr(d, f) / top:.1f}" for i, d in enumerate(days)
        )
        lines.append(
            {
                "name": f.removesuffix("_gpu_hours"),
                "points": points,
                "colour": COLOURS[f.removesuffix("_gpu_hours")],
            }
        )
    return lines


def render_chargeback_html(report: ChargebackReport) -> str:
    env = Environment(
        loader=FunctionLoader(_load), autoescape=select_autoescape(default=True), undefined=StrictUndefined
    )
    scale = max([g.held_gpu_hours for g in report.groups] + [report.fleet.unallocated_gpu_hours, 0.0])
    groups = [
        {
            "g": g,
            "bar": _bar(g.held_gpu_hours, g.used_gpu_hours, g.idle_gpu_hours, g.unknown_gpu_hours, scale),
            "lines": _lines(g.daily),
        }
        for g in report.groups
    ]
    unallocated = {
        "width": round(WIDTH * report.fleet.unallocated_gpu_hours / scale, 2) if scale > 0 else 0.0,
        "colour": COLOURS["unallocated"],
        "lines": _lines(report.fleet.daily, with_unallocated=True),
    }
    return env.get_template(TEMPLATE).render(
        report=report, groups=groups, unallocated=unallocated, width=WIDTH, height=HEIGHT, colours=COLOURS
    )
