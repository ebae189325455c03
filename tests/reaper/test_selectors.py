"""Label selectors in the API's query form: what the in-memory cluster and the emulator filter by."""

from __future__ import annotations

import pytest

from common.errors import BadInputError
from reaper import selectors
from reaper.policy.schema import LabelSelector

GPU_NODE = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100", "zone": "a"}


@pytest.mark.parametrize(
    ("text", "selected"),
    [
        ("", True),
        ("nvidia.com/gpu.present=true", True),
        ("nvidia.com/gpu.present==true", True),
        ("nvidia.com/gpu.present!=true", False),
        ("nvidia.com/gpu.present=false", False),
        ("zone in (a, b)", True),
        ("zone notin (a,b)", False),
        ("zone notin (c)", True),
        ("nvidia.com/gpu.product", True),
        ("!nvidia.com/gpu.product", False),
        ("!amd.com/gpu", True),
        ("nvidia.com/gpu.present=true,zone in (b,c)", False),
        ("nvidia.com/gpu.present=true, zone in (a,c), !amd.com/gpu", True),
        ("missing!=x", True),  # != selects objects without the label, as the API server does
    ],
)
def test_a_selector_selects_as_the_api_server_does(text: str, selected: bool) -> None:
    assert selectors.matches(selectors.parse(text), GPU_NODE) is selected


@pytest.mark.parametrize("text", ["zone in a", "a=b=c", "=x", "zone in (a", "a b"])
def test_an_unreadable_selector_is_refused_naming_it(text: str) -> None:
    with pytest.raises(BadInputError, match="label selector"):
        selectors.parse(text)


def test_the_policy_selector_becomes_the_query_that_selects_the_same_nodes() -> None:
    policy = LabelSelector.model_validate(
        {
            "matchLabels": {"nvidia.com/gpu.present": "true"},
            "matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["b", "a"]},
                {"key": "amd.com/gpu", "operator": "DoesNotExist"},
            ],
        }
    )
    text = selectors.query(policy)
    assert text == "nvidia.com/gpu.present=true,zone in (a,b),!amd.com/gpu"
    for labels in (GPU_NODE, {**GPU_NODE, "zone": "c"}, {**GPU_NODE, "amd.com/gpu": "1"}, {}):
        assert selectors.matches(selectors.parse(text), labels) is policy.matches(labels)
