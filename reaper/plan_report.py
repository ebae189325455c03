"""The run's plan as a section of the HTML report: mode, each action and skip with its reason, where
its Slack message goes, and what it frees, with the policy's currency. Pure formatting (no I/O):
the analyzer's report places the section; ``reaper.analysis`` hands it over.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from jinja2 import Environment, StrictUndefined, select_autoescape
from markupsafe import Markup

from common.model import UtilizationEvidence, WorkloadRef
from common.timeutil import format_duration, to_the_second
from reaper.actuators import verbs
from reaper.history import Replay
from reaper.messages import notice_commands
from reaper.outcomes import ActionResult, Outcome
from reaper.planner import Plan, PlannedAction, Skip, SkipReason, describe_finding, summarize
from reaper.policy import Action, Policy, RunMode
from reaper.runner import RunReport, RunSettings
from reaper.wording import outcome_verb

_TEMPLATE = """\
<style>
  .plan .sub { color: var(--muted); font-size: 12.5px; }
  .plan .flag { color: #8a5a00; font-size: 12.5px; }
  .plan h3 { font-size: 15px; margin: 18px 0 8px; }
  .plan code { font-size: 12.5px; }
  .plan .cards { margin-top: 10px; }
  .plan td.why { min-width: 17em; }
  .plan .channel, .plan .per-day { white-space: nowrap; }
</style>
<section class="plan" id="plan">
  <h2>{{ heading }} <span class="badge" style="--c: {{ mode_colour }}">{{ mode }}</span></h2>
  <p class="sub">{{ context }}</p>
  {% if stopped %}
  <p class="empty">Nothing was planned: {{ stopped }}</p>
  {% else %}
  <div class="cards">
    <div class="card"><div class="n">{{ freed }}</div><div class="l">{{ freed_label }}</div></div>
    {% if cordoned %}
    <div class="card"><div class="n">{{ cordoned }}</div><div class="l">{{ cordoned_label }}</div></div>
    {% endif %}
    <div class="card"><div class="n">{{ actions|length }}</div><div class="l">actions and notices</div></div>
    <div class="card"><div class="n">{{ skips|length }}</div><div class="l">findings held back</div></div>
  </div>
  <h3>Actions</h3>
  {% if actions %}
  <table>
    <thead><tr><th>what</th><th>object</th><th>{{ writes }}</th><th>why</th><th>Slack</th>
      <th class="num">per day</th></tr></thead>
    <tbody>
    {% for a in actions %}
      <tr>
        <td><span class="badge" style="--c: {{ a.colour }}">{{ a.verb }}</span></td>
        <td>{{ a.object }}
          {% if a.held_by %}<div class="sub">GPUs held by {{ a.held_by }}</div>{% endif %}</td>
        <td>{% if a.write %}<code class="write">{{ a.write }}</code>{% else %}–{% endif %}</td>
        <td class="why">{{ a.reason }}{% if a.rule %}<div class="sub">{{ a.rule }}</div>{% endif %}
          {%- for flag in a.flags %}<div class="flag">⚠ {{ flag }}</div>{% endfor %}
          {% if a.demand %}<div class="sub demand">for pending GPU work ({{ a.demand }})</div>{% endif %}
          {% if a.wake %}<div class="sub wake">wake on request: {{ a.wake }}</div>{% endif %}
          {% if a.detail %}<div class="sub">{{ a.detail }}</div>{% endif %}</td>
        <td class="channel">{{ a.channel }}</td>
        <td class="num per-day">{{ a.hours }} GPU-h{% if a.cost %}<br>{{ a.cost }} {{ currency }}{% endif %}
          {%- if a.note %}<div class="sub">{{ a.note }}</div>{% endif %}</td>
      </tr>
    {% endfor %}
    </tbody>
  </table>
  {% else %}
  <p class="empty">No action.</p>
  {% endif %}
  {% if notices %}
  <h3>Notices: when each would turn into an action</h3>
  <table>
    <thead><tr><th>notice</th><th>object</th><th>given</th><th>may act after</th><th>snooze</th>
      <th>Slack</th></tr></thead>
    <tbody>
    {% for n in notices %}
      <tr>
        <td><span class="badge" style="--c: #8a5a00">{{ n.state }}</span></td>
        <td>{{ n.object }}<div class="sub">rule {{ n.rule }}</div></td>
        <td>{{ n.given }}</td>
        <td>{{ n.due }}<div class="sub">if the finding still holds then</div></td>
        <td><code>{{ n.snooze }}</code></td>
        <td class="channel">{{ n.channel }}</td>
      </tr>
    {% endfor %}
    </tbody>
  </table>
  {% endif %}
  <h3>Held back, with reasons</h3>
  {% if skips %}
  <table>
    <thead><tr><th>reason</th><th>object</th><th>rule wanted</th><th>detail</th><th>Slack</th></tr></thead>
    <tbody>
    {% for s in skips %}
      <tr>
        <td><code>{{ s.reason }}</code></td>
        <td>{{ s.object }}
          {% if s.held_by %}<div class="sub">GPUs held by {{ s.held_by }}</div>{% endif %}</td>
        <td>{{ s.wanted }}</td>
        <td>{{ s.detail }}</td>
        <td class="channel">{{ s.channel }}</td>
      </tr>
    {% endfor %}
    </tbody>
  </table>
  {% else %}
  <p class="empty">Nothing held back.</p>
  {% endif %}
  {% endif %}
</section>
"""

_ENV = Environment(
    autoescape=select_autoescape(default=True, default_for_string=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)

_NOT_SENT = "not sent"
# What the planner writes after the finding: "(rule NAME, for: 6h)", maybe "; a note".
_RULE = re.compile(r"\((rule [^()]*)\)(;.*)?", re.S)
_COLOURS = {Outcome.APPLIED: "#2e7d32", Outcome.DRY_RUN: "#1565c0", Outcome.FAILED: "#c62828"}


@dataclass(frozen=True)
class PlanView:
    """What the section shows: one run's plan and what came of it."""

    mode: RunMode
    policy: Policy
    plan: Plan | None
    results: Sequence[ActionResult] = ()
    replay: Replay | None = None
    run_interval: timedelta | None = None
    stopped: str | None = None  # why the run planned nothing (metrics, cluster, lease, stale data)
    slack: str = "off"  # "bot" (one message per channel), "webhook" (one message), "off"
    cluster: str | None = None  # the cluster the run acts on, when one is configured
    other_clusters: int | None = None  # findings set aside as other clusters'


def _name(ref: WorkloadRef) -> str:
    return f"Node {ref.name}" if ref.kind == "Node" else f"{ref.kind} {ref.namespace}/{ref.name}"


def _wasted_per_day(a: PlannedAction, price: float | None) -> tuple[float, float | None]:
    """What a notice's finding wastes per day at the rate it was measured: a notice frees nothing,
    but its reader should see what the waste costs."""
    f = a.finding
    judged = f.evidence.judged_hours if isinstance(f.evidence, UtilizationEvidence) else None
    hours = judged or f.window.hours
    per_day = f.wasted_gpu_hours / hours * 24.0 if hours > 0 else 0.0
    return per_day, (per_day * price if price is not None else None)


def _action_row(result: ActionResult, slack: str, price: float | None) -> dict[str, object]:
    a: PlannedAction = result.action
    seen = describe_finding(a.finding)
    # The finding on the first line, the rule that decided (and any note) under it.
    rest = _RULE.fullmatch(a.reason.removeprefix(seen).strip()) if a.reason.startswith(seen) else None
    rule = "".join(g or "" for g in rest.groups()) if rest else ""
    if a.action.destructive:
        hours, cost = a.gpu_hours_per_day, a.cost_per_day
        # A cordoned node still costs until it is drained and removed.
        note = "once the node is removed" if a.action is Action.CORDON else ""
    else:
        hours, cost = _wasted_per_day(a, price)
        note = "wasted; a notice frees nothing"
    return {
        "verb": outcome_verb(a, result.outcome),
        "write": result.write,
        "colour": _COLOURS.get(result.outcome, "#6d4c41"),
        "object": _name(a.written),
        "held_by": _name(a.target) if a.root is not None else "",
        "reason": seen if rule else a.reason,
        "rule": rule,
        "flags": a.flags,
        # ``when: demand``: the pending pods or Kueue Workloads the action makes room for.
        "demand": f"pending_gpus={a.pending_gpus}: {a.demand}" if a.pending_gpus is not None else "",
        # ``wake: keda-http``: what is handed to the KEDA HTTP add-on, and what the first request does.
        "wake": result.wake.sentence() if result.wake is not None else (f"wake: {a.wake}" if a.wake else ""),
        # Why it failed or was left alone; what a success wrote is in "write".
        "detail": result.detail if result.outcome in (Outcome.FAILED, Outcome.SKIPPED) else "",
        "channel": _channel(a.channel, slack),
        "hours": f"{hours:,.0f}",
        "cost": "" if cost is None else f"{cost:,.2f}",
        "note": note,
    }


def _skip_row(s: Skip, slack: str) -> dict[str, object]:
    return {
        "reason": s.reason.value,
        "object": _name(s.root or s.target),
        "held_by": _name(s.target) if s.root is not None else "",
        "wanted": verbs(s.action, (s.root or s.target).kind)[0] if s.action else "–",
        "detail": s.detail,
        "channel": _channel(s.channel, slack),
    }


def _notice_rows(plan: Plan | None, dry_run: bool, slack: str) -> list[dict[str, object]]:
    """The notices this run gives (or, dry, would give) and those standing: when each may act."""
    rows: list[dict[str, object]] = []
    for s in plan.skips if plan is not None else ():
        notice = plan.next_state.notices.get(s.target.key()) if plan is not None else None
        if notice is None or s.reason not in (SkipReason.NOTICED, SkipReason.NOTICE_PENDING):
            continue
        new = s.reason is SkipReason.NOTICED
        rows.append(
            {
                "state": ("would give now" if dry_run else "given now") if new else "standing",
                "object": _name(s.root or s.target),
                "rule": notice.rule,
                "given": "–" if new and dry_run else to_the_second(notice.noticed_at),
                "due": to_the_second(notice.act_after),
                "snooze": notice_commands(notice)[0],
                "channel": _channel(s.channel, slack) if new else "–",
            }
        )
    return rows


def _context(view: PlanView) -> str:
    parts = []
    if view.cluster is not None:
        others = view.other_clusters or 0
        aside = (
            f" ({others} finding{'s' if others != 1 else ''} of other clusters set aside)" if others else ""
        )
        parts.append(f"cluster {view.cluster}{aside}")
    if view.plan is not None:
        parts.append(f"as of {to_the_second(view.plan.now)}")
        w = view.plan.window
        parts.append(f"findings over {to_the_second(w.start)} → {to_the_second(w.end)}")
    parts.append(
        f"confirmations: {view.policy.safety.consecutive_runs} consecutive runs"
        + (f", rules' for: up to {format_duration(f)}" if (f := _longest_for(view.policy)) else "")
    )
    if view.mode.writes:
        parts.append("streaks read from the state ConfigMap")
    elif view.replay is not None and view.run_interval is not None:
        missing = f", {len(view.replay.unavailable)} without metrics" if view.replay.unavailable else ""
        runs = len(view.replay.times)
        parts.append(
            f"streaks from {runs} replayed run{'s' if runs != 1 else ''} every "
            f"{format_duration(view.run_interval)}{missing} (what apply would have counted)"
        )
    else:
        parts.append("no earlier runs replayed (a findings file has one window)")
    parts.append(
        {
            "bot": "Slack: one message per owner channel",
            "webhook": "Slack: one message to the incoming webhook's channel",
        }.get(view.slack, "Slack not configured: the channels are where messages would go")
    )
    return " · ".join(parts)


def _channel(channel: str | None, slack: str) -> str:
    if channel is None:
        return _NOT_SENT
    return f"{channel} (via the webhook)" if slack == "webhook" else channel


def _longest_for(policy: Policy) -> timedelta:
    return max((r.match.for_ for r in policy.rules), default=timedelta(0))


def render_plan_section(view: PlanView) -> Markup:
    """The plan as an HTML section (escaped: names come from the cluster)."""
    currency = view.policy.currency
    dry_run = not view.mode.writes
    plan = view.plan
    done = [
        r.action
        for r in view.results
        if r.action.action.destructive and r.outcome in (Outcome.APPLIED, Outcome.DRY_RUN)
    ]
    hours, cost = summarize(a for a in done if a.action is not Action.CORDON)
    c_hours, c_cost = summarize(a for a in done if a.action is Action.CORDON)
    per_day = f" (≈ {cost:,.0f} {currency}/day)" if cost is not None else ""
    c_per_day = f" (≈ {c_cost:,.0f} {currency}/day)" if c_cost is not None else ""
    html = _ENV.from_string(_TEMPLATE).render(
        heading="What gpu-reaper would do" if dry_run else "What gpu-reaper did",
        mode=view.mode.value,
        mode_colour="#1565c0" if dry_run else "#2e7d32",
        context=_context(view),
        stopped=view.stopped,
        freed=f"{hours:,.0f}",
        freed_label=("GPU-hours/day reclaimable" if dry_run else "GPU-hours/day reclaimed")
        + f"{per_day} by stopping workloads",
        cordoned=f"{c_hours:,.0f}" if c_hours else None,
        cordoned_label=f"GPU-hours/day{c_per_day} on cordoned nodes: saved only once the node is "
        "drained and removed",
        actions=[_action_row(r, view.slack, view.policy.price) for r in view.results],
        writes="--apply writes" if dry_run else "written",
        skips=[_skip_row(s, view.slack) for s in (plan.skips if plan is not None else ())],
        notices=_notice_rows(plan, dry_run, view.slack),
        currency=currency,
    )
    return Markup(html)  # noqa: S704 - rendered by an autoescaping environment


def run_section(report: RunReport, settings: RunSettings, slack: str = "off") -> Markup:
    """The section for one finished run."""
    stopped = None
    if report.plan is None or report.plan.blocked:
        stopped = report.error or "the run stopped before planning"
    return render_plan_section(
        PlanView(
            mode=report.mode,
            policy=settings.policy,
            plan=report.plan,
            results=report.results,
            replay=report.replay,
            run_interval=settings.run_interval,
            stopped=stopped,
            slack=slack,
            cluster=report.cluster,
            other_clusters=report.other_clusters,
        )
    )
