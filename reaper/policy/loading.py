"""Reading a policy file: the one loader in common.policy_file, then what only the whole policy needs."""

from __future__ import annotations

from pathlib import Path

from common.errors import PolicyError
from common.policy_file import parse_policy_document, read_policy_text
from common.thresholds import Thresholds
from reaper.policy.schema import Policy


def load_policy(path: str | Path) -> Policy:
    """Read and validate a policy file; raises PolicyError naming the file, line, field and problem."""
    return parse_policy(read_policy_text(path), str(path))


def parse_policy(text: str, source: str = "<policy>") -> Policy:
    document = parse_policy_document(text, source)
    if document.data is None:
        raise PolicyError(source, ["the file is empty; a policy needs at least `rules:`"])
    # The detection block is the analyzer's section: a misplaced reaper key is not sent there.
    return document.validate(Policy, separate=(Thresholds,))
