"""Credentials out of text that came from a server or a user, before it is logged or shown.

A proxy's or a TSDB's error page may echo the request it refused, headers and all; a URL may carry a
user and password, or a token as a query parameter. Both tools pass any such text through
:func:`redact` before it reaches a log line, an error message or a report.
"""

from __future__ import annotations

import re

REDACTED = "[redacted]"

# Query or form parameters whose value is a secret.
_HIDDEN_PARAMS = (
    r"(?:access_|id_|refresh_|bearer_|auth_)?token|api[_-]?key|apikey|pass(?:word|wd)?|pwd|secret"
    r"|client_secret|auth|authorization|credentials?|sig|signature|x-amz-signature|x-amz-credential"
)
_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    # An Authorization header, as a line or echoed in JSON or a Python repr: its whole value.
    (
        re.compile(r"""(?i)(["']?(?:proxy-)?authorization["']?\s*[:=]\s*\[?\s*["']?)[^"'\]\r\n]+"""),
        rf"\1{REDACTED}",
    ),
    # What follows an authentication scheme, wherever it shows: a credential, not a word of prose
    # ("basic authentication"), so one with a digit or a symbol in it.
    (
        re.compile(r"(?i)\b(bearer|basic)(\s+)(?=[A-Za-z]*[0-9._~+/=-])[A-Za-z0-9._~+/=-]{6,}"),
        rf"\1\2{REDACTED}",
    ),
    # A URL's user information: scheme://user:password@host.
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@?#]+@"), rf"\1{REDACTED}@"),
    # Secret parameters in a query string or a form body (token=…, password=…).
    (re.compile(rf"(?i)(^|[?&;\s\"'])({_HIDDEN_PARAMS})=[^&;\s\"'#]*"), rf"\1\2={REDACTED}"),
    # Slack tokens, should one be echoed.
    (re.compile(r"\bxox[abeoprs]-[A-Za-z0-9-]+"), REDACTED),
)


def redact(text: str) -> str:
    """``text`` with every credential it shows replaced by ``[redacted]``; the rest left as it is."""
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return text
