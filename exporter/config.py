"""The exporter's validated, immutable configuration and the parsers of its option values.

The command line that fills it is ``cli/exporter.py``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final, NamedTuple

from common.errors import BadInputError
from common.metric_names import HOSTNAME, HOSTNAME_LEGACY

# Where the kubelet serves the PodResources API and keeps pod logs (the DaemonSet mounts both). Here,
# not beside the gRPC client, so the command line's defaults load no gRPC.
DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
DEFAULT_POD_LOG_DIR = Path("/var/log/pods")


#: ``--metric-names``: dcgm-exporter's names and units up to 4.8, or DCGM 4.7's, which dcgm-exporter
#: serves from 4.9 (``exporter.naming``). The first is the default (docs/exporter.md says why).
LEGACY_NAMES: Final = "legacy"
DCGM_4_7_NAMES: Final = "dcgm-4.7"
METRIC_NAMINGS: Final = (LEGACY_NAMES, DCGM_4_7_NAMES)
#: ``--hostname-label``: the node label's name, or ``none`` for no node label.
NO_HOSTNAME: Final = "none"
HOSTNAME_LABELS: Final = (HOSTNAME_LEGACY, HOSTNAME, NO_HOSTNAME)

# A Kubernetes extended resource name: a DNS subdomain, "/", then a name (what a device plugin
# registers, e.g. nvidia.com/gpu).
_RESOURCE_NAME = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
)


class ConfigError(BadInputError):
    """An option value that cannot work; the message names the option."""


class ExporterConfig(NamedTuple):
    """A named tuple rather than a dataclass: the command line builds it for every start, and the
    dataclass machinery alone (``inspect``, ``ast``) costs a --help about a sixth of its time."""

    listen_host: str
    listen_port: int
    interval_s: float
    kubelet_socket: Path | None  # None: --no-kubernetes
    hostname: str
    simulate: str | None
    log_format: str
    pod_log_dir: Path
    proc_root: Path
    log_level: str = "info"
    collectors: Path | None = None  # a dcgm-exporter counters CSV; None serves every family
    web_config: Path | None = None  # exporter-toolkit web config: TLS and basic auth
    metric_names: str = LEGACY_NAMES  # one of METRIC_NAMINGS
    hostname_label: str | None = HOSTNAME_LEGACY  # the node label's name; None: no node label
    pod_uid: bool = False  # a pod_uid label beside pod (dcgm-exporter's --kubernetes-enable-pod-uid)
    nvidia_resource_names: tuple[str, ...] = ()  # resources beyond nvidia.com/* holding NVIDIA GPUs


def parse_listen(value: str) -> tuple[str, int]:
    """``:9400``, ``0.0.0.0:9400``, ``[::]:9400`` → (host, port); an empty host means all interfaces."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--listen {value!r}: expected [HOST]:PORT")
    return host.removeprefix("[").removesuffix("]"), int(port)


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0}


def parse_duration(value: str) -> float:
    """Seconds from ``5``, ``2.5``, ``5s``, ``500ms`` or ``1m`` (Helm values tend to carry units)."""
    number, unit = value, "s"
    for suffix in ("ms", "s", "m"):
        if value.endswith(suffix):
            number, unit = value[: -len(suffix)], suffix
            break
    try:
        return float(number) * _UNITS[unit]
    except ValueError:
        raise ConfigError(f"--interval {value!r}: expected seconds, e.g. 5, 5s or 500ms") from None


def hostname_label(naming: str, label: str | None) -> str | None:
    """The node label's name: ``label`` (``none``: no node label) or, unset, the one dcgm-exporter
    serves with ``naming`` — ``Hostname`` up to 4.8.2, ``hostname`` from 4.8.3 on, so in 4.9, the
    first release with DCGM 4.7's names."""
    if label is None:
        return HOSTNAME if naming == DCGM_4_7_NAMES else HOSTNAME_LEGACY
    return None if label == NO_HOSTNAME else label


def parse_resource_names(value: str, option: str) -> tuple[str, ...]:
    """``example.com/gpu,example.com/a100`` → the names; ``option`` names the flag or variable."""
    names = tuple(dict.fromkeys(name.strip() for name in value.split(",") if name.strip()))
    for name in names:
        if not _RESOURCE_NAME.fullmatch(name):
            raise ConfigError(f"{option} {name!r}: expected DOMAIN/NAME, e.g. example.com/gpu")
    return names
