"""The Kubernetes adapter against the emulator: errors keyed on HTTP status, paged lists, no models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from harness.kube_emulator import EmulatedCluster, Fault, write_kubeconfig
from reaper import errors
from reaper.kube import KubeClient, KubeSettings
from simulation.cluster import manifest


@pytest.mark.parametrize(
    ("status", "error"),
    [
        pytest.param(400, errors.BadRequestError, id="400-bad-request"),
        pytest.param(401, errors.UnauthorizedError, id="401-unauthorized"),
        pytest.param(403, errors.ForbiddenError, id="403-rbac-denied"),
        pytest.param(404, errors.NotFoundError, id="404-not-found"),
        pytest.param(409, errors.ConflictError, id="409-stale-resource-version"),
        pytest.param(422, errors.UnprocessableError, id="422-invalid-object"),
        pytest.param(429, errors.TooManyRequestsError, id="429-throttled"),
        pytest.param(500, errors.ServerError, id="500-server-error"),
        pytest.param(503, errors.ServerError, id="503-any-5xx-is-a-server-error"),
    ],
)
def test_http_status_becomes_the_reapers_own_error(
    cluster: EmulatedCluster, status: int, error: type[errors.KubeError]
) -> None:
    cluster.seed([manifest("Deployment", "api", "serving", spec={"replicas": 1})])
    cluster.fail(Fault("PATCH", "Deployment", name="api", status=status))
    with pytest.raises(error) as caught:
        cluster.client().patch("Deployment", "serving", "api", {"spec": {"replicas": 0}})
    assert caught.value.status == status
    assert "PATCH /apis/apps/v1/namespaces/serving/deployments/api" in str(caught.value)


def test_lists_follow_the_continue_token(httpserver: HTTPServer, tmp_path: Path) -> None:
    # kmock answers a list in one page; a real API server pages it (limit + continue).
    nodes = [manifest("Node", f"gpu-{i:02d}", spec={}) for i in range(7)]

    def page(request: Request) -> Response:
        start = int(request.args.get("continue") or 0)
        limit = int(request.args["limit"])
        more = start + limit < len(nodes)
        body = {
            "kind": "NodeList",
            "metadata": {"continue": str(start + limit)} if more else {},
            "items": nodes[start : start + limit],
        }
        return Response(json.dumps(body), content_type="application/json")

    httpserver.expect_request("/api/v1/nodes").respond_with_handler(page)
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", httpserver.url_for("").rstrip("/"))
    client = KubeClient.from_settings(KubeSettings(kubeconfig=str(kubeconfig), page_size=3))
    listed = [n["metadata"]["name"] for n in client.list_objects("Node")]
    assert listed == [f"gpu-{i:02d}" for i in range(7)]
    assert [req.args.get("continue") for req, _ in httpserver.log] == [None, "3", "6"]


def test_a_missing_crd_lists_as_empty(cluster: EmulatedCluster) -> None:
    client = cluster.client()
    assert client.list_optional("ScaledObject") == []
    with pytest.raises(errors.NotFoundError):
        client.list_objects("ScaledObject")


def test_writes_name_the_reaper_as_field_manager(cluster: EmulatedCluster) -> None:
    cluster.seed([manifest("Deployment", "api", "serving", spec={"replicas": 1})])
    client = cluster.client()
    client.patch("Deployment", "serving", "api", {"spec": {"replicas": 0}})
    client.create("ConfigMap", "serving", manifest("ConfigMap", "state", "serving"))
    writes = cluster.call(
        lambda: [r.url.query.get("fieldManager") for r in cluster.server if r.method.value != "GET"]
    )
    assert writes == ["gpu-reaper", "gpu-reaper"]
