"""PromQL built by code: every label value is escaped, every name validated.

Nothing a user or a cluster supplies (namespace, pod name, policy template value) is pasted into a
query as text. Values go through ``quote`` (a PromQL string literal) or ``regex_of`` (an escaped
RE2 alternation inside a string literal), so a pod called ``a"}) or vector(1) #`` stays a pod name.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
# RE2 metacharacters, as Go's regexp.QuoteMeta escapes them.
_RE2_META = re.compile(r"([\\.+*?()|\[\]{}^$])")

MatchOp = Literal["=", "!=", "=~", "!~"]

# The longest query text sent: VictoriaMetrics refuses more than 16,384 characters by default
# (-search.maxQueryLen), Prometheus takes more; queries naming many series are split to fit.
MAX_QUERY_CHARS = 15_000


def check_label_name(name: str) -> str:
    if not _LABEL_NAME.match(name):
        raise ValueError(f"not a valid label name: {name!r}")
    return name


def check_metric_name(name: str) -> str:
    if not _METRIC_NAME.match(name):
        raise ValueError(f"not a valid metric name: {name!r}")
    return name


def escape(value: str) -> str:
    """The inside of a double-quoted PromQL string literal (Go escaping rules)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")


def quote(value: str) -> str:
    return f'"{escape(value)}"'


def regex_escape(value: str) -> str:
    """``value`` as an RE2 pattern matching exactly that text."""
    return _RE2_META.sub(r"\\\1", value)


def regex_of(values: Iterable[str]) -> str:
    """An RE2 alternation matching exactly the given values (PromQL anchors it at both ends)."""
    unique = sorted(set(values))
    if not unique:
        raise ValueError("an alternation needs at least one value")
    return "|".join(regex_escape(v) for v in unique)


@dataclass(frozen=True)
class Matcher:
    name: str
    op: MatchOp
    value: str

    def __post_init__(self) -> None:
        check_label_name(self.name)

    def __str__(self) -> str:
        return f"{self.name}{self.op}{quote(self.value)}"


def eq(name: str, value: str) -> Matcher:
    return Matcher(name, "=", value)


def ne(name: str, value: str) -> Matcher:
    return Matcher(name, "!=", value)


def one_of(name: str, values: Iterable[str]) -> Matcher:
    """``name`` equal to any of ``values`` (escaped alternation)."""
    return Matcher(name, "=~", regex_of(values))


def none_of(name: str, values: Iterable[str]) -> Matcher:
    return Matcher(name, "!~", regex_of(values))


def selector(metric: str, matchers: Sequence[Matcher] = ()) -> str:
    """``metric{matchers}``; an empty metric name gives ``{matchers}`` (select by ``__name__``)."""
    if metric:
        check_metric_name(metric)
    elif not matchers:
        raise ValueError("a selector needs a metric name or at least one matcher")
    if not matchers:
        return metric
    return metric + "{" + ", ".join(str(m) for m in matchers) + "}"


def duration(value: timedelta) -> str:
    """A range duration PromQL and MetricsQL both accept: whole seconds, or milliseconds."""
    millis = round(value.total_seconds() * 1000)
    if millis <= 0:
        raise ValueError(f"range must be positive, got {value}")
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"


def ranged(selector_text: str, window: timedelta) -> str:
    return f"{selector_text}[{duration(window)}]"


def by(labels: Iterable[str]) -> str:
    return "by (" + ", ".join(check_label_name(label) for label in labels) + ")"


def aggregate(op: str, labels: Sequence[str], expr: str, param: str | None = None) -> str:
    """``op by (labels) ([param,] expr)``, e.g. ``max by (UUID) (max_over_time(x[6h]))``."""
    if op not in {"sum", "max", "min", "avg", "count", "group"}:
        raise ValueError(f"unsupported aggregation {op!r}")
    inner = f"{param}, {expr}" if param is not None else expr
    return f"{op} {by(labels)} ({inner})"


def over_time(func: str, range_selector: str, param: float | None = None) -> str:
    if func not in {
        "avg_over_time",
        "sum_over_time",
        "max_over_time",
        "min_over_time",
        "count_over_time",
        "quantile_over_time",
        "stddev_over_time",
        "last_over_time",
        "increase",
        "rate",
    }:
        raise ValueError(f"unsupported range function {func!r}")
    if param is None:
        return f"{func}({range_selector})"
    return f"{func}({number(param)}, {range_selector})"


def merged_step(func: str, selector_text: str, labels: Sequence[str], step: timedelta) -> str:
    """``func`` (``count_over_time`` or ``sum_over_time``) of each step's samples, from the series of
    one holder that delivered most in that step: summed over a subquery at ``step``, series one
    after another add up and series side by side (two scrape jobs, an HA pair written twice) count
    once. The range stops 1 ms short of the step, so a sample on a step's edge counts once."""
    if func not in ("count_over_time", "sum_over_time"):
        raise ValueError(f"not a mergeable rollup: {func!r}")
    reach = duration(step - timedelta(milliseconds=1))
    return aggregate("max", labels, f"{func}({selector_text}[{reach}])")


def freshest_step(
    selectors: Sequence[tuple[str, float]], labels: Sequence[str], step: timedelta, after: float | None = None
) -> str:
    """At each step of a subquery, each holder's latest sample in ``(t - step, t]`` from the first
    of ``selectors`` holding one there, times that selector's factor (its values into the first's
    unit): the names one exporter served a field under before and after a rename, read as one
    history, a scrape served under both once. Only a fresh sample counts, never one an instant
    selector would repeat through the lookback. With ``after``, only samples after that moment
    (unix seconds). Several selectors: parenthesise before comparing."""
    reach = duration(step - timedelta(milliseconds=1))
    parts = []
    for text, factor in selectors:
        latest = f"last_over_time({text}[{reach}])"
        if after is not None:
            latest = f"({latest} and (timestamp({text}) > {number(after)}))"
        part = aggregate("max", labels, latest)
        parts.append(part if factor == 1.0 else f"({part}) * {number(factor)}")
    return " or ".join(parts)


# The label keeping rows of two metric names apart in one ``or`` (see ``labelled``).
NAME_TAG = "gpu_analyzer_name"


def labelled(expr: str, label: str, value: str) -> str:
    """``expr`` with ``label`` set to ``value`` on every row: rows of two expressions told apart
    so, ``or`` keeps both where their other labels agree."""
    return f'label_replace({expr}, "{check_label_name(label)}", "{escape(value)}", "", "")'


# The label MetricsQL's `quantiles_over_time` names each level of its answer by.
PHI = "gpu_analyzer_phi"


def quantiles_over_time(levels: Sequence[float], range_selector: str) -> str:
    """MetricsQL: every quantile in ``levels`` from one sort of each series' samples, one row per
    level named by a ``PHI`` label (``quantile_over_time`` once per level sorts them once each)."""
    if not levels:
        raise ValueError("no quantile levels")
    phis = ", ".join(number(q) for q in levels)
    return f'quantiles_over_time("{PHI}", {phis}, {range_selector})'


# The label MetricsQL's `aggr_over_time` names each rollup of its answer by (fixed by MetricsQL).
ROLLUP = "rollup"


def aggr_over_time(rollups: Sequence[str], range_selector: str) -> str:
    """MetricsQL: several rollups (``count_over_time``, ...) from one pass over each series'
    samples, one row per rollup named by its ``ROLLUP`` label."""
    if not rollups:
        raise ValueError("no rollups")
    names = ", ".join(f'"{r}"' for r in rollups)
    return f"aggr_over_time(({names}), {range_selector})"


def number(value: float) -> str:
    text = repr(float(value))
    if text in ("nan", "inf", "-inf"):
        raise ValueError(f"not a finite number: {value}")
    return text


def render_template(
    template: str, values: Mapping[str, str], regex_values: Mapping[str, Iterable[str]]
) -> str:
    """Fill a policy's PromQL template.

    ``values`` are plain strings and land escaped for the inside of a double-quoted literal
    (``namespace="$namespace"``); ``regex_values`` become an escaped alternation for the inside of a
    quoted regex (``pod=~"$pods"``). Unknown placeholders raise ``KeyError``.
    """
    filled = {k: escape(v) for k, v in values.items()}
    filled |= {k: escape(regex_of(v)) for k, v in regex_values.items()}
    return string.Template(template).substitute(filled)


def fitting(names: Sequence[str], build: Callable[[Sequence[str]], str], most: int) -> Iterator[list[str]]:
    """``names`` in runs of at most ``most`` whose query, ``build(run)``, stays within
    MAX_QUERY_CHARS: a run whose text is longer is halved until it fits (or holds one name)."""
    for start in range(0, len(names), most):
        yield from _halved(list(names[start : start + most]), build)


def _halved(run: list[str], build: Callable[[Sequence[str]], str]) -> Iterator[list[str]]:
    if len(run) > 1 and len(build(run)) > MAX_QUERY_CHARS:
        half = len(run) // 2
        yield from _halved(run[:half], build)
        yield from _halved(run[half:], build)
    else:
        yield run
