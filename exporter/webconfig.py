"""``--web.config.file``: TLS and basic auth in the format Prometheus exporters share (exporter-toolkit).

Supported keys::

    tls_server_config:
      cert_file: /etc/tls/tls.crt        # required with tls_server_config
      key_file: /etc/tls/tls.key
      client_auth_type: RequireAndVerifyClientCert   # or NoClientCert (default), RequestClientCert,
                                         # RequireAnyClientCert, VerifyClientCertIfGiven
      client_ca_file: /etc/tls/ca.crt
      min_version: TLS12                 # TLS10 … TLS13
      max_version: TLS13
    http_server_config:
      headers: {Strict-Transport-Security: max-age=31536000}
    basic_auth_users:
      prometheus: $2y$10$…               # bcrypt hashes, as htpasswd -B writes them

Any other key is refused with its path, so a setting this exporter would silently ignore (cipher
suites, HTTP/2) is never mistaken for one in force. Password checks use the ``bcrypt`` library; a
successful (user, password) pair is remembered by its SHA-256, so a scrape every few seconds does not
pay bcrypt's deliberate cost each time.
"""

from __future__ import annotations

import hashlib
import hmac
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import bcrypt
import yaml

from exporter.config import ConfigError

_TLS_KEYS: Final = frozenset(
    {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version"}
)
_TLS_VERSIONS: Final = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
#: exporter-toolkit's client_auth_type → (ssl verify mode, whether a CA file is needed).
_CLIENT_AUTH: Final = {
    "NoClientCert": (ssl.CERT_NONE, False),
    "RequestClientCert": (ssl.CERT_OPTIONAL, False),
    "RequireAnyClientCert": (ssl.CERT_REQUIRED, False),
    "VerifyClientCertIfGiven": (ssl.CERT_OPTIONAL, True),
    "RequireAndVerifyClientCert": (ssl.CERT_REQUIRED, True),
}
# Compared against when the user is unknown, so a wrong user name costs what a wrong password does.
_DUMMY_HASH: Final = bcrypt.hashpw(b"not a password", bcrypt.gensalt(rounds=4))


@dataclass(frozen=True)
class TlsSettings:
    cert_file: Path
    key_file: Path
    client_auth_type: str = "NoClientCert"
    client_ca_file: Path | None = None
    min_version: str = "TLS12"
    max_version: str | None = None


@dataclass
class BasicAuth:
    """Checks ``Authorization: Basic`` credentials against bcrypt hashes."""

    users: Mapping[str, bytes]
    _verified: set[bytes] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def check(self, user: str, password: str) -> bool:
        key = hashlib.sha256(f"{user}\0{password}".encode()).digest()
        with self._lock:
            if any(hmac.compare_digest(key, known) for known in self._verified):
                return True
        hashed = self.users.get(user)
        try:
            ok = bcrypt.checkpw(password.encode(), hashed or _DUMMY_HASH) and hashed is not None
        except ValueError:  # not a bcrypt hash: refused at load time, kept safe here
            ok = False
        if ok:
            with self._lock:
                self._verified.add(key)
        return ok


@dataclass(frozen=True)
class WebConfig:
    tls: TlsSettings | None = None
    basic_auth: BasicAuth | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def ssl_context(self) -> ssl.SSLContext | None:
        """The server's TLS context, or ``None`` for plain HTTP. Raises :class:`ConfigError`."""
        tls = self.tls
        if tls is None:
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = _TLS_VERSIONS[tls.min_version]
        if tls.max_version is not None:
            context.maximum_version = _TLS_VERSIONS[tls.max_version]
        try:
            context.load_cert_chain(tls.cert_file, tls.key_file)
            mode, needs_ca = _CLIENT_AUTH[tls.client_auth_type]
            context.verify_mode = mode
            if tls.client_ca_file is not None:
                context.load_verify_locations(cafile=tls.client_ca_file)
            elif needs_ca:
                raise ConfigError(
                    f"--web.config.file: client_auth_type {tls.client_auth_type} needs client_ca_file"
                )
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"--web.config.file: cannot load TLS files: {exc}") from exc
        return context


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ConfigError(f"{where}: expected a mapping")
    return value


def _unknown(section: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    extra = sorted(set(section) - allowed)
    if extra:
        raise ConfigError(f"{where}: {', '.join(extra)} not supported by gpu-exporter")


def parse_web_config(text: str, source: str) -> WebConfig:
    """A :class:`WebConfig` from the YAML ``text`` of file ``source``; raises :class:`ConfigError`."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not YAML: {exc}") from None
    root = _mapping(doc, source)
    _unknown(root, frozenset({"tls_server_config", "http_server_config", "basic_auth_users"}), source)

    tls = None
    tls_doc = _mapping(root.get("tls_server_config"), f"{source}: tls_server_config")
    if tls_doc:
        where = f"{source}: tls_server_config"
        _unknown(tls_doc, _TLS_KEYS, where)
        if not tls_doc.get("cert_file") or not tls_doc.get("key_file"):
            raise ConfigError(f"{where}: cert_file and key_file are required")
        auth_type = str(tls_doc.get("client_auth_type") or "NoClientCert")
        if auth_type not in _CLIENT_AUTH:
            expected = ", ".join(_CLIENT_AUTH)
            raise ConfigError(f"{where}.client_auth_type: {auth_type!r}, expected one of {expected}")
        versions = {}
        for key in ("min_version", "max_version"):
            value = tls_doc.get(key)
            if value is not None and value not in _TLS_VERSIONS:
                raise ConfigError(f"{where}.{key}: {value!r}, expected one of {', '.join(_TLS_VERSIONS)}")
            versions[key] = value
        ca = tls_doc.get("client_ca_file")
        tls = TlsSettings(
            cert_file=Path(tls_doc["cert_file"]),
            key_file=Path(tls_doc["key_file"]),
            client_auth_type=auth_type,
            client_ca_file=None if not ca else Path(ca),
            min_version=versions["min_version"] or "TLS12",
            max_version=versions["max_version"],
        )

    http_doc = _mapping(root.get("http_server_config"), f"{source}: http_server_config")
    _unknown(http_doc, frozenset({"headers"}), f"{source}: http_server_config")
    headers = {str(k): str(v) for k, v in _mapping(http_doc.get("headers"), f"{source}: headers").items()}

    users_doc = _mapping(root.get("basic_auth_users"), f"{source}: basic_auth_users")
    users: dict[str, bytes] = {}
    for user, hashed in users_doc.items():
        value = str(hashed or "").encode()
        if not value.startswith((b"$2a$", b"$2b$", b"$2y$")):
            where = f"{source}: basic_auth_users.{user}"
            raise ConfigError(f"{where}: expected a bcrypt hash ($2a$, $2b$ or $2y$)")
        users[user] = value
    return WebConfig(tls=tls, basic_auth=BasicAuth(users) if users else None, headers=headers)


def load_web_config(path: Path) -> WebConfig:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"--web.config.file {path}: {exc.strerror or exc}") from None
    config = parse_web_config(text, str(path))
    config.ssl_context()  # fail at start-up, not at the first scrape
    return config
