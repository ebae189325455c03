"""A web config that is not YAML is named by its file, in one line (issue 41): PyYAML's own text names
``<unicode string>`` and spans several lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.config import ConfigError
from exporter.webconfig import load_web_config


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param("basic_auth_users: [\n", "line 2, column 1: expected the node content", id="unclosed"),
        pytest.param("a: b\n  c: d\n", "line 2, column 4: mapping values are not allowed here", id="indent"),
    ],
)
def test_a_web_config_that_is_not_yaml_is_one_line_naming_the_file(
    tmp_path: Path, text: str, problem: str
) -> None:
    web = tmp_path / "web.yml"
    web.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_web_config(web)
    message = str(caught.value)
    assert message.startswith(f"{web}: not YAML ({problem}"), message
    assert "<unicode string>" not in message and "\n" not in message
