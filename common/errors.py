"""The project's one error root and its exit-code classes, shared by all three commands.

Every error raised on purpose derives from :class:`GpuToolError`; its ``exit_code`` is what the
command line returns for it (docs/architecture.md, "Exit codes"). Adapters translate library
errors into these, keyed on what went wrong rather than on message text.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    ACTION_FAILED = 1
    BAD_INPUT = 2
    DATA_UNAVAILABLE = 3


class GpuToolError(Exception):
    """Base of every error the project raises on purpose."""

    exit_code: ExitCode = ExitCode.ACTION_FAILED


class BadInputError(GpuToolError):
    """Flags, policy, scenario, credentials or a window that cannot be used. Exit code 2."""

    exit_code = ExitCode.BAD_INPUT


class PolicyError(BadInputError):
    """A policy file that does not validate: the message names the file, line, field and problem."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = tuple(problems)
        super().__init__("\n".join(f"{source}: {p}" for p in problems))


class DataUnavailableError(GpuToolError):
    """Metrics, findings or the cluster cannot be trusted for this run. Exit code 3.

    Never turned into "all idle" or "all fine": a run that meets it acts on nothing.
    """

    exit_code = ExitCode.DATA_UNAVAILABLE
