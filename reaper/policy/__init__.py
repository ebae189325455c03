"""The reaper's policy: YAML validated into one immutable object.

- ``fields``: validated field types (globs, label keys and values, namespaces, Slack channels);
- ``schema``: the file's shape (rules, exclusions, grace, safety, Slack) and the run mode;
- ``loading``: reading the file through the shared loader, errors at file:line:field;
- ``explain``: the policy in plain language, and its JSON Schema.
"""

from __future__ import annotations

from reaper.policy.explain import explain, json_schema
from reaper.policy.fields import glob_match
from reaper.policy.loading import load_policy, parse_policy
from reaper.policy.schema import (
    SCALABLE_KINDS,
    STOPPABLE_KINDS,
    Action,
    Exclusions,
    Grace,
    LabelSelector,
    Match,
    Policy,
    Rule,
    RunMode,
    Safety,
    SelectorRequirement,
    Slack,
    SlackRoute,
)

__all__ = [
    "SCALABLE_KINDS",
    "STOPPABLE_KINDS",
    "Action",
    "Exclusions",
    "Grace",
    "LabelSelector",
    "Match",
    "Policy",
    "Rule",
    "RunMode",
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
