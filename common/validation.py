"""A pydantic validation error as one line a person can act on: where, and what is wrong.

pydantic's own text spans several lines per problem, repeats the model's name and ends each with a
documentation URL; a command line reports bad input in one line (``PROG: error: …``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

# Problems named in full; the rest are counted.
_SHOWN = 3


def one_line(error: ValidationError, at: str = "") -> str:
    """``findings[3].kind: 'bogus' is not one of 'idle_endpoint', …`` for ``at="findings[3]"``."""
    problems = [f"{place(at, e['loc'])}: {_problem(e)}" for e in error.errors(include_url=False)]
    text = "; ".join(problems[:_SHOWN])
    hidden = len(problems) - _SHOWN
    return text + (f" (and {hidden} more)" if hidden > 0 else "")


def place(at: str, loc: Sequence[int | str]) -> str:
    """``at`` followed by a pydantic location: ``findings[3]`` + ``("window", "end")``."""
    text = at
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif not part.startswith(("function-", "tagged-union")):  # pydantic's validator frames
            text += f".{part}" if text else part
    return text or "(document)"


def _problem(error: Any) -> str:
    kind, message, ctx = error["type"], str(error["msg"]), error.get("ctx") or {}
    if kind == "enum" and "expected" in ctx:
        return f"{error['input']!r} is not one of {ctx['expected']}"
    if kind == "missing":
        return "required field is missing"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return "must be a JSON object"  # pydantic's words name the model class, which says nothing
    return message.removeprefix("Value error, ")
