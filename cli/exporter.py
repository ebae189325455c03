"""``gpu-exporter``: the command-line entry point.

The exporter itself (NVML, the collection cycle, the HTTP server) is imported by ``build_exporter``,
not at the top: ``--help`` and ``--version`` need only the parser (docs/architecture.md, "Start-up time").
It reads the exporter and the simulation through their packages' public surfaces, not their modules
(docs/architecture.md, "Public surfaces").
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from cli import conventions
from exporter import (  # the configuration only: no NVML, no gRPC
    DEFAULT_POD_LOG_DIR,
    DEFAULT_SOCKET,
    HOSTNAME_LABELS,
    METRIC_NAMINGS,
    ConfigError,
    ExporterConfig,
    hostname_label,
    parse_duration,
    parse_listen,
    parse_resource_names,
)
from simulation import SCENARIOS  # the names only: no fake NVML

if TYPE_CHECKING:
    from exporter import Exporter

log = logging.getLogger("exporter")


PROG = "gpu-exporter"
#: Environment fallbacks of the naming and label options: $GPU_ + the flag, as the analyzer's options
#: have; the resource names under dcgm-exporter's own variable, so a switching user's setting carries over.
METRIC_NAMES_ENV = "GPU_METRIC_NAMES"
HOSTNAME_LABEL_ENV = "GPU_HOSTNAME_LABEL"
NO_HOSTNAME_ENV = "GPU_NO_HOSTNAME"
POD_UID_ENV = "GPU_POD_UID"
RESOURCE_NAMES_ENV = "NVIDIA_RESOURCE_NAMES"


def parser() -> argparse.ArgumentParser:
    p = conventions.new_parser(
        PROG,
        "DCGM-compatible GPU metrics from NVML, with pod attribution, for Prometheus.",
        default_log_level="info",
    )
    p.add_argument(
        "--listen", default=":9400", help="address of /metrics, /healthz and /readyz (default :9400)"
    )
    p.add_argument("--interval", default="5s", help="time between collections: 5, 5s, 500ms (default 5s)")
    p.add_argument("--kubelet-socket", type=Path, default=DEFAULT_SOCKET, help=f"default {DEFAULT_SOCKET}")
    p.add_argument("--no-kubernetes", action="store_true", help="no pod attribution (not on Kubernetes)")
    p.add_argument(
        "--hostname", default=None, help="node label's value (default: $NODE_NAME, else the host name)"
    )
    p.add_argument(
        "--simulate", metavar="SCENARIO", choices=SCENARIOS, help=f"fake GPUs: {', '.join(SCENARIOS)}"
    )
    p.add_argument(
        "-f",
        "--collectors",
        type=Path,
        default=None,
        help="dcgm-exporter counters CSV choosing the DCGM series to serve (default: all)",
    )
    p.add_argument(
        "--web.config.file",
        dest="web_config",
        type=Path,
        default=None,
        help="TLS and basic auth, in the Prometheus exporter-toolkit web config format",
    )
    p.add_argument(
        "--pod-log-dir",
        type=Path,
        default=DEFAULT_POD_LOG_DIR,
        help=f"kubelet pod log directory: pod UID to name, for shared GPUs (default {DEFAULT_POD_LOG_DIR})",
    )
    p.add_argument("--proc-root", type=Path, default=Path("/proc"), help="host /proc, for process cgroups")
    g = p.add_argument_group("names and labels (dcgm-exporter compatibility)")
    g.add_argument(
        "--metric-names",
        choices=METRIC_NAMINGS,
        default=None,
        help="legacy: dcgm-exporter's names and units up to 4.8; dcgm-4.7: DCGM 4.7's names and base "
        f"units, as dcgm-exporter 4.9 serves them (default legacy) [${METRIC_NAMES_ENV}]",
    )
    g.add_argument(
        "--hostname-label",
        choices=HOSTNAME_LABELS,
        default=None,
        help="name of the node label, or none (default: Hostname with legacy names, hostname with "
        f"dcgm-4.7) [${HOSTNAME_LABEL_ENV}]",
    )
    g.add_argument(
        "-n",
        "--no-hostname",
        action="store_true",
        default=None,
        help=f"no node label: --hostname-label none, in dcgm-exporter's spelling [${NO_HOSTNAME_ENV}]",
    )
    g.add_argument(
        "--pod-uid",
        action="store_true",
        default=None,
        help=f"a pod_uid label beside pod, from the pod log directory [${POD_UID_ENV}]",
    )
    g.add_argument(
        "--nvidia-resource-names",
        metavar="NAMES",
        default=None,
        help="comma-separated resource names, beyond nvidia.com/*, whose devices are NVIDIA GPUs "
        f"[${RESOURCE_NAMES_ENV}]",
    )
    return p


def from_args(argv: Sequence[str], env: Mapping[str, str] = os.environ) -> ExporterConfig:
    """Parse and validate; raises :class:`ConfigError` (and argparse's SystemExit for unknown options)."""
    return _config(parser().parse_args(list(argv)), env)


def _config(args: argparse.Namespace, env: Mapping[str, str]) -> ExporterConfig:
    host, port = parse_listen(args.listen)
    interval_s = parse_duration(args.interval)
    if not 0.05 <= interval_s <= 3600:
        raise ConfigError(f"--interval {args.interval}: expected 50ms to 1h")
    naming = _choice(args.metric_names, env, METRIC_NAMES_ENV, METRIC_NAMINGS) or METRIC_NAMINGS[0]
    label = _node_label(args, env)
    resources = args.nvidia_resource_names
    where = "--nvidia-resource-names"
    if resources is None:
        resources, where = env.get(RESOURCE_NAMES_ENV, ""), f"${RESOURCE_NAMES_ENV}"
    return ExporterConfig(
        listen_host=host,
        listen_port=port,
        interval_s=interval_s,
        kubelet_socket=None if args.no_kubernetes else args.kubelet_socket,
        hostname=args.hostname or env.get("NODE_NAME") or _hostname(),
        simulate=args.simulate,
        log_format=args.log_format or "text",
        pod_log_dir=args.pod_log_dir,
        proc_root=args.proc_root,
        log_level=args.log_level or "info",
        collectors=args.collectors,
        web_config=args.web_config,
        metric_names=naming,
        hostname_label=hostname_label(naming, label),
        pod_uid=_switch(args.pod_uid, env, POD_UID_ENV),
        nvidia_resource_names=parse_resource_names(resources, where),
    )


def _node_label(args: argparse.Namespace, env: Mapping[str, str]) -> str | None:
    """``--hostname-label`` or ``--no-hostname`` (a flag beats the environment); ``None``: unset."""
    if args.no_hostname and args.hostname_label not in (None, "none"):
        raise ConfigError(f"--no-hostname and --hostname-label {args.hostname_label}: choose one")
    if args.no_hostname:
        return "none"
    if args.hostname_label is not None:
        return str(args.hostname_label)
    label = _choice(None, env, HOSTNAME_LABEL_ENV, HOSTNAME_LABELS)
    if _switch(None, env, NO_HOSTNAME_ENV):
        if label not in (None, "none"):
            raise ConfigError(f"${NO_HOSTNAME_ENV} and ${HOSTNAME_LABEL_ENV} {label}: choose one")
        return "none"
    return label


def _choice(flag: str | None, env: Mapping[str, str], name: str, choices: Sequence[str]) -> str | None:
    """The flag's value, else its environment variable's (checked as argparse checks the flag)."""
    if flag is not None:
        return flag
    value = env.get(name) or None
    if value is not None and value not in choices:
        raise ConfigError(f"${name} {value!r}: expected one of {', '.join(choices)}")
    return value


def _switch(flag: bool | None, env: Mapping[str, str], name: str) -> bool:
    if flag is not None:
        return flag
    try:
        return conventions.bool_arg(env.get(name, ""))
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(f"${name}: {exc}") from None


def _hostname() -> str:
    import socket  # here: the only use of socket a --help would otherwise load

    return socket.gethostname()


def build_exporter(config: ExporterConfig) -> Exporter:
    """The exporter for ``config``: over the real NVML, or over a scripted fake with ``--simulate``."""
    from exporter import Exporter, Nvml
    from simulation import build_scenario

    if config.simulate:
        return Exporter(config, Nvml(build_scenario(config.simulate, interval_s=config.interval_s)))
    return Exporter(config)


def main(argv: Sequence[str] | None = None) -> int:
    """Run until SIGTERM or SIGINT. Exit status: 0 stopped cleanly, 1 could not start, 2 bad usage."""

    def check(args: argparse.Namespace) -> None:  # option values that cannot work are usage errors
        args.config = _config(args, os.environ)

    args = conventions.parse(parser(), argv, check)
    if isinstance(args, int):
        return args
    with conventions.logging_for(args):
        return _serve(args.config)


def _serve(config: ExporterConfig) -> int:
    import signal
    import threading

    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        stop.set()

    try:
        exporter = build_exporter(config)
    except ConfigError as exc:
        log.error("%s", exc)
        return 2
    except OSError as exc:
        log.error("cannot listen on %s:%d: %s", config.listen_host, config.listen_port, exc)
        return 1
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    exporter.start()
    stop.wait()
    exporter.stop()
    return 0
