"""NVML exporter: DCGM-compatible GPU metrics with pod attribution, run as a DaemonSet."""
