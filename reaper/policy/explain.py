"""A policy in plain language (``gpu-reaper policy check``) and its JSON Schema (``policy schema``)."""

from __future__ import annotations

from typing import Any

from common.durations import format_setting
from reaper import names
from reaper.policy.schema import Policy


def explain(policy: Policy) -> str:
    """A plain-language account of what the policy makes the reaper do."""
    s = policy.safety
    lines = [
        f"mode: {policy.mode.value}"
        + ("" if policy.mode.writes else " (nothing is changed unless run with --apply)"),
        f"analysis window: {format_setting(policy.window)}",
        (
            f"cluster: {policy.cluster} (acts only on its findings; --cluster overrides)"
            if policy.cluster is not None
            else "cluster: none configured (findings that name a cluster are refused; see --cluster)"
        ),
        "rules (the first matching rule decides):",
    ]
    for i, rule in enumerate(policy.rules, start=1):
        m = rule.match
        kinds = ", ".join(rule.kinds) if rule.kinds else "any kind"
        where = "" if rule.kinds == ("Node",) else f" in namespaces {', '.join(m.namespaces)}"
        conditions = []
        if m.label_selector:
            conditions.append(f"labels {m.label_selector.describe()}")
        if m.min_confidence:
            conditions.append(f"confidence ≥ {m.min_confidence:g}")
        if m.min_wasted_gpu_hours:
            conditions.append(f"≥ {m.min_wasted_gpu_hours:g} wasted GPU-hours")
        if m.min_gpus > 1:
            conditions.append(f"≥ {m.min_gpus} GPUs")
        if m.for_:
            conditions.append(f"held for ≥ {format_setting(m.for_)}")
        cond = f" with {', '.join(conditions)}" if conditions else ""
        confirm = f" after {s.consecutive_runs} consecutive runs" if rule.action.destructive else ""
        lines.append(
            f"  {i}. {rule.name}: {' or '.join(m.findings)} on {kinds}{where}{cond} "
            f"→ {rule.action.value}{confirm}"
        )
        if rule.notice is not None:
            lines.append(
                f"     notice: {format_setting(rule.notice)} first: the first run that would "
                f"{rule.action.value} tells the owners instead (Slack, an Event), and the first run "
                f"after {format_setting(rule.notice)} acts if the finding still holds; busy again, "
                f"redeployed or snoozed ({names.EXCLUDE_UNTIL}) drops the notice"
            )
        if rule.when is not None:
            extra = policy.demand.resources
            lines.append(
                "     when: demand: acts only while pods wait unschedulable (or Kueue Workloads wait "
                "for admission) for GPUs it would free (nvidia.com/gpu, nvidia.com/mig-*, amd.com/gpu"
                + (f", {', '.join(extra)}" if extra else "")
                + "), on one node whose nvidia.com/gpu.product they accept; the most wasteful first, "
                "until the demand is covered and no more; without demand it is reported, not acted on"
            )
        if rule.wake is not None:
            lines.append(
                f"     wake: {rule.wake}: scaled to 0 and handed to the KEDA HTTP add-on (an "
                "InterceptorRoute and a ScaledObject, min 0, max the replicas it had; a "
                "HTTPScaledObject where only the older API is served): the first request through "
                "its interceptor wakes it; a KEDA ScaledObject already there is paused instead, an "
                "HPA refuses it; the run refuses (exit 2) where the add-on is not installed"
            )
    lines.append("never touched: namespaces " + ", ".join(policy.protected_namespaces) + " (always)")
    ex = policy.exclude
    for label, values in (("namespaces", ex.namespaces), ("workloads", ex.workloads), ("nodes", ex.nodes)):
        if values:
            lines.append(f"excluded {label}: {', '.join(values)}")
    if ex.label_selector:
        lines.append(f"excluded labels: {ex.label_selector.describe()}")
    lines.append(
        f"opt-out: annotate a workload or namespace {names.EXCLUDE}=true, "
        f"or {names.EXCLUDE_UNTIL}=<RFC 3339 time>"
    )
    lines.append(
        f"grace: {format_setting(policy.grace.after_creation)} after creation, "
        f"{format_setting(policy.grace.after_restore)} after a restore"
    )
    lines.append(
        f"limits per run: {s.max_actions_per_run} destructive actions, "
        f"{s.max_cordon_share:.0%} of GPU nodes cordoned; "
        f"findings older than {format_setting(s.max_data_age)} are ignored"
    )
    gpu = policy.gpu_node_selector
    lines.append(
        f"GPU nodes: those labelled {gpu.describe()} (where none is, every node reporting GPUs)"
        if gpu is not None
        else "GPU nodes: every node reporting GPUs"
    )
    lines.append("HPA/KEDA-managed workloads: never scaled (reported to their owners instead)")
    lines.append(
        "Argo CD / Flux-managed workloads: "
        + ("flagged in the plan and the message" if s.gitops == "flag" else "skipped")
    )
    if policy.price is not None:
        lines.append(f"price: {policy.price:g} {policy.currency} per GPU-hour")
    if policy.prices:
        listed = "; ".join(f"{model} {price:g}" for model, price in sorted(policy.prices.items()))
        default = f"{policy.price:g}" if policy.price is not None else "no price"
        lines.append(
            f"prices per GPU model ({policy.currency} per GPU-hour, chargeback): {listed}; "
            f"every other model {default}"
        )
    sl = policy.slack
    if sl.channel or sl.routes:
        routes = "; ".join(f"{', '.join(r.namespaces)} → {r.channel}" for r in sl.routes)
        lines.append(
            f"slack: default {sl.channel or '(none)'}"
            + (f"; routes {routes}" if routes else "")
            + f"; a namespace annotation {names.SLACK_CHANNEL} wins"
            + (
                f" where it names one of {', '.join(sl.allowed_channels)}"
                if sl.allowed_channels is not None
                else " where it names a channel (never a user or a direct message)"
            )
        )
    return "\n".join(lines)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of the policy file (docs/policy.schema.json is generated from it)."""
    schema = Policy.model_json_schema(by_alias=True, mode="validation")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "gpu-reaper policy",
        **{k: v for k, v in schema.items() if k != "title"},
    }
