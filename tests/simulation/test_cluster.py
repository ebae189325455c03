"""The simulated cluster: controller-owned workloads built the way their controllers build them."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from harness.findings import NOW
from reaper.cluster import read_snapshot
from simulation import controllers
from simulation.fleet import load_scenario, simulate
from simulation.fleet.scenario import ScenarioError
from simulation.in_memory_cluster import InMemoryCluster, fleet_objects


def test_the_demo_scenario_is_the_standard_fleet_plus_controller_owned_workloads() -> None:
    standard, demo = load_scenario("standard"), load_scenario("demo")
    assert demo.workloads[: len(standard.workloads)] == standard.workloads
    assert demo.nodes[: len(standard.nodes)] == standard.nodes
    added = {
        (w.kind.value, w.controller and w.controller.value, w.name)
        for w in demo.workloads[len(standard.workloads) :]
    }
    assert added == {
        ("StatefulSet", "Notebook", "alice"),
        ("Deployment", "InferenceService", "summarizer-predictor"),
        ("RayCluster", None, "ray-tune"),
        ("Deployment", None, "reranker"),
    }


def test_fleet_objects_put_each_child_under_its_controller() -> None:
    fleet = simulate(load_scenario("demo"))
    snapshot = read_snapshot(InMemoryCluster(fleet_objects(fleet)), "gpu-reaper")
    for kind, ns, name, root in (
        ("StatefulSet", "research", "alice", "research/Notebook/alice"),
        ("Deployment", "serving", "summarizer-predictor", "serving/InferenceService/summarizer"),
    ):
        child = snapshot.workloads[f"{ns}/{kind}/{name}"]
        chain, unlisted = snapshot.controllers(child)
        assert unlisted is None and [w.ref.key() for w in chain] == [root]
    assert "research/RayCluster/ray-tune" in snapshot.workloads
    # The metrics agree: the RayCluster's pods are its own.
    owners = {p.owner_kind for p in fleet.pods if p.workload.name == "ray-tune"}
    assert owners == {"RayCluster"}


def test_owner_references_are_what_a_controller_writes() -> None:
    created = NOW - timedelta(days=1)
    root, sts = controllers.notebook("research", "alice", created)
    (ref,) = sts["metadata"]["ownerReferences"]
    assert ref == {
        "apiVersion": "kubeflow.org/v1",
        "kind": "Notebook",
        "name": "alice",
        "uid": root["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    ksvc, *_ = controllers.knative_service("serving", "fn", created)
    assert (ksvc["apiVersion"], ksvc["kind"]) == ("serving.knative.dev/v1", "Service")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "extends: standard\nworkloads:\n"
            "  - {namespace: a, name: b, controller: Notebook, behaviour: idle}\n",
            "a Notebook controls a StatefulSet",
            id="controller-of-the-wrong-kind",
        ),
        pytest.param("extends: SELF\n", "extends itself", id="extends-itself"),
    ],
)
def test_bad_scenarios_are_refused(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(text.replace("SELF", str(path)), encoding="utf-8")
    with pytest.raises(ScenarioError, match=message):
        load_scenario(path)
