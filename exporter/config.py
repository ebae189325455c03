"""The exporter's validated, immutable configuration and the parsers of its option values.

The command line that fills it is ``cli/exporter.py``."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from common.errors import BadInputError

# Where the kubelet serves the PodResources API and keeps pod logs (the DaemonSet mounts both). Here,
# not beside the gRPC client, so the command line's defaults load no gRPC.
DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
DEFAULT_POD_LOG_DIR = Path("/var/log/pods")


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
