"""PID → pod UID, read from ``/proc/<pid>/cgroup``.

The kubelet puts every container in a cgroup below its pod's, named after the pod UID. The path differs
by cgroup version and driver; all carry ``pod<uid>`` with the UID's dashes kept (cgroupfs driver) or
turned into underscores (systemd driver):

* v1, cgroupfs: ``11:memory:/kubepods/burstable/pod8f1c…-…/0123abcd…``
* v1, systemd:  ``11:memory:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod8f1c…_….slice/…``
* v2, systemd:  ``0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod8f1c…_….slice/…``
* v2, cgroupfs: ``0::/kubepods/pod8f1c…-…/0123abcd…``

(the systemd leaf is the container's scope, e.g. ``cri-containerd-0123….scope``).

Inside a container with its own cgroup namespace the path is relative (``0::/../../kubepods-…``); the
``pod<uid>`` component is still there. Static pods have 32-hex-digit UIDs without dashes.
"""

from __future__ import annotations

import re
from pathlib import Path

_POD_UID = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32})(?![0-9a-f])"
)


def pod_uid_from_cgroup(text: str) -> str | None:
    """The pod UID in the contents of a ``/proc/<pid>/cgroup`` file, or ``None`` outside Kubernetes."""
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        matches = _POD_UID.findall(path)
        if matches:
            return str(matches[-1]).replace("_", "-")
    return None


class PodUidResolver:
    """Resolves PIDs to pod UIDs under ``proc_root``, remembering answers for PIDs still alive.

    A PID is only reused after its process exits; the caller passes the PIDs NVML reports each cycle
    and the cache keeps exactly those, so a reused PID is read afresh once the old one has gone.
    """

    def __init__(self, proc_root: Path = Path("/proc")) -> None:
        self._proc_root = proc_root
        self._cache: dict[int, str | None] = {}

    def resolve(self, pids: set[int]) -> dict[int, str]:
        """UIDs for those of ``pids`` that run in a pod."""
        cache: dict[int, str | None] = {}
        for pid in pids:
            if pid in self._cache:
                cache[pid] = self._cache[pid]
                continue
            try:
                text = (self._proc_root / str(pid) / "cgroup").read_text()
            except OSError:
                continue  # exited, or this /proc is not the host's: ask again next cycle
            cache[pid] = pod_uid_from_cgroup(text)
        self._cache = cache
        return {pid: uid for pid, uid in cache.items() if uid is not None}
