"""What an action's result is called, in the same words in the terminal plan, the HTML report and Slack.

The verb of each action comes from the actuator table (:func:`reaper.actuators.verbs`): a Deployment
is "scaled to zero", a Notebook or an InferenceService "stopped", a RayCluster "suspended", a node
"cordoned". This module adds only what the outcome makes of it ("would …", "failed to …").
"""

from __future__ import annotations

from reaper.actuators import verbs
from reaper.outcomes import Outcome
from reaper.planner import PlannedAction
from reaper.policy import Action

CHANGED = "left alone (changed since planning)"


def outcome_verb(action: PlannedAction, outcome: Outcome) -> str:
    """``would scale to zero``, ``stopped``, ``failed to suspend``, ``heads-up``… (lower case)."""
    verb, past = verbs(action.action, action.written.kind)
    if outcome is Outcome.NOT_SENT:  # a notice whose message did not go out
        return f"{verb} (not sent)"
    if action.action is Action.NOTIFY:
        return verb
    return {
        Outcome.APPLIED: past,
        Outcome.DRY_RUN: f"would {verb}",
        Outcome.FAILED: f"failed to {verb}",
        Outcome.SKIPPED: CHANGED,
    }[outcome]
