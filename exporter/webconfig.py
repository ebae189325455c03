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
suites, HTTP/2) is never mistaken for one in force. Relative file names are read from the web config
file's directory, as exporter-toolkit does (``TLSConfig.SetDirectory``). Password checks use the
``bcrypt`` library; a successful (user, password) pair is remembered by its SHA-256, so a scrape every
few seconds does not pay bcrypt's deliberate cost each time. An unknown user name is checked against
a configured hash of the highest cost and refused, so it costs what a wrong password costs and the
answer time does not tell which user names exist.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import ssl
import threading
from collections.abc import Callable, Mapping
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
# A bcrypt hash as htpasswd -B and Go's bcrypt write it: version, cost 04–31, 22 characters of salt
# and 31 of hash in bcrypt's base64 alphabet. Anything else would fail every login, so it is refused.
_BCRYPT: Final = re.compile(rb"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")


@dataclass(frozen=True)
class TlsSettings:
    cert_file: Path
    key_file: Path
    client_auth_type: str = "NoClientCert"
    client_ca_file: Path | None = None
    min_version: str = "TLS12"
    max_version: str | None = None


def _cost(hashed: bytes) -> int:
    return int(hashed[4:6])


@dataclass
class BasicAuth:
    """Checks ``Authorization: Basic`` credentials against bcrypt hashes (validated at load)."""

    users: Mapping[str, bytes]
    checkpw: Callable[[bytes, bytes], bool] = bcrypt.checkpw
    _verified: set[bytes] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        # An unknown user is checked against this stand-in and refused whatever the result: the
        # slowest configured hash, so no configured user answers slower than a made-up name.
        self._stand_in = max(self.users.values(), key=_cost, default=b"")

    def check(self, user: str, password: str) -> bool:
        key = hashlib.sha256(f"{user}\0{password}".encode()).digest()
        with self._lock:
            if any(hmac.compare_digest(key, known) for known in self._verified):
                return True
        hashed = self.users.get(user)
        try:
            ok = self.checkpw(password.encode(), hashed or self._stand_in) and hashed is not None
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
    source: str = "--web.config.file"  # the file, for messages

    def ssl_context(self) -> ssl.SSLContext | None:
        """The server's TLS context, or ``None`` for plain HTTP. Raises :class:`ConfigError`."""
        tls = self.tls
        if tls is None:
            return None
        where = f"{self.source}: tls_server_config"
        mode, needs_ca = _CLIENT_AUTH[tls.client_auth_type]
        if needs_ca and tls.client_ca_file is None:
            raise ConfigError(f"{where}: client_auth_type {tls.client_auth_type} needs client_ca_file")
        files = {"cert_file": tls.cert_file, "key_file": tls.key_file, "client_ca_file": tls.client_ca_file}
        for key, path in files.items():
            if path is not None:
                try:  # OpenSSL's own error would not say which file is missing
                    path.open("rb").close()
                except OSError as exc:
                    raise ConfigError(f"{where}.{key} {path}: {exc.strerror or exc}") from None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = _TLS_VERSIONS[tls.min_version]
        if tls.max_version is not None:
            context.maximum_version = _TLS_VERSIONS[tls.max_version]
        context.verify_mode = mode
        try:
            context.load_cert_chain(tls.cert_file, tls.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"{where}: cert_file {tls.cert_file} with key_file {tls.key_file}: {exc}"
            ) from None
        if tls.client_ca_file is not None:
            try:
                context.load_verify_locations(cafile=tls.client_ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(f"{where}.client_ca_file {tls.client_ca_file}: {exc}") from None
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


def parse_web_config(text: str, source: str, directory: Path | None = None) -> WebConfig:
    """A :class:`WebConfig` from the YAML ``text`` of file ``source``; raises :class:`ConfigError`.

    Relative file names are taken from ``directory`` (the file's own), as exporter-toolkit does."""
    base = directory or Path()
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        # PyYAML's own text names "<unicode string>" and spans lines: the file, and where in it.
        mark = getattr(exc, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise ConfigError(f"{source}: not YAML ({at}{problem})") from None
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
            cert_file=base / str(tls_doc["cert_file"]),
            key_file=base / str(tls_doc["key_file"]),
            client_auth_type=auth_type,
            client_ca_file=None if not ca else base / str(ca),
            min_version=versions["min_version"] or "TLS12",
            max_version=versions["max_version"],
        )

    http_doc = _mapping(root.get("http_server_config"), f"{source}: http_server_config")
    _unknown(http_doc, frozenset({"headers"}), f"{source}: http_server_config")
    headers = {str(k): str(v) for k, v in _mapping(http_doc.get("headers"), f"{source}: headers").items()}

    users_doc = _mapping(root.get("basic_auth_users"), f"{source}: basic_auth_users")
    users: dict[str, bytes] = {}
    for user, hashed in users_doc.items():
        value = str(hashed or "").strip().encode()
        if not _BCRYPT.fullmatch(value):
            raise ConfigError(
                f"{source}: basic_auth_users.{user}: expected a bcrypt hash: $2y$ (or $2a$, $2b$), "
                f"a cost of 04 to 31, $, then 53 characters, as `htpasswd -nB {user}` writes"
            )
        users[user] = value
    auth = BasicAuth(users) if users else None
    return WebConfig(tls=tls, basic_auth=auth, headers=headers, source=source)


def load_web_config(path: Path) -> WebConfig:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"--web.config.file {path}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"--web.config.file {path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None
    config = parse_web_config(text, str(path), path.parent)
    config.ssl_context()  # fail at start-up, not at the first scrape
    return config
