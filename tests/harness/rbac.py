"""Kubernetes RBAC for plain manifests: what a request asks for, and what rendered roles grant.

``access_of`` turns an API request (method and URL) into the attributes the API server's RBAC
authorizer checks, the way its request-info resolver does; ``grants`` collects the rules that
rendered Roles and ClusterRoles give one ServiceAccount through their bindings; ``Grant.allows``
matches one against the other with RBAC's rules (wildcards, resourceNames, a Role only in the
namespace of its binding).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

#: A policy that stops every root kind the reaper scales or stops and cordons idle nodes: a run under it
#: makes every kind of write the chart's RBAC (and admission policy) must allow.
STOP_AND_CORDON_POLICY = """\
safety: {consecutiveRuns: 1, maxCordonShare: 0.5, maxActionsPerRun: 20}
rules:
  - name: idle-endpoints
    match: {findings: [idle_endpoint], kinds: [Deployment, StatefulSet, ReplicaSet, Rollout, RayCluster, Job]}
    action: scale_to_zero
  - name: idle-nodes
    match: {findings: [low_utilization], kinds: [Node]}
    action: cordon
"""

READ_VERBS = frozenset({"get", "list", "watch"})
# The verbs of a request on one named object; list, create and deletecollection name none.
NAMED_VERBS = frozenset({"get", "update", "patch", "delete"})
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
_METHOD_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


@dataclass(frozen=True, order=True)
class Access:
    """One resource request as the authorizer sees it."""

    verb: str
    group: str  # "" for the core API
    resource: str  # the plural, "plural/subresource" for a subresource
    namespace: str | None  # None for a cluster-scoped request
    name: str | None  # None for list, watch, create and deletecollection

    def __str__(self) -> str:
        where = f" in namespace {self.namespace}" if self.namespace else " (no namespace)"
        named = f" {self.name!r}" if self.name else ""
        return f"{self.verb} {self.group or 'core'}/{self.resource}{named}{where}"


def access_of(method: str, url: str) -> Access:
    """The authorization attributes of a request; a URL that is no resource request raises ValueError."""
    split = urlsplit(url)
    parts = [p for p in split.path.split("/") if p]
    if len(parts) >= 3 and parts[0] == "api":
        group, rest = "", parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        raise ValueError(f"{method} {split.path}: not a resource request (discovery or a non-resource URL)")
    namespace = None
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]  # a namespaced resource; otherwise the Namespace object itself
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else None
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    if method == "GET":
        watch = parse_qs(split.query).get("watch", ["false"])[-1].lower() in ("1", "true")
        verb = "watch" if watch else "get" if name else "list"
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    elif method in _METHOD_VERBS:
        verb = _METHOD_VERBS[method]
    else:
        raise ValueError(f"{method} {split.path}: no RBAC verb for this method")
    return Access(verb, group, resource, namespace, name)


def is_discovery(url: str) -> bool:
    """GET /apis/GROUP/VERSION and the like: every authenticated user's (system:discovery), not RBAC's."""
    parts = [p for p in urlsplit(url).path.split("/") if p]
    return (parts[:1] == ["apis"] and len(parts) <= 3) or (parts[:1] == ["api"] and len(parts) <= 2)


@dataclass(frozen=True, order=True)
class Grant:
    """One (group, resource, verb, resourceName) of a rule, with where its binding applies it."""

    role: str  # "ClusterRole/NAME" or "Role/NAME"
    namespace: str | None  # None: everywhere (a ClusterRoleBinding); else the RoleBinding's namespace
    group: str
    resource: str
    verb: str
    name: str | None  # None: any object

    def allows(self, access: Access) -> bool:
        return (
            (self.namespace is None or access.namespace == self.namespace)
            and self.group in ("*", access.group)
            and self.resource in ("*", access.resource)
            and self.verb in ("*", access.verb)
            and (self.name is None or access.name == self.name)
        )

    def __str__(self) -> str:
        named = f" {self.name!r}" if self.name else ""
        where = f" in namespace {self.namespace}" if self.namespace else " cluster-wide"
        return f"{self.role}: {self.verb} {self.group or 'core'}/{self.resource}{named}{where}"


def _rules(role: Mapping[str, Any]) -> Iterable[tuple[str, str, str, str | None]]:
    for rule in role.get("rules") or ():
        for group in rule.get("apiGroups") or ():
            for resource in rule.get("resources") or ():
                for verb in rule.get("verbs") or ():
                    for name in rule.get("resourceNames") or [None]:
                        yield group, resource, verb, name


def _binds(binding: Mapping[str, Any], service_account: tuple[str, str]) -> bool:
    namespace, name = service_account
    return any(
        s.get("kind") == "ServiceAccount" and s.get("namespace") == namespace and s.get("name") == name
        for s in binding.get("subjects") or ()
    )


def grants(docs: Iterable[Mapping[str, Any]], service_account: tuple[str, str]) -> set[Grant]:
    """Everything the rendered objects let ``(namespace, name)``'s ServiceAccount do."""
    docs = list(docs)
    roles = {
        (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d
        for d in docs
        if d["kind"] in ("Role", "ClusterRole")
    }
    out: set[Grant] = set()
    for binding in docs:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding") or not _binds(
            binding, service_account
        ):
            continue
        scope = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        ref = binding["roleRef"]
        role = roles.get((ref["kind"], scope if ref["kind"] == "Role" else None, ref["name"]))
        if role is None:
            continue  # a binding to a role the chart does not ship grants nothing checkable
        for group, resource, verb, name in _rules(role):
            out.add(Grant(f"{ref['kind']}/{ref['name']}", scope, group, resource, verb, name))
    return out
