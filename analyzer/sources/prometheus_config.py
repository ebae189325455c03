"""How to reach a Prometheus-compatible query API: one validated, immutable config for both commands.

``gpu-analyzer analyze`` and ``gpu-reaper run`` build it the same way (``cli.conventions``); the
reaper reaches it through ``reaper.analysis``. Secrets — the bearer token and the basic-auth
password — come from a file or the environment and nowhere else: a command line shows in ``ps``
and in a pod's spec. ``read_secret`` is the one place that reads them.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from common.errors import BadInputError

log = logging.getLogger(__name__)

# Names of environment variables, not secrets.
TOKEN_ENV = "GPU_PROMETHEUS_TOKEN"  # noqa: S105
USER_ENV = "GPU_PROMETHEUS_USER"
PASSWORD_ENV = "GPU_PROMETHEUS_PASSWORD"  # noqa: S105
# Spellings of earlier releases (the reaper's chart, the analyzer's docs): still read, with a warning.
LEGACY_ENV = {
    TOKEN_ENV: ("GPU_REAPER_PROMETHEUS_TOKEN", "GPU_ANALYZER_BEARER_TOKEN"),
    USER_ENV: ("GPU_REAPER_PROMETHEUS_USER",),
    PASSWORD_ENV: ("GPU_REAPER_PROMETHEUS_PASSWORD", "GPU_ANALYZER_BASIC_AUTH_PASSWORD"),
}

# Mimir tenant IDs (several joined by "|" for tenant federation): no spaces, no control characters.
_TENANT = re.compile(r"[A-Za-z0-9!\-_.*'()|]+")


@dataclass(frozen=True)
class PrometheusConfig:
    """How to reach the query API. Validated on construction; secrets never appear in ``repr`` or logs."""

    url: str
    bearer_token: str | None = field(default=None, repr=False)
    basic_auth: tuple[str, str] | None = field(default=None, repr=False)
    verify_tls: bool = True
    ca_file: str | None = None
    timeout_s: float = 60.0
    retries: int = 3
    backoff_s: float = 0.5
    # Queries in flight at once; 429/503 answers narrow it (see analyzer.sources.pacing).
    concurrency: int = 4
    # Mimir (and Cortex, Loki-style multi-tenant gateways): the tenant sent as X-Scope-OrgID.
    tenant: str | None = None

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise BadInputError(f"--prometheus-url {self.url!r}: expected http(s)://host[:port][/prefix]")
        if self.bearer_token is not None and self.basic_auth is not None:
            raise BadInputError("Prometheus: use either a bearer token or basic auth, not both")
        if not self.timeout_s > 0 or self.timeout_s == float("inf"):
            raise BadInputError(
                f"--prometheus-timeout {self.timeout_s!r}: must be a positive number of seconds"
            )
        if self.retries < 0 or self.backoff_s < 0:
            raise BadInputError("--prometheus-retries and the backoff cannot be negative")
        if not 1 <= self.concurrency <= 32:
            raise BadInputError(f"--prometheus-concurrency {self.concurrency!r}: must be between 1 and 32")
        if self.tenant is not None and not _TENANT.fullmatch(self.tenant):
            raise BadInputError(
                f"--prometheus-tenant {self.tenant!r}: a tenant ID is letters, digits and !-_.*'() "
                "(several joined by |), without spaces"
            )

    @classmethod
    def from_options(
        cls,
        url: str,
        *,
        token_file: Path | None = None,
        user: str | None = None,
        password_file: Path | None = None,
        env: Mapping[str, str] | None = None,
        **options: object,
    ) -> PrometheusConfig:
        """The config for ``url`` with its secrets read from files or ``env`` (default: the environment).

        A token file wins over the token variable, a password file over the password variable.
        ``options`` are the remaining fields (``ca_file``, ``verify_tls``, ``tenant``, ...).
        """
        env = os.environ if env is None else env
        token = read_secret("the Prometheus bearer token", token_file, TOKEN_ENV, env)
        user = user or _env(USER_ENV, env)
        basic_auth = None
        if user is not None:
            password = read_secret("the Prometheus password", password_file, PASSWORD_ENV, env)
            if password is None:
                raise BadInputError(
                    f"Prometheus basic auth user {user!r} needs a password: --prometheus-password-file "
                    f"or ${PASSWORD_ENV}"
                )
            basic_auth = (user, password)
        elif password_file is not None:
            raise BadInputError(f"--prometheus-password-file needs a user: --prometheus-user or ${USER_ENV}")
        return cls(url=url, bearer_token=token, basic_auth=basic_auth, **options)  # type: ignore[arg-type]

    @property
    def base_url(self) -> str:
        return self.url.rstrip("/")

    @property
    def display_url(self) -> str:
        """The URL without any user:password part."""
        parts = urlsplit(self.base_url)
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def read_secret(what: str, path: Path | None, env_name: str, env: Mapping[str, str]) -> str | None:
    """A secret from a mounted file (wins) or an environment variable; None when neither is set.

    Surrounding whitespace is dropped: files written by ``echo`` or ``kubectl create secret`` end in
    a newline the server would refuse.
    """
    if path is not None:
        try:
            text = path.read_text(encoding="utf-8").strip()
        except OSError as e:
            raise BadInputError(f"{path}: cannot read {what} ({e.strerror or e})") from e
        if not text:
            raise BadInputError(f"{path}: {what} file is empty")
        return text
    return _env(env_name, env)


def _env(name: str, env: Mapping[str, str]) -> str | None:
    value = (env.get(name) or "").strip()
    if value:
        return value
    for old in LEGACY_ENV.get(name, ()):
        value = (env.get(old) or "").strip()
        if value:
            log.warning("$%s is deprecated; set $%s instead", old, name)
            return value
    return None
