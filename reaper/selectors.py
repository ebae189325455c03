"""Kubernetes label selectors in their query-string form (``a=b,c in (d,e),!f``): parsed and matched.

The API server filters lists by ``labelSelector``; the in-memory cluster and the test emulator use
this module to filter the same way, and the policy's selectors are turned into that form here.
Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from common.errors import BadInputError
from reaper.policy.schema import LabelSelector

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_KEY = re.compile(rf"^!?\s*{_NAME}$")
_SET = re.compile(rf"^({_NAME})\s+(in|notin)\s*\((.*)\)$")
_EQ = re.compile(rf"^({_NAME})\s*(==|=|!=)\s*([-A-Za-z0-9_.]*)$")


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # "in", "notin", "exists", "!"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        match self.operator:
            case "in":
                return labels.get(self.key) in self.values
            case "notin":
                return labels.get(self.key) not in self.values
            case "exists":
                return self.key in labels
            case _:
                return self.key not in labels


def _split(text: str) -> list[str]:
    """Top-level comma-separated requirements (commas inside ``( )`` belong to a value set)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def parse(text: str) -> tuple[Requirement, ...]:
    """The requirements of a selector string; an empty string selects everything."""
    if not text.strip():
        return ()
    out: list[Requirement] = []
    for part in _split(text):
        if m := _SET.match(part):
            values = frozenset(v.strip() for v in m.group(4).split(","))
            out.append(Requirement(m.group(1), m.group(3), values))
        elif m := _EQ.match(part):
            operator = "notin" if m.group(3) == "!=" else "in"
            out.append(Requirement(m.group(1), operator, frozenset({m.group(4)})))
        elif _KEY.match(part):
            negated = part.startswith("!")
            out.append(Requirement(part.lstrip("!").strip(), "!" if negated else "exists"))
        else:
            raise BadInputError(f"label selector {text!r}: cannot parse {part!r}")
    return tuple(out)


def matches(requirements: tuple[Requirement, ...], labels: Mapping[str, str]) -> bool:
    return all(r.matches(labels) for r in requirements)


def query(selector: LabelSelector) -> str:
    """The policy's selector in the form the API server takes as ``labelSelector``."""
    parts = [f"{k}={v}" for k, v in sorted(selector.match_labels.items())]
    for e in selector.match_expressions:
        if e.operator in ("In", "NotIn"):
            parts.append(f"{e.key} {e.operator.lower()} ({','.join(sorted(e.values))})")
        else:
            parts.append(e.key if e.operator == "Exists" else f"!{e.key}")
    return ",".join(parts)
