"""The policy's field types: globs over Kubernetes names, label keys and values, namespaces, Slack channels.

Each is a validated ``str``: a value that can never match a Kubernetes object is refused when the
file is loaded, not silently ignored at run time.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from typing import Annotated

from pydantic import AfterValidator, WithJsonSchema

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


_CHANNEL_NAME = re.compile(r"^#[a-z0-9][a-z0-9._\-]{0,79}$")
_CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9]{6,}$")


def _check_channel(value: str) -> str:
    # "#name" for readability, or a channel ID (C…, G…) which survives renames.
    if _CHANNEL_NAME.match(value) or _CHANNEL_ID.match(value):
        return value
    raise ValueError(
        f"Slack channel {value!r} must be '#name' (lowercase) or a channel ID such as C0123456789"
    )


def tenant_channel_problem(value: str) -> str | None:
    """Why a channel a namespace's owners name (``gpu-reaper/slack-channel``) is not posted to.

    As the policy's channels are checked, and stricter: never a direct message (a ``D…`` id), nor a
    user (``U…``, ``W…``, ``@name``), which would let any namespace owner message anyone.
    """
    if value.startswith(("U", "W", "@")) or (value.startswith("D") and _CHANNEL_ID.match(value)):
        return "a user or a direct message, not a channel"
    try:
        _check_channel(value)
    except ValueError as e:
        return str(e)
    return None


def _check_channel_glob(value: str) -> str:
    if re.match(r"^#[a-z0-9._\-*?\[\]!]{1,80}$", value) or _CHANNEL_ID.match(value):
        return value
    raise ValueError(
        f"allowed channel {value!r} must be '#name' (lowercase, globs * ? [...] allowed) or a channel ID"
    )


def check_cluster_name(value: str) -> str:
    """A cluster as the series' cluster label names it (any label value), as ``--cluster`` takes it."""
    if not value.strip():
        raise ValueError("a cluster name cannot be empty")
    return value


LabelKey = Annotated[str, AfterValidator(_check_label_key)]
LabelValue = Annotated[str, AfterValidator(_check_label_value)]
NamespaceName = Annotated[str, AfterValidator(_check_namespace_name)]
Channel = Annotated[
    str,
    AfterValidator(_check_channel),
    WithJsonSchema({"type": "string", "pattern": r"^(#[a-z0-9][a-z0-9._\-]{0,79}|[CGD][A-Z0-9]{6,})$"}),
]


ChannelGlob = Annotated[
    str,
    AfterValidator(_check_channel_glob),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": r"^(#[a-z0-9._\-*?\[\]!]{1,80}|[CGD][A-Z0-9]{6,})$",
            "description": "A Slack channel: '#name' with shell-style globs (#team-*), or a channel ID.",
        }
    ),
]


ClusterName = Annotated[
    str,
    AfterValidator(check_cluster_name),
    WithJsonSchema(
        {
            "type": "string",
            "minLength": 1,
            "pattern": r"\S",
            "description": "The cluster label's value (by convention `cluster`) on this cluster's series.",
        }
    ),
]


def glob_match(name: str, patterns: Sequence[str]) -> str | None:
    """The first glob matching ``name``, or None."""
    for pattern in patterns:
        if fnmatch.fnmatchcase(name, pattern):
            return pattern
    return None
