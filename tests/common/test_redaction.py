"""Credentials never survive into what the tools log: each way a server or a URL may echo one."""

from __future__ import annotations

import pytest

from common.redaction import REDACTED, redact

SECRET = "s3cret-Tok3n.value"


@pytest.mark.parametrize(
    "text",
    [
        f"Authorization: Bearer {SECRET}",
        f"authorization: Basic {SECRET}",
        f"Proxy-Authorization: Bearer {SECRET}",
        f'{{"headers": {{"Authorization": ["Bearer {SECRET}"]}}}}',
        f"{{'Authorization': 'Bearer {SECRET}', 'Accept': 'application/json'}}",
        f"rejected request with bearer {SECRET} from 10.0.0.1",
        f"GET http://admin:{SECRET}@prometheus:9090/api/v1/query",
        f"https://{SECRET}@vm.example/select/0/prometheus",
        f"/api/v1/query?query=up&token={SECRET}&step=60",
        f"POST body: query=up&access_token={SECRET}",
        f"password={SECRET}",
        f"https://gw.example/push?api_key={SECRET}#frag",
        f"xoxb-1234-{SECRET}",
    ],
)
def test_each_echoed_credential_is_redacted(text: str) -> None:
    out = redact(text)
    assert SECRET not in out, out
    assert REDACTED in out


@pytest.mark.parametrize(
    "text",
    [
        "query rejected (HTTP 400) bad_data: parse error at char 5: unexpected <by>",
        'sum by (namespace) (rate(DCGM_FI_DEV_GPU_UTIL{UUID="GPU-1"}[5m]))',
        "http://prometheus:9090/api/v1/query",
        "HTTP 503: upstream connect error or disconnect/reset before headers",
        "X-Scope-OrgID: team-gpu",
        "the token bucket is empty",
        "this server requires basic authentication",
    ],
)
def test_text_without_credentials_is_left_as_it_is(text: str) -> None:
    assert redact(text) == text


def test_the_rest_of_the_text_survives() -> None:
    out = redact(f"HTTP 401 for GET http://u:{SECRET}@tsdb/api/v1/query?match=up&token={SECRET} (denied)")
    assert out == f"HTTP 401 for GET http://{REDACTED}@tsdb/api/v1/query?match=up&token={REDACTED} (denied)"
