"""The one Prometheus connection config: secrets from files or the environment, validated once."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from analyzer.sources.prometheus_config import PrometheusConfig
from common.errors import BadInputError

URL = "https://prometheus.example:9090"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_token_from_the_environment_or_a_file_which_wins(tmp_path: Path) -> None:
    config = PrometheusConfig.from_options(URL, env={"GPU_PROMETHEUS_TOKEN": "s3cret-env"})
    assert config.bearer_token == "s3cret-env"
    assert "s3cret" not in repr(config)
    token = _write(tmp_path, "token", "s3cret-file\n")
    config = PrometheusConfig.from_options(URL, token_file=token, env={"GPU_PROMETHEUS_TOKEN": "s3cret-env"})
    assert config.bearer_token == "s3cret-file"


def test_basic_auth_user_and_password(tmp_path: Path) -> None:
    password = _write(tmp_path, "password", "pa55\n")
    config = PrometheusConfig.from_options(URL, user="reader", password_file=password, env={})
    assert config.basic_auth == ("reader", "pa55")
    env = {"GPU_PROMETHEUS_USER": "reader", "GPU_PROMETHEUS_PASSWORD": "pa55"}
    assert PrometheusConfig.from_options(URL, env=env).basic_auth == ("reader", "pa55")
    assert "pa55" not in repr(config)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("GPU_REAPER_PROMETHEUS_TOKEN", "GPU_PROMETHEUS_TOKEN"),
        ("GPU_ANALYZER_BEARER_TOKEN", "GPU_PROMETHEUS_TOKEN"),
    ],
)
def test_older_variable_names_still_work_with_a_warning(
    old: str, new: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        assert PrometheusConfig.from_options(URL, env={old: "t0ken"}).bearer_token == "t0ken"
    assert f"${old} is deprecated; set ${new} instead" in caplog.text


@pytest.mark.parametrize(
    ("options", "env", "message"),
    [
        pytest.param({"user": "reader"}, {}, "needs a password", id="user-without-password"),
        pytest.param({"password_file": "PASSWORD"}, {}, "needs a user", id="password-without-user"),
        pytest.param(
            {"token_file": "MISSING"}, {}, "MISSING: cannot read the Prometheus bearer token", id="no-file"
        ),
        pytest.param(
            {"token_file": "EMPTY"}, {}, "EMPTY: the Prometheus bearer token file is empty", id="empty"
        ),
        pytest.param(
            {"user": "reader"},
            {"GPU_PROMETHEUS_TOKEN": "t", "GPU_PROMETHEUS_PASSWORD": "p"},
            "either a bearer token or basic auth",
            id="token-and-basic-auth",
        ),
        pytest.param({"timeout_s": 0.0}, {}, "--prometheus-timeout", id="zero-timeout"),
        pytest.param({"retries": -1}, {}, "--prometheus-retries", id="negative-retries"),
    ],
)
def test_unusable_options_are_bad_input_naming_what(
    options: dict[str, object], env: dict[str, str], message: str, tmp_path: Path
) -> None:
    files = {
        "PASSWORD": _write(tmp_path, "password", "pa55"),
        "MISSING": tmp_path / "missing",
        "EMPTY": _write(tmp_path, "empty", "\n"),
    }
    resolved = {k: files.get(v, v) if isinstance(v, str) else v for k, v in options.items()}
    expected = message
    for name, path in files.items():
        expected = expected.replace(name, str(path))
    with pytest.raises(BadInputError, match=re.escape(expected)):
        PrometheusConfig.from_options(URL, env=env, **resolved)  # type: ignore[arg-type]


def test_config_is_immutable() -> None:
    config = PrometheusConfig(URL)
    with pytest.raises(AttributeError):
        config.url = "http://elsewhere"  # type: ignore[misc]
