"""The Prometheus options of ``gpu-analyzer analyze`` and ``gpu-reaper run``: one set, one config.

The same names in both commands, each with an environment fallback named ``GPU_`` + the flag
(``--prometheus-url`` → ``$GPU_PROMETHEUS_URL``); the secrets themselves only from files or
``$GPU_PROMETHEUS_TOKEN`` / ``$GPU_PROMETHEUS_PASSWORD`` (read by ``PrometheusConfig.from_options``,
never from argv). The spellings of earlier releases are hidden aliases that log a deprecation warning.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from cli import conventions
from common.errors import BadInputError

if TYPE_CHECKING:
    from analyzer import PrometheusConfig


class _Option(NamedTuple):  # not a dataclass: parsing needs no dataclasses module (nor its inspect)
    flag: str
    dest: str
    help: str
    type: Callable[[str], Any] = str
    metavar: str | None = None
    switch: bool = False  # a flag without a value
    environment: bool = True  # $GPU_ + the flag, upper-cased
    old: tuple[str, ...] = ()  # deprecated spellings
    env_name: str | None = None  # where $GPU_ + the flag would say GPU twice
    old_env: tuple[str, ...] = ()  # deprecated environment variables, still read

    @property
    def env(self) -> str | None:
        if not self.environment:
            return None
        return self.env_name or "GPU_" + self.flag.removeprefix("--").replace("-", "_").upper()


URL_ENV = "GPU_PROMETHEUS_URL"
_PROMETHEUS = (
    _Option(
        "--prometheus-token-file",
        "prometheus_token_file",
        "file holding a bearer token (or the token itself in $GPU_PROMETHEUS_TOKEN)",
        Path,
        "FILE",
        old=("--bearer-token-file",),
    ),
    _Option(
        "--prometheus-user",
        "prometheus_user",
        "basic-auth user (or $GPU_PROMETHEUS_USER); the password from --prometheus-password-file "
        "or $GPU_PROMETHEUS_PASSWORD",
        metavar="USER",
        environment=False,  # read with the password, by the config
        old=("--basic-auth-user",),
    ),
    _Option(
        "--prometheus-password-file",
        "prometheus_password_file",
        "file holding the basic-auth password",
        Path,
        "FILE",
        old=("--basic-auth-password-file",),
    ),
    _Option(
        "--prometheus-ca-file",
        "prometheus_ca_file",
        "CA bundle to verify the server's certificate",
        Path,
        "FILE",
        old=("--ca-file",),
    ),
    _Option(
        "--prometheus-insecure-skip-verify",
        "prometheus_insecure_skip_verify",
        "do not verify the server's certificate (unsafe)",
        conventions.bool_arg,
        switch=True,
        old=("--insecure-skip-tls-verify",),
    ),
    _Option(
        "--prometheus-tenant",
        "prometheus_tenant",
        "Mimir/Cortex tenant, sent as the X-Scope-OrgID header (a|b federates)",
        metavar="ID",
        old=("--tenant",),
    ),
    _Option(
        "--prometheus-timeout",
        "prometheus_timeout",
        "per request: seconds (30) or a duration (2m); default 60s",
        conventions.timeout_arg,
        "DURATION",
        old=("--timeout",),
    ),
    _Option(
        "--prometheus-retries",
        "prometheus_retries",
        "retries on connection errors, timeouts, 429 and 5xx, with backoff; default 3",
        conventions.count_arg,
        "N",
        old=("--retries",),
    ),
    _Option(
        "--prometheus-concurrency",
        "prometheus_concurrency",
        "queries in flight at once (1-32); 429/503 answers narrow it for the rest of the run; default 4",
        conventions.count_arg,
        "N",
    ),
    _Option(
        "--cluster-label",
        "cluster_label",
        "the label telling clusters apart where one query view (Thanos, Mimir, VictoriaMetrics) holds "
        "several; each is analysed apart (default cluster)",
        conventions.label_name_arg,
        "LABEL",
    ),
    _Option(
        "--gpu-util-unit",
        "gpu_util_unit",
        "unit of DCGM_FI_DEV_GPU_UTIL: auto (detected per scrape job, the default), percent or ratio",
        lambda text: _choice(text, ("auto", "percent", "ratio")),
        "{auto,percent,ratio}",
        env_name="GPU_UTIL_UNIT",
        old=("--util-scale",),  # it named a unit, not a multiplier
        old_env=("GPU_UTIL_SCALE",),
    ),
)
_DEFAULTS: dict[str, Any] = {
    "prometheus_timeout": timedelta(seconds=60),
    "prometheus_retries": 3,
    "prometheus_concurrency": 4,
    "gpu_util_unit": "auto",
    "cluster_label": "cluster",
    "prometheus_insecure_skip_verify": False,
}


def _choice(text: str, choices: Sequence[str]) -> str:
    if text not in choices:
        raise argparse.ArgumentTypeError(f"invalid choice {text!r} (choose from {', '.join(choices)})")
    return text


class _Deprecated(argparse.Action):
    """An older spelling of an option: sets the same value, and is reported once logging is set up."""

    def __init__(
        self, option_strings: Sequence[str], dest: str, replacement: str, switch: bool, **kwargs: Any
    ):
        super().__init__(option_strings, dest, nargs=0 if switch else None, **kwargs)
        self.replacement, self.switch = replacement, switch

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, True if self.switch else values)
        notes = [*getattr(namespace, "_deprecated", ()), (option, self.replacement)]
        namespace._deprecated = notes


def add_prometheus_url(group: argparse._ActionsContainer) -> None:
    """``--prometheus-url`` (or ``$GPU_PROMETHEUS_URL``), usually in a group with the other sources."""
    group.add_argument(
        "--prometheus-url",
        metavar="URL",
        help=f"Prometheus, Thanos Query, Mimir (with its /prometheus prefix) or VictoriaMetrics [${URL_ENV}]",
    )


def add_prometheus_options(parser: argparse.ArgumentParser) -> None:
    """Everything else about reaching Prometheus, the same in ``gpu-analyzer`` and ``gpu-reaper``."""
    g = parser.add_argument_group("Prometheus (secrets from files or the environment, never from flags)")
    for o in _PROMETHEUS:
        env = f" [${o.env}]" if o.env else ""
        if o.switch:
            g.add_argument(o.flag, dest=o.dest, action="store_true", default=None, help=o.help + env)
        else:
            g.add_argument(o.flag, dest=o.dest, type=o.type, metavar=o.metavar, help=o.help + env)
        for old in o.old:
            g.add_argument(
                old,
                dest=o.dest,
                action=_Deprecated,
                replacement=o.flag,
                switch=o.switch,
                type=o.type,
                help=argparse.SUPPRESS,
            )


def from_environment(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> None:
    """Options not given as flags, from their environment variables, then their defaults."""
    env = os.environ if env is None else env
    if args.prometheus_url is None:
        args.prometheus_url = env.get(URL_ENV) or None
    for o in _PROMETHEUS:
        name = next((n for n in (o.env, *o.old_env) if n and env.get(n)), None)
        if getattr(args, o.dest) is None and name:
            try:
                setattr(args, o.dest, o.type(env[name]))
            except argparse.ArgumentTypeError as e:
                raise BadInputError(f"${name}: {e}") from e
        if getattr(args, o.dest) is None and o.dest in _DEFAULTS:
            setattr(args, o.dest, _DEFAULTS[o.dest])


def prometheus_config(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> PrometheusConfig:
    """The one Prometheus config, from the parsed options (flags, then environment) and the secrets."""
    from analyzer import PrometheusConfig  # a run's, not the parser's

    return PrometheusConfig.from_options(
        args.prometheus_url,
        token_file=args.prometheus_token_file,
        user=args.prometheus_user,
        password_file=args.prometheus_password_file,
        env=env,
        verify_tls=not args.prometheus_insecure_skip_verify,
        ca_file=str(args.prometheus_ca_file) if args.prometheus_ca_file else None,
        timeout_s=args.prometheus_timeout.total_seconds(),
        retries=args.prometheus_retries,
        concurrency=args.prometheus_concurrency,
        tenant=args.prometheus_tenant,
    )


def require_one_source(args: argparse.Namespace, other: str) -> None:
    """``--prometheus-url`` (flag or environment) or ``other``; argparse rejects both given as flags.

    Fills the options from the environment first (``from_environment``)."""
    from_environment(args)
    dest = other.removeprefix("--").replace("-", "_")
    if args.prometheus_url is not None and getattr(args, dest) is not None:
        args.prometheus_url = None  # a URL from the environment yields to an explicit other source
    if args.prometheus_url is None and getattr(args, dest) is None:
        raise BadInputError(f"one of the arguments --prometheus-url (or ${URL_ENV}) {other} is required")
