"""NVML exporter: DCGM-compatible GPU metrics with pod attribution, run as a DaemonSet."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("kube-gpu-reaper")
except PackageNotFoundError:  # running from a source checkout
    __version__ = "0.0.0+source"
