"""What every dashboard shares: its template variables, its links and how its panels are laid out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from grafana_foundation_sdk.builders import dashboard as d
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.models import dashboard as dm

from common import metric_names as m
from dashboards.panels import DATASOURCE, Panel

TAG = "kube-gpu-reaper"

Variable = Builder[dm.VariableModel]


@dataclass(frozen=True)
class Options:
    """Build-time choices. Grafana cannot hide a variable depending on its options, so, as
    kube-prometheus' mixins do with ``showMultiCluster``, hiding the cluster picker is decided when
    the JSON is generated. Hidden, it stays "All" (``.*``): the queries are the same either way."""

    show_cluster: bool = True
    #: The namespace label the chargeback board groups teams by, as kube-state-metrics exports it
    #: (``label_<key>``). A label name cannot be a query variable and stay valid PromQL.
    team_label: str = "label_team"


@dataclass(frozen=True)
class Row:
    """A row header spanning the grid; the panels after it belong to it."""

    title: str


def datasource_variable() -> Variable:
    return d.DatasourceVariable("datasource").label("Data source").type("prometheus")


def query_variable(
    name: str, label: str, query: str, *, regex: str = "", multi: bool = True
) -> d.QueryVariable:
    """A variable whose options a query finds. ``multi``: several values and "All" (``.*``, which
    matches an absent label too); otherwise one value, the first option until one is picked."""
    variable = (
        d.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(query)
        .regex(regex)
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.ALPHABETICAL_ASC)
        .multi(multi)
        .include_all(multi)
    )
    if multi:
        variable = variable.all_value(".*").current(dm.VariableOption(text="All", value="$__all"))
    return variable


def cluster_variable(options: Options) -> Variable:
    # Either naming's framebuffer series: a fleet may serve only DCGM 4.7's.
    names = "|".join(m.both_names(m.FB_USED))
    variable = query_variable("cluster", "Cluster", f'label_values({{__name__=~"{names}"}}, cluster)')
    hide = dm.VariableHide.DONT_HIDE if options.show_cluster else dm.VariableHide.HIDE_VARIABLE
    return variable.hide(hide)


def label_variable(name: str, label: str, series: str, *, multi: bool = True) -> Variable:
    """The values of label ``name`` among ``series`` (an expression, not only a selector)."""
    return query_variable(
        name, label, f"query_result(group by ({name}) ({series}))", regex=f'/{name}="([^"]+)"/', multi=multi
    )


def idle_threshold_variable() -> Variable:
    values = ("1", "2", "5", "10")
    return (
        d.CustomVariable("idle_threshold")
        .label("Idle threshold (%)")
        .values(",".join(values))
        .current(dm.VariableOption(text="2", value="2"))
        .options([dm.VariableOption(text=v, value=v, selected=v == "2") for v in values])
    )


def price_variable() -> Variable:
    return (
        d.TextBoxVariable("price")
        .label("Price per GPU-hour")
        .default_value("2.5")
        .current(dm.VariableOption(text="2.5", value="2.5"))
    )


def dashboard(
    uid: str,
    title: str,
    description: str,
    options: Options,
    variables: Sequence[Variable],
    items: Sequence[Panel | Row],
) -> d.Dashboard:
    """A dashboard with the data source and cluster variables first, then ``variables``; panels and
    rows numbered in order (ids are what panel links and bookmarks keep)."""
    board = (
        d.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["gpu", TAG])
        .timezone("")
        .editable()
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .refresh("1m")
        .time("now-6h", "now")
        .link(
            d.DashboardLink("GPU dashboards")
            .type(dm.DashboardLinkType.DASHBOARDS)
            .tags([TAG])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
        .variables([datasource_variable(), cluster_variable(options), *variables])
    )
    x = y = line_height = 0
    for number, item in enumerate(items, start=1):
        # Left to right, wrapping before a panel would cross the 24th column (the SDK's own placement
        # wraps only after it has).
        if isinstance(item, Row):
            y, x, line_height = y + line_height, 0, 0
            board = board.with_row(d.Row(item.title).id(number).grid_pos(dm.GridPos(h=1, w=24, x=0, y=y)))
            y += 1
            continue
        grid = item.build().grid_pos
        assert grid is not None, "panel factories size every panel"
        if x + grid.w > 24:
            y, x, line_height = y + line_height, 0, 0
        grid.x, grid.y = x, y
        x, line_height = x + grid.w, max(line_height, grid.h)
        board = board.with_panel(item.id(number))
    return board
