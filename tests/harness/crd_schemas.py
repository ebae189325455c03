"""JSON schemas for the Prometheus Operator objects the chart renders.

kubernetes-validate knows only built-in kinds. These are the subset of the monitoring.coreos.com/v1
CRDs' fields the chart uses, with the types the operator's CRDs declare, and no other field allowed
— so a typo or a wrong type in a template fails here as it would fail at `kubectl apply`.
"""

from __future__ import annotations

from typing import Any

_DURATION = {
    "type": "string",
    "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
}
_STRINGS = {"type": "array", "items": {"type": "string"}}
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}
_RELABEL = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "action": {
            "enum": [
                "replace",
                "keep",
                "drop",
                "hashmod",
                "labelmap",
                "labeldrop",
                "labelkeep",
                "lowercase",
                "uppercase",
                "keepequal",
                "dropequal",
            ]
        },
        "sourceLabels": _STRINGS,
        "separator": {"type": "string"},
        "targetLabel": {"type": "string"},
        "regex": {"type": "string"},
        "modulus": {"type": "integer"},
        "replacement": {"type": "string"},
    },
}
_ENDPOINT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["port"],
    "properties": {
        "port": {"type": "string"},
        "path": {"type": "string"},
        "interval": _DURATION,
        "scrapeTimeout": _DURATION,
        "honorLabels": {"type": "boolean"},
        "relabelings": {"type": "array", "items": _RELABEL},
        "metricRelabelings": {"type": "array", "items": _RELABEL},
    },
}
_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"matchLabels": _LABELS, "matchExpressions": {"type": "array"}},
}
_NAMESPACE_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"any": {"type": "boolean"}, "matchNames": _STRINGS},
}
_METADATA = {
    "type": "object",
    "required": ["name", "namespace"],
    "properties": {"name": {"type": "string"}, "namespace": {"type": "string"}, "labels": _LABELS},
}


def _object(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": kind},
            "metadata": _METADATA,
            "spec": spec,
        },
    }


_RULE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["expr"],
    # The CRD requires only expr; Prometheus refuses a rule that is neither an alert nor a recording.
    "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
    "properties": {
        "alert": {"type": "string"},
        "record": {"type": "string"},
        "expr": {"type": "string"},
        "for": _DURATION,
        "keep_firing_for": _DURATION,
        "labels": _LABELS,
        "annotations": _LABELS,
    },
}

SCHEMAS: dict[str, dict[str, Any]] = {
    "ServiceMonitor": _object(
        "ServiceMonitor",
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "endpoints"],
            "properties": {
                "selector": _SELECTOR,
                "namespaceSelector": _NAMESPACE_SELECTOR,
                "endpoints": {"type": "array", "minItems": 1, "items": _ENDPOINT},
            },
        },
    ),
    "PodMonitor": _object(
        "PodMonitor",
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "podMetricsEndpoints"],
            "properties": {
                "selector": _SELECTOR,
                "namespaceSelector": _NAMESPACE_SELECTOR,
                "podMetricsEndpoints": {"type": "array", "minItems": 1, "items": _ENDPOINT},
            },
        },
    ),
    "PrometheusRule": _object(
        "PrometheusRule",
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["groups"],
            "properties": {
                "groups": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["name", "rules"],
                        "properties": {
                            "name": {"type": "string"},
                            "interval": _DURATION,
                            "rules": {"type": "array", "items": _RULE},
                        },
                    },
                }
            },
        },
    ),
}


# --- the KEDA HTTP add-on's and KEDA's CRDs, for the objects ``wake: keda-http`` writes -----------------
# From the published CRDs: http-add-on config/crd/bases (v0.14, v0.15) and keda config/crd/bases
# keda.sh_scaledobjects.yaml. Fields the reaper does not write are left out, and so refused: a name
# the CRD does not declare is pruned by the API server, silently, which is the failure to catch.

_INT32 = {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1}
_PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
_HOSTS = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
_TARGET_VALUE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["targetValue"],
    "properties": {"targetValue": {**_INT32, "minimum": 1}},
}
_SCALING_METRIC = {
    "type": "object",
    "additionalProperties": False,
    "minProperties": 1,  # x-kubernetes-validations: one of concurrency, requestRate
    "properties": {
        "concurrency": _TARGET_VALUE,
        "requestRate": {
            **_TARGET_VALUE,
            "properties": {
                "targetValue": {**_INT32, "minimum": 1},
                "granularity": {"type": "string"},
                "window": {"type": "string"},
            },
        },
    },
}
_WAKE_METADATA = {
    "type": "object",
    "required": ["name", "namespace"],
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "namespace": {"type": "string", "minLength": 1},
        "labels": _LABELS,
        "annotations": _LABELS,
    },
}


def _custom(api_version: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": api_version},
            "kind": {"const": kind},
            "metadata": _WAKE_METADATA,
            "spec": spec,
        },
    }


# One of port, portName (the CRDs' x-kubernetes-validations).
_ONE_PORT = {"oneOf": [{"required": ["port"]}, {"required": ["portName"]}]}

ADDON_SCHEMAS: dict[str, dict[str, Any]] = {
    "InterceptorRoute": _custom(
        "http.keda.sh/v1beta1",
        "InterceptorRoute",
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["scalingMetric", "target"],
            "properties": {
                "target": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["service"],
                    **_ONE_PORT,
                    "properties": {
                        "service": {"type": "string", "minLength": 1},
                        "port": _PORT,
                        "portName": {"type": "string", "minLength": 1},
                    },
                },
                "rules": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "hosts": _HOSTS,
                            "paths": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "required": ["value"],
                                    "properties": {"value": {"type": "string", "minLength": 1}},
                                },
                            },
                        },
                    },
                },
                "scalingMetric": _SCALING_METRIC,
                "timeouts": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "readiness": {"type": "string"},
                        "request": {"type": "string"},
                        "responseHeader": {"type": "string"},
                    },
                },
            },
        },
    ),
    "HTTPScaledObject": _custom(
        "http.keda.sh/v1alpha1",
        "HTTPScaledObject",
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["scaleTargetRef"],
            "properties": {
                "hosts": {"type": "array", "items": {"type": "string"}},
                "pathPrefixes": {"type": "array", "items": {"type": "string"}},
                "scaleTargetRef": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["service"],
                    **_ONE_PORT,
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "name": {"type": "string"},
                        "service": {"type": "string"},
                        "port": _INT32,
                        "portName": {"type": "string"},
                    },
                },
                "replicas": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"min": _INT32, "max": _INT32},
                },
                "scalingMetric": _SCALING_METRIC,
                "scaledownPeriod": _INT32,
                "timeouts": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"conditionWait": {"type": "string"}, "responseHeader": {"type": "string"}},
                },
            },
        },
    ),
    "ScaledObject": _custom(
        "keda.sh/v1alpha1",
        "ScaledObject",
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["scaleTargetRef", "triggers"],
            "properties": {
                "scaleTargetRef": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name"],
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "name": {"type": "string", "minLength": 1},
                        "envSourceContainerName": {"type": "string"},
                    },
                },
                "minReplicaCount": {**_INT32, "minimum": 0},
                "maxReplicaCount": {**_INT32, "minimum": 1},
                "idleReplicaCount": {**_INT32, "minimum": 0},
                "cooldownPeriod": {**_INT32, "minimum": 0},
                "pollingInterval": {**_INT32, "minimum": 1},
                "triggers": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["metadata", "type"],
                        "properties": {
                            "type": {"type": "string", "minLength": 1},
                            "name": {"type": "string"},
                            # map[string]string in KEDA's types: a number here is refused.
                            "metadata": _LABELS,
                        },
                    },
                },
            },
        },
    ),
}
