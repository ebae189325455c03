"""Command line and environment → one validated, immutable configuration."""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from exporter.logs import LOG_FORMATS
from exporter.podresources import DEFAULT_SOCKET
from exporter.pods import DEFAULT_POD_LOG_DIR
from exporter.simulate import SCENARIOS


class ConfigError(ValueError):
    """An option value that cannot work; the message names the option."""


@dataclass(frozen=True)
class ExporterConfig:
    listen_host: str
    listen_port: int
    interval_s: float
    kubelet_socket: Path | None  # None: --no-kubernetes
    hostname: str
    simulate: str | None
    log_format: str
    pod_log_dir: Path
    proc_root: Path


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


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpu-exporter",
        description="DCGM-compatible GPU metrics from NVML, with pod attribution, for Prometheus.",
    )
    p.add_argument(
        "--listen", default=":9400", help="address to serve /metrics and /healthz on (default :9400)"
    )
    p.add_argument("--interval", default="5s", help="time between collections: 5, 5s, 500ms (default 5s)")
    p.add_argument("--kubelet-socket", type=Path, default=DEFAULT_SOCKET, help=f"default {DEFAULT_SOCKET}")
    p.add_argument("--no-kubernetes", action="store_true", help="no pod attribution (not on Kubernetes)")
    p.add_argument(
        "--hostname", default=None, help="Hostname label (default: $NODE_NAME, else the host name)"
    )
    p.add_argument(
        "--simulate", metavar="SCENARIO", choices=SCENARIOS, help=f"fake GPUs: {', '.join(SCENARIOS)}"
    )
    p.add_argument("--log-format", choices=LOG_FORMATS, default="text")
    p.add_argument(
        "--pod-log-dir",
        type=Path,
        default=DEFAULT_POD_LOG_DIR,
        help=f"kubelet pod log directory: pod UID to name, for shared GPUs (default {DEFAULT_POD_LOG_DIR})",
    )
    p.add_argument("--proc-root", type=Path, default=Path("/proc"), help="host /proc, for process cgroups")
    return p


def from_args(argv: Sequence[str], env: Mapping[str, str] = os.environ) -> ExporterConfig:
    """Parse and validate; raises :class:`ConfigError` (and argparse's SystemExit for unknown options)."""
    args = parser().parse_args(list(argv))
    host, port = parse_listen(args.listen)
    interval_s = parse_duration(args.interval)
    if not 0.05 <= interval_s <= 3600:
        raise ConfigError(f"--interval {args.interval}: expected 50ms to 1h")
    return ExporterConfig(
        listen_host=host,
        listen_port=port,
        interval_s=interval_s,
        kubelet_socket=None if args.no_kubernetes else args.kubelet_socket,
        hostname=args.hostname or env.get("NODE_NAME") or socket.gethostname(),
        simulate=args.simulate,
        log_format=args.log_format,
        pod_log_dir=args.pod_log_dir,
        proc_root=args.proc_root,
    )
