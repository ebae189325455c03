"""The reaper's adapter errors: Kubernetes keyed on HTTP status, the Lease, Slack and the Pushgateway.

All derive from the project's one root (``common.errors``); bad input and unavailable data use its
``BadInputError`` and ``DataUnavailableError``. A failed action is recorded in the run's outcome
(exit 1) rather than raised.
"""

from __future__ import annotations

from common.errors import GpuToolError

# --- Kubernetes API ---------------------------------------------------------------------------------


class KubeError(GpuToolError):
    """A Kubernetes API call failed. ``status`` is the HTTP status, 0 when no answer came back."""

    status: int = 0

    def __init__(self, message: str, status: int | None = None, reason: str = "") -> None:
        if status is not None:
            self.status = status
        self.reason = reason
        super().__init__(message)


class KubeUnavailableError(KubeError):
    """No answer: connection refused, TLS failure or timeout. A write may or may not have landed."""


class BadRequestError(KubeError):
    status = 400


class UnauthorizedError(KubeError):
    status = 401


class ForbiddenError(KubeError):
    """RBAC denied the call: the ServiceAccount lacks a verb (see deploy/reaper-cronjob.md)."""

    status = 403


class NotFoundError(KubeError):
    status = 404


class ConflictError(KubeError):
    """The object changed since it was read (stale resourceVersion) or already exists."""

    status = 409


class ExpiredError(KubeError):
    """410 Gone: a list's continue token (or a watch's resourceVersion) is older than etcd keeps."""

    status = 410


class UnprocessableError(KubeError):
    status = 422


class TooManyRequestsError(KubeError):
    status = 429


class ServerError(KubeError):
    """5xx: the API server (or an admission webhook behind it) failed."""

    status = 500


_BY_STATUS: dict[int, type[KubeError]] = {
    cls.status: cls
    for cls in (
        BadRequestError,
        UnauthorizedError,
        ForbiddenError,
        NotFoundError,
        ConflictError,
        ExpiredError,
        UnprocessableError,
        TooManyRequestsError,
    )
}


def kube_error_for(status: int, message: str, reason: str = "") -> KubeError:
    """The most specific error class for an HTTP status."""
    if status >= 500:
        return ServerError(message, status=status, reason=reason)
    cls = _BY_STATUS.get(status, KubeError)
    return cls(message, status=status, reason=reason)


class LeaseHeldError(GpuToolError):
    """Another reaper run holds the coordination Lease."""

    def __init__(self, holder: str, expires: str) -> None:
        self.holder = holder
        self.expires = expires
        super().__init__(f"another gpu-reaper run ({holder}) holds the lease until {expires}")


# --- Slack and Pushgateway ---------------------------------------------------------------------------


class SlackError(GpuToolError):
    """Slack refused or could not be reached; logged and counted, never fatal to a run."""


class PushgatewayError(GpuToolError):
    """The Pushgateway could not be reached or refused the push; logged, never fatal."""
