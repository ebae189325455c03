"""What gpu-exporter, gpu-analyzer and gpu-reaper share on the command line, written once.

* ``--version``; ``--log-level``, ``--log-format`` and ``-v`` before or after the subcommand;
* argparse's own usage errors (``usage: …`` then ``PROG: error: …``, exit 2) and the same
  ``PROG: error: …`` line for bad input found later (exit 2) or an unusable data source (exit 3);
* ``--end`` (RFC 3339 or unix seconds, not in the future) and ``--namespace`` (repeatable).

The Prometheus options of ``analyze`` and ``run`` live in ``cli.prometheus_options`` (the exporter
does not query Prometheus); their older spellings are hidden aliases that log a deprecation warning.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from common import logs
from common.errors import BadInputError, DataUnavailableError, ExitCode, GpuToolError
from common.version import VERSION

log = logging.getLogger("cli")

# A Kubernetes namespace name (an RFC 1123 label).
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


# --- parsers ---------------------------------------------------------------------------------------


class _VersionAction(argparse._VersionAction):
    """argparse's ``--version``, the version imported only when the flag is given."""

    def __init__(self, option_strings: Sequence[str], tool: str, **kwargs: Any) -> None:
        super().__init__(option_strings, **kwargs)
        self.tool = tool

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        self.version = f"{self.tool} {VERSION}"
        super().__call__(parser, namespace, values, option_string)


def _logging_options(default: str | None) -> argparse.ArgumentParser:
    """``--log-level``/``--log-format``/``-v``; ``default`` None (SUPPRESS) for a subcommand's copy, so
    a value given before the subcommand is not reset by the subcommand's parser."""
    unset: Any = argparse.SUPPRESS if default is None else None
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("logging (before or after the command)")
    g.add_argument(
        "--log-level", choices=logs.LOG_LEVELS, default=unset, help=f"default {default or 'as above'}"
    )
    g.add_argument(
        "--log-format", choices=logs.LOG_FORMATS, default=unset, help="text for people, json for pipelines"
    )
    g.add_argument(
        "-v", "--verbose", action="count", default=unset, help="-v logs each step (info), -vv debug"
    )
    return p


def new_parser(prog: str, description: str, default_log_level: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description=description, parents=[_logging_options(default_log_level)]
    )
    parser.add_argument("--version", action=_VersionAction, tool=prog)
    parser.set_defaults(_parser=parser, _log_default=default_log_level)
    return parser


def add_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help: str, **kwargs: Any
) -> argparse.ArgumentParser:
    """A subcommand that also takes the logging options after its name."""
    parser = commands.add_parser(
        name, help=help, description=help, parents=[_logging_options(None)], **kwargs
    )
    # After the command too (`gpu-reaper run --version`), as the logging options are: the version
    # is the tool's, named as the tool.
    tool = parser.prog.split()[0]
    parser.add_argument("--version", action=_VersionAction, tool=tool)
    parser.set_defaults(_parser=parser)
    return parser


def parse(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    check: Callable[[argparse.Namespace], None] | None = None,
) -> argparse.Namespace | int:
    """Parse and run ``check`` (which may fill options from the environment); an exit code for usage
    errors (2) or ``--help``/``--version`` (0). ``check`` raises ``BadInputError`` for a usage error,
    reported as argparse reports its own."""
    try:
        args = _parse_command_line(parser, list(sys.argv[1:] if argv is None else argv))
        command_parser: argparse.ArgumentParser = args._parser
        try:
            if check is not None:
                check(args)
        except BadInputError as e:
            command_parser.error(str(e))
    except SystemExit as e:  # argparse printed the usage error, the help or the version
        return e.code if isinstance(e.code, int) else ExitCode.BAD_INPUT
    return args


def _parse_command_line(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``parse_args``, with usage errors said by the command they concern.

    argparse reports an unknown option with the top parser's usage, and after any missing required
    argument (``gpu-reaper run --bogus``: "required: --policy"; before the command is named, "required:
    COMMAND"). A first pass with nothing required finds what is left over, reported by the deepest
    command reached (its own usage); only then are required arguments and commands checked.
    """
    with _nothing_required(parser, everything=True):
        args, extras = parser.parse_known_args(argv)
    command_parser: argparse.ArgumentParser = args._parser
    if extras:
        command_parser.error(f"unrecognized arguments: {' '.join(extras)}")
    with _nothing_required(parser, everything=False):
        args, extras = parser.parse_known_args(argv)
    command_parser = args._parser
    for action in _commands(command_parser, nested=False):
        if getattr(args, action.dest, None) is None:
            command_parser.error(f"the following arguments are required: {action.metavar or action.dest}")
    return args


@contextmanager
def _nothing_required(parser: argparse.ArgumentParser, everything: bool) -> Iterator[None]:
    """The commands (and, ``everything``, every other required argument and group) made optional for
    the block: what is missing is then checked by the caller, after what is left over."""
    relaxed: list[Any] = list(_commands(parser))
    if everything:
        relaxed += _required(parser)
    for item in relaxed:
        item.required = False
    try:
        yield
    finally:
        for item in relaxed:
            item.required = True


def _required(parser: argparse.ArgumentParser) -> list[Any]:
    """Every required argument and mutually exclusive group of ``parser`` and its commands."""
    commands = argparse._SubParsersAction
    found: list[Any] = [a for a in parser._actions if a.required and not isinstance(a, commands)]
    found += [g for g in parser._mutually_exclusive_groups if g.required]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                found += _required(sub)
    return found


def _commands(parser: argparse.ArgumentParser, nested: bool = True) -> list[argparse._SubParsersAction[Any]]:
    """The required subcommand choices of ``parser`` (and, ``nested``, of its commands)."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and action.required:
            found.append(action)
            if nested:
                for sub in dict.fromkeys(action.choices.values()):
                    found += _commands(sub)
    return found


def fail(prog: str, error: GpuToolError) -> int:
    """Print what went wrong as ``PROG: error: …`` on stderr, once; the exit code for it."""
    if isinstance(error, DataUnavailableError):
        print(f"{prog}: error: data source unavailable: {error}", file=sys.stderr)
    else:
        print(f"{prog}: error: {error}", file=sys.stderr)
    return int(error.exit_code)


@contextmanager
def logging_for(args: argparse.Namespace) -> Iterator[None]:
    """The project's loggers at the level and in the format the options ask for, for one command."""
    default = getattr(args, "_log_default", "info")
    level_name = getattr(args, "log_level", None)
    if level_name is None:
        verbose = getattr(args, "verbose", None) or 0
        level_name = "debug" if verbose >= 2 else ("info" if verbose == 1 and default != "debug" else default)
    level = getattr(logging, level_name.upper())
    handler = logs.configure(getattr(args, "log_format", None) or "text", level)
    urllib3 = logging.getLogger("urllib3")
    urllib3_level = urllib3.level
    # Retries are expected and bounded; the final error says what failed, once (debug shows them).
    urllib3.setLevel(logging.DEBUG if level <= logging.DEBUG else logging.ERROR)
    for old, new in getattr(args, "_deprecated", ()):
        log.warning("%s is deprecated; use %s", old, new)
    try:
        yield
    finally:
        urllib3.setLevel(urllib3_level)
        logs.unconfigure(handler)


# --- values ----------------------------------------------------------------------------------------
# common.timeutil is imported where a value is converted, not at the top: it imports pydantic (for its
# AwareDatetime), which the parser itself does not need (docs/architecture.md, "Start-up time").


def duration_arg(text: str) -> timedelta:
    from common.timeutil import parse_duration

    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def timeout_arg(text: str) -> timedelta:
    """A duration with a unit (``90s``, ``2m``) or a bare number of seconds."""
    try:
        seconds = float(text)
    except ValueError:
        return duration_arg(text)
    if not seconds > 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(f"invalid timeout {text!r}: must be a positive number of seconds")
    return timedelta(seconds=seconds)


def past_time_arg(text: str) -> datetime:
    """RFC 3339 or unix seconds, not after now: there is no data from the future to judge."""
    from common.timeutil import parse_time

    try:
        at = parse_time(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
    now = datetime.now(UTC)
    if at > now:
        raise argparse.ArgumentTypeError(
            f"{text!r} is in the future (now is {now.isoformat(timespec='seconds')})"
        )
    return at


def namespace_arg(text: str) -> str:
    if not _NAMESPACE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Kubernetes namespace name")
    return text


def label_name_arg(text: str) -> str:
    if not _LABEL_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)")
    return text


def cluster_arg(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("a cluster name cannot be empty")
    return text


def count_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"invalid count {text!r}: a whole number, 0 or more")
    return value


def bool_arg(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes"):
        return True
    if lowered in ("0", "false", "no", ""):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean {text!r}: true or false")


def add_end_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--end",
        type=past_time_arg,
        metavar="TIME",
        help=f"{what}: RFC 3339 (2026-01-05T00:00:00Z) or unix seconds, not in the future; default now",
    )


def add_namespace_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--namespace",
        dest="namespaces",
        action="append",
        type=namespace_arg,
        metavar="NS",
        help=f"{what} (repeat for several)",
    )


def check_writable(path: Path, what: str = "--output") -> None:
    """Fail before a long run rather than after it: ``path`` must be a file we can create or replace."""
    parent = path.parent
    if path.is_dir():
        raise BadInputError(f"{what} {path}: is a directory")
    if not parent.is_dir():
        raise BadInputError(f"{what} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise BadInputError(f"{what} {path}: not writable")
