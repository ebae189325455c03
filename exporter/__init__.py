"""NVML exporter: DCGM-compatible GPU metrics with pod attribution, run as a DaemonSet.

The package's public surface is what ``gpu-exporter`` builds and starts one with: its
configuration (``ExporterConfig``, the kubelet defaults, the values of ``--metric-names`` and
``--hostname-label``, the parsers of ``--listen``, ``--interval`` and ``--nvidia-resource-names``, and
``ConfigError`` for a value that cannot work), the ``Exporter`` itself, and
``Nvml``, the binding it reads GPUs through (handed a fake one for ``--simulate``). Everything else
— the collection cycle, pod attribution, the exposition, the HTTP server — is the exporter's own.
Each name is imported from its module when first asked for (PEP 562's module ``__getattr__``,
built by ``common.surface``), so the configuration's names load neither NVML nor gRPC
(docs/architecture.md, "Public surfaces").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.surface import lazy_surface

# name → the module that defines it
_SURFACE = {
    "DEFAULT_POD_LOG_DIR": "exporter.config",
    "DEFAULT_SOCKET": "exporter.config",
    "HOSTNAME_LABELS": "exporter.config",
    "METRIC_NAMINGS": "exporter.config",
    "ConfigError": "exporter.config",
    "Exporter": "exporter.app",
    "ExporterConfig": "exporter.config",
    "Nvml": "exporter.nvml",
    "hostname_label": "exporter.config",
    "parse_duration": "exporter.config",
    "parse_listen": "exporter.config",
    "parse_resource_names": "exporter.config",
}

__all__ = [
    "DEFAULT_POD_LOG_DIR",
    "DEFAULT_SOCKET",
    "HOSTNAME_LABELS",
    "METRIC_NAMINGS",
    "ConfigError",
    "Exporter",
    "ExporterConfig",
    "Nvml",
    "hostname_label",
    "parse_duration",
    "parse_listen",
    "parse_resource_names",
]

if TYPE_CHECKING:  # what type checkers and editors see
    from exporter.app import Exporter
    from exporter.config import (
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
    from exporter.nvml import Nvml


__getattr__, __dir__ = lazy_surface(__name__, _SURFACE)
