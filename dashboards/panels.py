"""Panel factories: the few kinds of panel the dashboards use, each with the project's defaults.

Every panel and every query names the data source through the ``${datasource}`` variable, never a
uid, so the files import into any Grafana. Stat, table and histogram panels run instant queries;
time series and heatmaps run range queries. Sizes are in grid units (24 columns).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from grafana_foundation_sdk.builders import common as c
from grafana_foundation_sdk.builders import dashboard as d
from grafana_foundation_sdk.builders import heatmap, histogram, prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog import variants
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import heatmap as hm
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

DATASOURCE = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")

#: The panel builders used here (each has ``.id()``, which the dashboard sets in order).
Panel = stat.Panel | timeseries.Panel | table.Panel | heatmap.Panel | histogram.Panel
REFS = "ABCDEFGH"


@dataclass(frozen=True)
class Query:
    """One target. ``column`` and ``unit`` name and format a table's column (tables only)."""

    expr: str
    legend: str = "__auto"
    column: str | None = None
    unit: str | None = None


def _targets(
    queries: tuple[Query, ...], *, instant: bool, fmt: PromQueryFormat | None = None
) -> list[Builder[variants.Dataquery]]:
    out: list[Builder[variants.Dataquery]] = []
    if len(queries) > len(REFS):
        raise ValueError(f"at most {len(REFS)} queries per panel, got {len(queries)}")
    for ref, q in zip(REFS, queries, strict=False):
        target = (
            prometheus.Dataquery().datasource(DATASOURCE).ref_id(ref).expr(q.expr).legend_format(q.legend)
        )
        target = target.instant() if instant else target.range()
        if fmt is not None:
            target = target.format(fmt)
        out.append(target)
    return out


def _thresholds(*steps: tuple[float | None, str]) -> d.ThresholdsConfig:
    return (
        d.ThresholdsConfig()
        .mode(dm.ThresholdsMode.ABSOLUTE)
        .steps([dm.Threshold(value=v, color=color) for v, color in steps])
    )


def stat_panel(
    title: str,
    description: str,
    unit: str,
    query: str,
    *,
    size: tuple[int, int],
    decimals: int | None = None,
    alert_at: tuple[float, str] | None = None,
) -> stat.Panel:
    """One number. ``alert_at=(1, "red")`` colours it from that value on (green below)."""
    panel = (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .targets(_targets((Query(query),), instant=True))
        .unit(unit)
        .span(size[0])
        .height(size[1])
        .reduce_options(c.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False))
        .color_mode(cm.BigValueColorMode.VALUE)
        .graph_mode(cm.BigValueGraphMode.NONE)
    )
    if decimals is not None:
        panel = panel.decimals(decimals)
    if alert_at is not None:
        value, color = alert_at
        panel = panel.thresholds(_thresholds((None, "green"), (value, color))).color_scheme(
            d.FieldColor().mode(dm.FieldColorModeId.THRESHOLDS)
        )
    return panel


def timeseries_panel(
    title: str,
    description: str,
    unit: str,
    *queries: Query,
    size: tuple[int, int],
    stacked: bool = False,
    bounds: tuple[float, float] | None = None,
) -> timeseries.Panel:
    """Lines over time, legend as a table on the right with each series' mean and max."""
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .targets(_targets(queries, instant=False))
        .unit(unit)
        .span(size[0])
        .height(size[1])
        .fill_opacity(10)
        .line_width(1)
        .stacking(c.StackingConfig().mode(cm.StackingMode.NORMAL if stacked else cm.StackingMode.NONE))
        .legend(
            c.VizLegendOptions()
            .display_mode(cm.LegendDisplayMode.TABLE)
            .placement(cm.LegendPlacement.RIGHT)
            .show_legend(True)
            .calcs(["mean", "max"])
        )
        .tooltip(c.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.DESCENDING))
    )
    if bounds is not None:
        panel = panel.min(bounds[0]).max(bounds[1])
    return panel


def table_panel(
    title: str, description: str, unit: str, *queries: Query, size: tuple[int, int]
) -> table.Panel:
    """Rows of label values with one column per query, named by ``Query.column``.

    A query's ``unit`` overrides the panel's ``unit`` for its column.
    """
    # Grafana names a lone query's column "Value", several queries' "Value #<refId>".
    fields = ["Value"] if len(queries) == 1 else [f"Value #{ref}" for ref in REFS[: len(queries)]]
    rename: Mapping[str, str] = {f: q.column for f, q in zip(fields, queries, strict=True) if q.column}
    panel = (
        table.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .targets(_targets(queries, instant=True, fmt=PromQueryFormat.TABLE))
        .unit(unit)
        .span(size[0])
        .height(size[1])
        .show_header(True)
        .with_transformation(dm.DataTransformerConfig(id_val="merge", options={}))
        .with_transformation(
            dm.DataTransformerConfig(
                id_val="organize",
                options={"excludeByName": {"Time": True}, "renameByName": dict(rename)},
            )
        )
    )
    for field, q in zip(fields, queries, strict=True):
        if q.unit is not None and q.unit != unit:
            name = rename.get(field, field)
            panel = panel.override_by_name(name, [dm.DynamicConfigValue(id_val="unit", value=q.unit)])
    return panel


def heatmap_panel(title: str, description: str, query: str, *, size: tuple[int, int]) -> heatmap.Panel:
    """A histogram's buckets over time (``query`` answers one series per ``le``), y axis in percent."""
    target = Query(query, legend="{{le}}")
    return (
        heatmap.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .targets(_targets((target,), instant=False, fmt=PromQueryFormat.HEATMAP))
        .unit("short")
        .span(size[0])
        .height(size[1])
        .calculate(False)
        .y_axis(heatmap.YAxisConfig().unit("percent"))
        .cell_gap(1)
        .color(heatmap.HeatmapColorOptions().mode(hm.HeatmapColorMode.SCHEME).scheme("Oranges"))
    )


def histogram_panel(title: str, description: str, query: Query, *, size: tuple[int, int]) -> histogram.Panel:
    """How many series fall in each 10 % bucket of a percentage."""
    return (
        histogram.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .targets(_targets((query,), instant=True))
        .unit("percent")
        .min(0)
        .max(100)
        .span(size[0])
        .height(size[1])
        .bucket_size(10)
        .bucket_offset(0)
        .combine(True)
    )
