"""Fixtures for the reaper's tests: an emulated Kubernetes API server per test (see harness.kube_emulator)."""

from harness.kube_fixtures import _emulator_loop, cluster

__all__ = ["_emulator_loop", "cluster"]
