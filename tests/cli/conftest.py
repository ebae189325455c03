"""Fixtures for the command-line tests: an emulated Kubernetes API server per test for gpu-reaper."""

from harness.kube_fixtures import _emulator_loop, cluster

__all__ = ["_emulator_loop", "cluster"]
