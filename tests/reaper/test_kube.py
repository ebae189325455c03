"""The Kubernetes adapter against the emulator: errors keyed on HTTP status, paged lists, no models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from harness.gpu_workloads import gpu_spec
from harness.kube_emulator import EmulatedCluster, Fault, write_kubeconfig
from reaper import adapter_errors as errors
from reaper.kube import KubeClient, KubeSettings
from simulation.in_memory_cluster import manifest


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
    cluster.seed([manifest("Deployment", "api", "serving", spec=gpu_spec(1))])
    cluster.fail(Fault("PATCH", "Deployment", name="api", status=status))
    with pytest.raises(error) as caught:
        cluster.client().patch("Deployment", "serving", "api", {"spec": {"replicas": 0}})
    assert caught.value.status == status
    assert "PATCH /apis/apps/v1/namespaces/serving/deployments/api" in str(caught.value)


def test_a_missing_crd_lists_as_empty(cluster: EmulatedCluster) -> None:
    client = cluster.client()
    assert client.list_optional("ScaledObject") == []
    with pytest.raises(errors.NotFoundError):
        client.list_objects("ScaledObject")


def test_writes_name_the_reaper_as_field_manager(cluster: EmulatedCluster) -> None:
    cluster.seed([manifest("Deployment", "api", "serving", spec=gpu_spec(1))])
    client = cluster.client()
    client.patch("Deployment", "serving", "api", {"spec": {"replicas": 0}})
    client.create("ConfigMap", "serving", manifest("ConfigMap", "state", "serving"))
    writes = cluster.call(
        lambda: [r.url.query.get("fieldManager") for r in cluster.server if r.method.value != "GET"]
    )
    assert writes == ["gpu-reaper", "gpu-reaper"]


def test_an_answer_echoing_the_request_never_shows_the_token(httpserver: HTTPServer, tmp_path: Path) -> None:
    """A proxy in front of the API server that refuses the request and echoes its headers."""

    def echo(request: Request) -> Response:
        status = {
            "kind": "Status",
            "status": "Failure",
            "reason": "Forbidden",
            "message": f"denied: Authorization: {request.headers['Authorization']}",
        }
        return Response(json.dumps(status), status=403, content_type="application/json")

    httpserver.expect_request("/apis/apps/v1/deployments").respond_with_handler(echo)
    client = KubeClient.from_settings(
        KubeSettings(kubeconfig=str(write_kubeconfig(tmp_path / "kubeconfig", httpserver.url_for("/"))))
    )
    with pytest.raises(errors.ForbiddenError) as caught:
        client.list_objects("Deployment")
    assert "emulator-token" not in str(caught.value) and "Authorization: [redacted]" in str(caught.value)
