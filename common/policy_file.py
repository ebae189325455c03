"""The policy file loader: YAML in, a validated pydantic model out, every problem at its line.

One loader for the one policy file two tools read: the analyzer validates its ``detection:`` block,
the reaper the whole file. Both get the same errors — :class:`common.errors.PolicyError`, one line
per problem: ``policy.yaml: line 7: rules[0].match.kinds[0]: Input should be …`` — and the same
checks before validation (readable UTF-8, valid YAML, a mapping at the top, no key given twice).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from common.errors import PolicyError

M = TypeVar("M", bound=BaseModel)
Loc = tuple[int | str, ...]


@dataclass(frozen=True)
class PolicyDocument:
    """A parsed policy file: the plain data, and the YAML node tree that knows where each value is."""

    source: str
    data: dict[str, Any] | None  # None: the file holds no document (empty, or only comments)
    root: yaml.Node | None

    def validate(
        self,
        model: type[M],
        *,
        section: str | None = None,
        separate: tuple[type[BaseModel], ...] = (),
    ) -> M:
        """``model`` validated from the whole file or from one top-level ``section``; raises PolicyError.

        A missing or empty section validates as ``{}`` (the model's defaults). ``separate`` names
        sub-models that are sections of their own: a misplaced key is not suggested to move there.
        """
        at: Loc = (section,) if section is not None else ()
        data: Any = self.data or {}
        if section is not None:
            data = data.get(section)
            if data is None:
                data = {}
        try:
            return model.model_validate(data)
        except ValidationError as e:
            errors: list[dict[str, Any]] = [{**err, "loc": (*at, *err["loc"])} for err in e.errors()]
            # A list whose items failed also reports "too short" for itself: noise next to the real cause.
            errors = [
                err for err in errors if not (err["type"] == "too_short" and _has_child(err["loc"], errors))
            ]
            described = [_describe(err, self.root, model, at, separate) for err in errors]
            raise PolicyError(self.source, sorted(described, key=_by_line)) from e


def read_policy_text(path: str | Path) -> str:
    """The file's text; PolicyError when it cannot be read or is not UTF-8 text."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise PolicyError(str(path), [f"cannot read the policy file: {e.strerror or e}"]) from e
    except UnicodeDecodeError as e:
        raise PolicyError(str(path), ["not a text file (UTF-8 expected)"]) from e


def parse_policy_document(text: str, source: str = "<policy>") -> PolicyDocument:
    """Parse YAML, refusing what would load silently wrong: a non-mapping top level, a key given twice."""
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
        return PolicyDocument(source, None, None)
    if not isinstance(data, dict):
        raise PolicyError(
            source, [f"the top level must be a mapping of keys (a YAML mapping), got a {_yaml_type(data)}"]
        )
    duplicates = list(_duplicate_keys(root, ()))
    if duplicates:
        raise PolicyError(
            source,
            [
                f"{_line(node)}{_dotted(loc)}: key given twice; the later one would win silently"
                for loc, node in duplicates
            ],
        )
    return PolicyDocument(source, data, root)


def load_policy_document(path: str | Path) -> PolicyDocument:
    return parse_policy_document(read_policy_text(path), str(path))


# --- locating and describing problems ----------------------------------------------------------------


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


def _duplicate_keys(node: yaml.Node, loc: Loc) -> Iterator[tuple[Loc, yaml.Node]]:
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


def _node_at(root: yaml.Node | None, loc: Sequence[int | str]) -> yaml.Node | None:
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


def _key_node_at(root: yaml.Node | None, loc: Sequence[int | str]) -> yaml.Node | None:
    parent = _node_at(root, loc[:-1])
    if isinstance(parent, yaml.MappingNode):
        return next((k for k, _ in parent.value if getattr(k, "value", None) == loc[-1]), None)
    return None


def _describe(
    err: Mapping[str, Any],
    root: yaml.Node | None,
    model: type[BaseModel],
    at: Loc,
    separate: tuple[type[BaseModel], ...],
) -> str:
    loc = [p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "tagged-union")))]
    kind = err["type"]
    msg = str(err["msg"])
    if msg.startswith(("Value error, ", "Assertion failed, ")):
        msg = msg.split(", ", 1)[1]
    if kind == "extra_forbidden":
        node = _key_node_at(root, loc)
        known = _known_keys(model, loc[len(at) : -1])
        hint = difflib.get_close_matches(str(loc[-1]), known, n=1)
        elsewhere = _nested_home(model, str(loc[-1]), separate)
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
    if kind in ("model_type", "dict_type"):
        return f"{_line(node)}{_dotted(loc)}: must be a mapping, got a {_yaml_type(got)}"
    shown = ""
    if kind not in ("value_error",) and isinstance(got, str | int | float | bool) and len(repr(got)) <= 60:
        shown = f" (got {got!r})"
    return f"{_line(node)}{_dotted(loc)}: {msg}{shown}"


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The model class inside an annotation such as ``tuple[Rule, ...]`` or ``LabelSelector | None``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _nested_home(model: type[BaseModel], key: str, separate: tuple[type[BaseModel], ...]) -> str | None:
    """Where a key that is misplaced at this level lives in the file (``safety.maxActionsPerRun``)."""
    queue: list[tuple[str, type[BaseModel]]] = [("", model)]
    while queue:
        prefix, current = queue.pop(0)
        for name, field in current.model_fields.items():
            alias = field.alias or name
            path = f"{prefix}.{alias}" if prefix else alias
            if alias == key and prefix:
                return path
            sub = _model_of(field.annotation)
            if sub is not None and sub is not current and sub not in separate:
                queue.append((path + ("[]" if get_origin(field.annotation) is tuple else ""), sub))
    return None


def _known_keys(model: type[BaseModel], loc: Sequence[int | str]) -> list[str]:
    current: type[BaseModel] | None = model
    for part in loc:
        if current is None:
            return []
        if isinstance(part, int):
            continue
        field = next((f for n, f in current.model_fields.items() if (f.alias or n) == part), None)
        current = _model_of(field.annotation) if field is not None else None
    if current is None:
        return []
    return [f.alias or n for n, f in current.model_fields.items()]
