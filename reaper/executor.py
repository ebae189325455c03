"""The executor: runs a plan, and restore, through the modules that change the cluster.

Every mutation goes through the write gate (``reaper.write_gate``), the single dry-run branch.
The executor wires it to what writes: the stops and cordons (``reaper.stop``), the Events
(``reaper.events``), the reaper's ConfigMap (``reaper.state_store``), the Lease (``reaper.lease``)
and restore (``reaper.restore``).
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from datetime import timedelta

from reaper.adapter_errors import KubeError, KubeUnavailableError
from reaper.clock import Clock, utc_now
from reaper.conflict_retry import ConflictRetry
from reaper.discovery import ScaleDiscovery
from reaper.events import Events
from reaper.keda_http import Waker
from reaper.kube_api import KubeApi
from reaper.lease import RunLease
from reaper.messages import notice_event
from reaper.notice_marks import NoticeMarks
from reaper.outcomes import ActionResult, Changed, Outcome, Refused, RestoreResult
from reaper.planner import Plan, PlannedAction, SkipReason
from reaper.policy import Action, RunMode
from reaper.restore import Found, Restorer
from reaper.state import Notice, ReaperState
from reaper.state_store import StateStore
from reaper.stop import Stopper
from reaper.write_gate import WriteGate

__all__ = ["Executor"]

log = logging.getLogger(__name__)


class Executor:
    def __init__(
        self,
        kube: KubeApi,
        *,
        mode: RunMode,
        namespace: str,
        clock: Clock = utc_now,
        wall_clock: Clock = utc_now,
        sleep: Callable[[float], None] = time.sleep,
        identity: str | None = None,
        lease_duration: timedelta = timedelta(minutes=10),
        conflict_attempts: int = 4,
        max_consecutive_failures: int = 3,
        cluster: str | None = None,
        notice_annotations: bool = False,
    ) -> None:
        self.mode = mode
        # The pod name (HOSTNAME) says which Job holds the Lease; the suffix keeps manual runs apart.
        self.identity = identity or f"{os.environ.get('HOSTNAME', 'gpu-reaper')}-{uuid.uuid4().hex[:8]}"
        self.max_consecutive_failures = max_consecutive_failures
        gate = WriteGate(mode)
        self._gate = gate
        # One discovery for the run: each group-version is asked once, by stops' record and restore alike.
        discovery = ScaleDiscovery(kube)
        retry = ConflictRetry(conflict_attempts, sleep)
        events = Events(kube, gate, identity=self.identity, wall_clock=wall_clock, cluster=cluster)
        self._events = events
        # Deployments, StatefulSets, ReplicaSets get a notice's annotations only where allowed to.
        self._notice_marks = NoticeMarks(kube, gate, scale_only_kinds=notice_annotations)
        self._store = StateStore(
            kube,
            gate,
            namespace=namespace,
            clock=clock,
            discovery=discovery,
            conflict_attempts=conflict_attempts,
        )
        self._lease = RunLease(
            kube,
            gate,
            namespace=namespace,
            identity=self.identity,
            duration=lease_duration,
            wall_clock=wall_clock,
            sleep=sleep,
        )
        self._stopper = Stopper(kube, gate, events=events, store=self._store, retry=retry, clock=clock)
        self._waker = Waker(
            kube, gate, events=events, store=self._store, retry=retry, stopper=self._stopper, clock=clock
        )
        self._restorer = Restorer(
            kube,
            gate,
            events=events,
            store=self._store,
            retry=retry,
            discovery=discovery,
            clock=clock,
            waker=self._waker,
        )

    # --- a run -------------------------------------------------------------------------------------

    def execute(self, plan: Plan) -> list[ActionResult]:
        self._waker.preflight(plan)  # a wake without the add-on: bad input, before any write
        results: list[ActionResult] = []
        failures_in_a_row = 0
        for action in plan.actions:
            if action.action is Action.NOTIFY:
                results.append(ActionResult(action, self._gate.done))
                continue
            if failures_in_a_row >= self.max_consecutive_failures:
                # The API server is failing: stop changing things rather than hammering it.
                results.append(
                    ActionResult(
                        action, Outcome.FAILED, f"not attempted after {failures_in_a_row} failures in a row"
                    )
                )
                continue
            result, api_failed = self._execute_one(action)
            failures_in_a_row = failures_in_a_row + 1 if api_failed else 0
            results.append(result)
        return results

    def _execute_one(self, action: PlannedAction) -> tuple[ActionResult, bool]:
        """The action's result, and whether it failed because the API server did."""
        try:
            if action.action is Action.SCALE_TO_ZERO and action.wake is not None:
                return self._waker.stop(action), False
            if action.action is Action.SCALE_TO_ZERO:
                return self._stopper.stop(action), False
            return self._stopper.cordon(action), False
        except Changed as e:
            log.info("skipped %s: %s", action.key, e)
            return ActionResult(action, Outcome.SKIPPED, str(e)), False
        except Refused as e:
            log.error("failed %s: %s", action.key, e)
            return ActionResult(action, Outcome.FAILED, str(e)), False
        except KubeUnavailableError as e:
            # No answer: the patch may or may not have landed. Either way the object is restorable,
            # because the annotations travel in the same patch as the change.
            log.error("failed %s: %s; the change may have been applied", action.key, e)
            return ActionResult(action, Outcome.FAILED, f"{e} (the change may have been applied)"), True
        except KubeError as e:
            log.error("failed %s: %s", action.key, e)
            return ActionResult(action, Outcome.FAILED, str(e)), True

    # --- around a run: the Lease and the ConfigMap -------------------------------------------------

    def lease(self, wait: float = 0.0) -> AbstractContextManager[None]:
        """Hold the coordination Lease for the block; raises LeaseHeldError if another run keeps it."""
        return self._lease.hold(wait)

    def give_notices(self, plan: Plan, standing: Mapping[str, Notice]) -> ReaperState:
        """Record an Event on each object noticed this run (``kubectl describe`` shows it to its
        owners, whatever Slack does) and its annotations (reaper.notice_marks); the state to save. A
        notice whose Event could not be recorded is not kept, so no period runs that nobody was told
        of: the next run gives it again. The notices ``standing`` before this run that it used up or
        dropped lose their annotations."""
        unrecorded = []
        for skip in plan.skips:
            notice = plan.next_state.notices.get(skip.target.key())
            if skip.reason is not SkipReason.NOTICED or notice is None:
                continue
            meta = {"name": notice.name, "namespace": notice.namespace or None, "uid": notice.uid}
            obj = {"metadata": meta}
            if not self._events.record(obj, notice.kind, "GpuReaperNotice", notice_event(notice, skip)):
                unrecorded.append(skip.target.key())
            else:
                self._notice_marks.put(notice)
        state = plan.next_state.without_notices(unrecorded)
        for key, old in standing.items():
            kept = state.notices.get(key)
            if kept is None or (kept.kind, kept.namespace, kept.name) != (old.kind, old.namespace, old.name):
                self._notice_marks.take_off(old)
        return state

    def save_state(self, state: ReaperState) -> None:
        self._store.save_state(state)

    def prune_record(self, keep_restores: timedelta) -> None:
        """Forget what is no longer stopped, and the restores whose grace (``keep_restores``) is over."""
        self._store.prune(keep_restores)

    # --- restore -----------------------------------------------------------------------------------

    def objects_named(self, namespace: str, name: str) -> list[Found]:
        return self._restorer.objects_named(namespace, name)

    def restore_workload(self, namespace: str, name: str) -> RestoreResult:
        return self._restorer.workload(namespace, name)

    def restore_all(self, namespace: str | None = None) -> list[RestoreResult]:
        return self._restorer.all(namespace)

    def uncordon(self, name: str) -> RestoreResult:
        return self._restorer.uncordon(name)
