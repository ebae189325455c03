"""The reaper's policy: YAML validated into one immutable object.

Decision code (pure): no Kubernetes, HTTP or Slack imports. Every validation error names the file,
the line where the YAML has one, the field path (``rules[0].match.namespaces[1]``) and the problem.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
import typing
from collections.abc import Mapping, Sequence
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from common.durations import Duration, PositiveDuration, format_setting
from common.errors import PolicyError
from common.model import FindingKind
from common.thresholds import Thresholds
from reaper import names

# --- field types ------------------------------------------------------------------------------------

# Kubernetes names are lowercase DNS labels/subdomains; a glob adds * ? and [...] classes.
_GLOB_CHARS = re.compile(r"^[a-z0-9.\-*?\[\]!]+$")


def _check_glob(value: str) -> str:
    if not value:
        raise ValueError("empty glob; use * to mean everything")
    if value != value.lower():
        raise ValueError(f"glob {value!r} can never match: Kubernetes names are lowercase")
    if not _GLOB_CHARS.match(value):
        bad = sorted({c for c in value if not _GLOB_CHARS.match(c)})
        raise ValueError(
            f"glob {value!r} has characters no Kubernetes name contains: {' '.join(map(repr, bad))}"
        )
    depth = 0
    for c in value:
        if c == "[":
            if depth:
                raise ValueError(f"glob {value!r} nests '[' inside a character class")
            depth = 1
        elif c == "]":
            if not depth:
                raise ValueError(f"glob {value!r} has ']' without a matching '['")
            depth = 0
    if depth:
        raise ValueError(f"glob {value!r} has an unclosed '['")
    if "[]" in value or "[!]" in value:
        raise ValueError(f"glob {value!r} has an empty character class")
    return value


def _check_workload_glob(value: str) -> str:
    namespace, sep, name = value.partition("/")
    if not sep:
        raise ValueError(f"workload glob {value!r} must be NAMESPACE/NAME, e.g. serving/chat-*")
    _check_glob(namespace)
    _check_glob(name)
    return value


_GLOB_SCHEMA = {
    "type": "string",
    "pattern": r"^[a-z0-9.\-*?\[\]!]+$",
    "description": "A shell-style glob over lowercase Kubernetes names: * ? [abc] [!abc].",
}
Glob = Annotated[str, AfterValidator(_check_glob), WithJsonSchema(_GLOB_SCHEMA)]
WorkloadGlob = Annotated[
    str,
    AfterValidator(_check_workload_glob),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": r"^[a-z0-9.\-*?\[\]!]+/[a-z0-9.\-*?\[\]!]+$",
            "description": "NAMESPACE/NAME globs, e.g. serving/chat-*.",
        }
    ),
]

_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _check_label_key(value: str) -> str:
    prefix, sep, name = value.rpartition("/")
    if sep and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        raise ValueError(f"label key {value!r}: the prefix must be a DNS subdomain such as example.com")
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        raise ValueError(
            f"label key {value!r}: the name must be 1-63 characters of letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return value


def _check_label_value(value: str) -> str:
    if value and (len(value) > 63 or not _LABEL_NAME.match(value)):
        raise ValueError(f"label value {value!r} is not a valid Kubernetes label value")
    return value


def _check_namespace_name(value: str) -> str:
    if len(value) > 63 or not _DNS_LABEL.match(value):
        raise ValueError(f"{value!r} is not a valid namespace name (lowercase DNS label)")
    return value


def _check_channel(value: str) -> str:
    # "#name" for readability, or a channel ID (C…, G…) which survives renames.
    if re.match(r"^#[a-z0-9][a-z0-9._\-]{0,79}$", value) or re.match(r"^[CGD][A-Z0-9]{6,}$", value):
        return value
    raise ValueError(
        f"Slack channel {value!r} must be '#name' (lowercase) or a channel ID such as C0123456789"
    )


LabelKey = Annotated[str, AfterValidator(_check_label_key)]
LabelValue = Annotated[str, AfterValidator(_check_label_value)]
NamespaceName = Annotated[str, AfterValidator(_check_namespace_name)]
Channel = Annotated[
    str,
    AfterValidator(_check_channel),
    WithJsonSchema({"type": "string", "pattern": r"^(#[a-z0-9][a-z0-9._\-]{0,79}|[CGD][A-Z0-9]{6,})$"}),
]


class _Model(BaseModel):
    # camelCase keys in YAML, like the Kubernetes objects the policy sits next to.
    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True, use_enum_values=False
    )


# --- label selectors --------------------------------------------------------------------------------


class SelectorRequirement(_Model):
    key: LabelKey
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: tuple[LabelValue, ...] = ()

    @model_validator(mode="after")
    def _values_fit_operator(self) -> SelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs a non-empty values list")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self

    def matches(self, labels: Mapping[str, str]) -> bool:
        match self.operator:
            case "In":
                return labels.get(self.key) in self.values
            case "NotIn":
                return labels.get(self.key) not in self.values
            case "Exists":
                return self.key in labels
            case _:
                return self.key not in labels


class LabelSelector(_Model):
    """The Kubernetes label selector: every matchLabels pair and every expression must hold."""

    match_labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    match_expressions: tuple[SelectorRequirement, ...] = ()

    @model_validator(mode="after")
    def _not_empty(self) -> LabelSelector:
        if not self.match_labels and not self.match_expressions:
            raise ValueError("an empty selector matches everything; give matchLabels or matchExpressions")
        return self

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels.items()) and all(
            e.matches(labels) for e in self.match_expressions
        )

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in self.match_labels.items()]
        for e in self.match_expressions:
            if e.operator in ("In", "NotIn"):
                parts.append(f"{e.key} {e.operator.lower()} ({', '.join(e.values)})")
            else:
                parts.append(e.key if e.operator == "Exists" else f"!{e.key}")
        return ",".join(parts)


# --- rules ------------------------------------------------------------------------------------------


class Action(StrEnum):
    NOTIFY = "notify"
    SCALE_TO_ZERO = "scale_to_zero"
    CORDON = "cordon"

    @property
    def destructive(self) -> bool:
        return self is not Action.NOTIFY


ActionableFinding = Literal["idle_endpoint", "low_utilization", "dataloader_starvation"]
WorkloadKindName = Literal[
    "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "Pod", "Node"
]

SCALABLE_KINDS: tuple[str, ...] = ("Deployment", "StatefulSet")
_DEFAULT_KINDS: dict[Action, tuple[str, ...]] = {
    Action.SCALE_TO_ZERO: SCALABLE_KINDS,
    Action.CORDON: ("Node",),
}


class Match(_Model):
    """Which findings a rule applies to. Every condition given must hold."""

    findings: tuple[ActionableFinding, ...] = Field(min_length=1)
    namespaces: tuple[Glob, ...] = Field(default=("*",), min_length=1)
    kinds: tuple[WorkloadKindName, ...] | None = Field(default=None, min_length=1)
    label_selector: LabelSelector | None = None
    min_confidence: float = Field(default=0.0, ge=0.0, le=1.0)
    min_wasted_gpu_hours: float = Field(default=0.0, ge=0.0)
    min_gpus: int = Field(default=1, ge=1)
    # How long the finding must have held, counted across consecutive runs (Prometheus' `for:`).
    for_: Duration = Field(default=timedelta(0), alias="for")

    @property
    def finding_kinds(self) -> frozenset[FindingKind]:
        return frozenset(FindingKind(f) for f in self.findings)


class Rule(_Model):
    name: str = Field(pattern=r"^[a-z0-9]([a-z0-9\-]{0,61}[a-z0-9])?$")
    match: Match
    action: Action
    channel: Channel | None = None  # Slack channel for this rule's items, unless the namespace names one

    @model_validator(mode="after")
    def _action_fits_kinds(self) -> Rule:
        if self.match.kinds is None:
            return self
        kinds = set(self.match.kinds)
        if self.action is Action.SCALE_TO_ZERO and not kinds <= set(SCALABLE_KINDS):
            other = ", ".join(sorted(kinds - set(SCALABLE_KINDS)))
            raise ValueError(
                f"action scale_to_zero applies to Deployment and StatefulSet only, not {other}; "
                "use a separate notify rule for those kinds"
            )
        if self.action is Action.CORDON and kinds != {"Node"}:
            raise ValueError("action cordon applies to kind Node only")
        if self.action is not Action.CORDON and "Node" in kinds and len(kinds) > 1:
            raise ValueError("a rule matching Node must match only Node (nodes have no namespace or owner)")
        return self

    @property
    def kinds(self) -> tuple[str, ...] | None:
        """The kinds this rule matches; None means any kind."""
        return self.match.kinds if self.match.kinds is not None else _DEFAULT_KINDS.get(self.action)


# --- the rest of the policy -------------------------------------------------------------------------


class Exclusions(_Model):
    namespaces: tuple[Glob, ...] = ()
    workloads: tuple[WorkloadGlob, ...] = ()
    nodes: tuple[Glob, ...] = ()
    label_selector: LabelSelector | None = None


class Grace(_Model):
    after_creation: Duration = timedelta(hours=1)
    after_restore: Duration = timedelta(hours=24)


class Safety(_Model):
    max_actions_per_run: int = Field(default=10, ge=0)
    max_cordon_share: float = Field(default=0.1, ge=0.0, le=1.0)
    consecutive_runs: int = Field(default=2, ge=1, le=100)
    confirmation_max_gap: PositiveDuration = timedelta(hours=3)
    max_data_age: PositiveDuration = timedelta(minutes=30)
    gitops: Literal["flag", "skip"] = "flag"


class SlackRoute(_Model):
    namespaces: tuple[Glob, ...] = Field(min_length=1)
    channel: Channel


class Slack(_Model):
    channel: Channel | None = None  # default channel (bot token mode)
    routes: tuple[SlackRoute, ...] = ()
    api_url: str = Field(default="https://slack.com/api/", pattern=r"^https?://[^\s]+/$")
    max_items_per_message: int = Field(default=20, ge=1, le=40)
    notify_when_idle: bool = False  # post even when a run found nothing to report


class Policy(_Model):
    mode: Literal["dry-run", "apply"] = "dry-run"
    window: PositiveDuration = timedelta(hours=6)
    reaper_namespace: NamespaceName = names.DEFAULT_REAPER_NAMESPACE
    price_per_gpu_hour: float | None = Field(default=None, ge=0.0)
    currency: str = Field(default="USD", pattern=r"^[A-Z]{3}$")
    exclude: Exclusions = Exclusions()
    grace: Grace = Grace()
    safety: Safety = Safety()
    slack: Slack = Slack()
    rules: tuple[Rule, ...] = Field(min_length=1)
    detection: Thresholds = Thresholds()

    @field_validator("rules")
    @classmethod
    def _unique_rule_names(cls, rules: tuple[Rule, ...]) -> tuple[Rule, ...]:
        seen: set[str] = set()
        for rule in rules:
            if rule.name in seen:
                raise ValueError(f"rule name {rule.name!r} is used twice; names must be unique")
            seen.add(rule.name)
        return rules

    @model_validator(mode="after")
    def _one_price(self) -> Policy:
        other = self.detection.price_per_gpu_hour
        if other is not None and self.price_per_gpu_hour is not None and other != self.price_per_gpu_hour:
            raise ValueError(
                f"pricePerGpuHour ({self.price_per_gpu_hour:g}) and detection.pricePerGpuHour ({other:g}) "
                "disagree; set the price once, at the top level"
            )
        return self

    @property
    def price(self) -> float | None:
        """The price per GPU-hour, wherever the file sets it."""
        return (
            self.price_per_gpu_hour
            if self.price_per_gpu_hour is not None
            else self.detection.price_per_gpu_hour
        )

    @property
    def thresholds(self) -> Thresholds:
        """The detection settings handed to the analyzer, with the one price filled in."""
        if self.price is None or self.detection.price_per_gpu_hour == self.price:
            return self.detection
        return self.detection.model_copy(update={"price_per_gpu_hour": self.price})

    @property
    def protected_namespaces(self) -> tuple[str, ...]:
        """Never touched, whatever the rules say."""
        return (*names.ALWAYS_PROTECTED_NAMESPACES, self.reaper_namespace)


def glob_match(name: str, patterns: Sequence[str]) -> str | None:
    """The first glob matching ``name``, or None."""
    for pattern in patterns:
        if fnmatch.fnmatchcase(name, pattern):
            return pattern
    return None


# --- loading and error reporting --------------------------------------------------------------------


def load_policy(path: str | Path) -> Policy:
    """Read and validate a policy file; raises PolicyError naming the file, line, field and problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise PolicyError(str(path), [f"cannot read the policy file: {e.strerror}"]) from e
    except UnicodeDecodeError as e:
        raise PolicyError(str(path), ["not a text file (UTF-8 expected)"]) from e
    return parse_policy(text, str(path))


def parse_policy(text: str, source: str = "<policy>") -> Policy:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        where = ""
        mark = getattr(e, "problem_mark", None)
        if mark is not None:
            where = f"line {mark.line + 1}, column {mark.column + 1}: "
        problem = getattr(e, "problem", None) or str(e)
        raise PolicyError(source, [f"not valid YAML: {where}{problem}"]) from e
    if root is None or data is None:
        raise PolicyError(source, ["the file is empty; a policy needs at least `rules:`"])
    if not isinstance(data, dict):
        raise PolicyError(source, [f"the top level must be a mapping of keys, got a {_yaml_type(data)}"])
    duplicates = list(_duplicate_keys(root, ()))
    if duplicates:
        raise PolicyError(
            source,
            [
                f"{_line(node)}{_dotted(loc)}: key given twice; the later one would win silently"
                for loc, node in duplicates
            ],
        )
    try:
        return Policy.model_validate(data)
    except ValidationError as e:
        errors = e.errors()
        # A list whose items failed also reports "too short" for itself: noise next to the real cause.
        errors = [
            err for err in errors if not (err["type"] == "too_short" and _has_child(err["loc"], errors))
        ]
        described = sorted((_describe(err, root) for err in errors), key=_by_line)
        raise PolicyError(source, described) from e


def _has_child(loc: Sequence[int | str], errors: Sequence[Mapping[str, Any]]) -> bool:
    n = len(loc)
    return any(len(err["loc"]) > n and tuple(err["loc"][:n]) == tuple(loc) for err in errors)


def _by_line(message: str) -> tuple[int, str]:
    m = re.match(r"^line (\d+): ", message)
    return (int(m.group(1)) if m else 0, message)


def _yaml_type(value: Any) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}.get(
        type(value), type(value).__name__
    )


def _dotted(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _line(node: yaml.Node | None) -> str:
    return f"line {node.start_mark.line + 1}: " if node is not None else ""


def _duplicate_keys(
    node: yaml.Node, loc: tuple[int | str, ...]
) -> typing.Iterator[tuple[tuple[int | str, ...], yaml.Node]]:
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            k = key.value if isinstance(key, yaml.ScalarNode) else str(key)
            if k in seen:
                yield (*loc, k), key
            seen.add(k)
            yield from _duplicate_keys(value, (*loc, k))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            yield from _duplicate_keys(item, (*loc, i))


def _node_at(root: yaml.Node, loc: Sequence[int | str]) -> yaml.Node | None:
    """The YAML node at a pydantic error location, for its line number (None when it is absent)."""
    node: yaml.Node | None = root
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if getattr(k, "value", None) == part), None)
            if node is None:
                return None
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            return None
    return node


def _key_node_at(root: yaml.Node, loc: Sequence[int | str]) -> yaml.Node | None:
    parent = _node_at(root, loc[:-1])
    if isinstance(parent, yaml.MappingNode):
        return next((k for k, _ in parent.value if getattr(k, "value", None) == loc[-1]), None)
    return None


def _describe(err: Mapping[str, Any], root: yaml.Node) -> str:
    loc = [p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "tagged-union")))]
    kind = err["type"]
    msg = str(err["msg"])
    if msg.startswith(("Value error, ", "Assertion failed, ")):
        msg = msg.split(", ", 1)[1]
    if kind == "extra_forbidden":
        node = _key_node_at(root, loc)
        known = _known_keys(loc[:-1])
        hint = difflib.get_close_matches(str(loc[-1]), known, n=1)
        elsewhere = _nested_home(str(loc[-1]))
        if hint:
            suggestion = f"; did you mean {hint[0]!r}?"
        elif elsewhere:
            suggestion = f"; it belongs at {elsewhere}"
        else:
            suggestion = f"; known keys here: {', '.join(known)}" if known else ""
        return f"{_line(node)}{_dotted(loc)}: unknown field{suggestion}"
    node = _node_at(root, loc)
    if kind == "missing":
        parent = _node_at(root, loc[:-1])
        return f"{_line(parent)}{_dotted(loc)}: required field is missing"
    got = err.get("input")
    shown = ""
    if kind not in ("value_error",) and isinstance(got, str | int | float | bool) and len(repr(got)) <= 60:
        shown = f" (got {got!r})"
    return f"{_line(node)}{_dotted(loc)}: {msg}{shown}"


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The model class inside an annotation such as ``tuple[Rule, ...]`` or ``LabelSelector | None``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _nested_home(key: str) -> str | None:
    """Where a key that is misplaced at this level lives in the policy (``safety.maxActionsPerRun``)."""
    queue: list[tuple[str, type[BaseModel]]] = [("", Policy)]
    while queue:
        prefix, model = queue.pop(0)
        for name, field in model.model_fields.items():
            alias = field.alias or name
            path = f"{prefix}.{alias}" if prefix else alias
            if alias == key and prefix:
                return path
            sub = _model_of(field.annotation)
            if sub is not None and sub is not model and sub is not Thresholds:
                queue.append((path + ("[]" if typing.get_origin(field.annotation) is tuple else ""), sub))
    return None


def _known_keys(loc: Sequence[int | str]) -> list[str]:
    model: type[BaseModel] | None = Policy
    for part in loc:
        if model is None:
            return []
        if isinstance(part, int):
            continue
        field = next((f for n, f in model.model_fields.items() if (f.alias or n) == part), None)
        model = _model_of(field.annotation) if field is not None else None
    if model is None:
        return []
    return [f.alias or n for n, f in model.model_fields.items()]


# --- explaining a policy ----------------------------------------------------------------------------


def explain(policy: Policy) -> str:
    """A plain-language account of what the policy makes the reaper do."""
    s = policy.safety
    lines = [
        f"mode: {policy.mode}"
        + ("" if policy.mode == "apply" else " (nothing is changed unless run with --apply)"),
        f"analysis window: {format_setting(policy.window)}",
        "rules (the first matching rule decides):",
    ]
    for i, rule in enumerate(policy.rules, start=1):
        m = rule.match
        kinds = ", ".join(rule.kinds) if rule.kinds else "any kind"
        where = "" if rule.kinds == ("Node",) else f" in namespaces {', '.join(m.namespaces)}"
        conditions = []
        if m.label_selector:
            conditions.append(f"labels {m.label_selector.describe()}")
        if m.min_confidence:
            conditions.append(f"confidence ≥ {m.min_confidence:g}")
        if m.min_wasted_gpu_hours:
            conditions.append(f"≥ {m.min_wasted_gpu_hours:g} wasted GPU-hours")
        if m.min_gpus > 1:
            conditions.append(f"≥ {m.min_gpus} GPUs")
        if m.for_:
            conditions.append(f"held for ≥ {format_setting(m.for_)}")
        cond = f" with {', '.join(conditions)}" if conditions else ""
        confirm = f" after {s.consecutive_runs} consecutive runs" if rule.action.destructive else ""
        lines.append(
            f"  {i}. {rule.name}: {' or '.join(m.findings)} on {kinds}{where}{cond} "
            f"→ {rule.action.value}{confirm}"
        )
    lines.append("never touched: namespaces " + ", ".join(policy.protected_namespaces) + " (always)")
    ex = policy.exclude
    for label, values in (("namespaces", ex.namespaces), ("workloads", ex.workloads), ("nodes", ex.nodes)):
        if values:
            lines.append(f"excluded {label}: {', '.join(values)}")
    if ex.label_selector:
        lines.append(f"excluded labels: {ex.label_selector.describe()}")
    lines.append(
        f"opt-out: annotate a workload or namespace {names.EXCLUDE}=true, "
        f"or {names.EXCLUDE_UNTIL}=<RFC 3339 time>"
    )
    lines.append(
        f"grace: {format_setting(policy.grace.after_creation)} after creation, "
        f"{format_setting(policy.grace.after_restore)} after a restore"
    )
    lines.append(
        f"limits per run: {s.max_actions_per_run} destructive actions, "
        f"{s.max_cordon_share:.0%} of GPU nodes cordoned; "
        f"findings older than {format_setting(s.max_data_age)} are ignored"
    )
    lines.append("HPA/KEDA-managed workloads: never scaled (reported to their owners instead)")
    lines.append(
        "Argo CD / Flux-managed workloads: "
        + ("flagged in the plan and the message" if s.gitops == "flag" else "skipped")
    )
    if policy.price is not None:
        lines.append(f"price: {policy.price:g} {policy.currency} per GPU-hour")
    sl = policy.slack
    if sl.channel or sl.routes:
        routes = "; ".join(f"{', '.join(r.namespaces)} → {r.channel}" for r in sl.routes)
        lines.append(
            f"slack: default {sl.channel or '(none)'}"
            + (f"; routes {routes}" if routes else "")
            + f"; a namespace annotation {names.SLACK_CHANNEL} wins"
        )
    return "\n".join(lines)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of the policy file (docs/policy.schema.json is generated from it)."""
    schema = Policy.model_json_schema(by_alias=True, mode="validation")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "gpu-reaper policy",
        **{k: v for k, v in schema.items() if k != "title"},
    }


# Keep these names importable for tests that build policies in code.
__all__ = [
    "Action",
    "Exclusions",
    "Grace",
    "LabelSelector",
    "Match",
    "Policy",
    "Rule",
    "Safety",
    "SelectorRequirement",
    "Slack",
    "SlackRoute",
    "explain",
    "glob_match",
    "json_schema",
    "load_policy",
    "parse_policy",
]
