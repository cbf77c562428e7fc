"""Client configuration: connection options, and parsing of ``redis://`` style URLs.

One URL says everything a deployment needs, so a service reads it from its environment:

- ``redis://[user[:password]@]host[:port][/db][?option=value...]`` a single server
- ``rediss://...`` the same over TLS
- ``redis+cluster://host:port[,host:port...]`` a cluster, from one or more seed nodes
- ``redis+sentinel://host:port[,host:port...]/service[/db]`` the primary a set of sentinels
  names for ``service`` (``rediss+cluster://`` and ``rediss+sentinel://`` for TLS)

The options accepted in the query string are the fields of :class:`ConnectionOptions` (and
:class:`ClientConfig`), plus ``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile`` and
``ssl_check_hostname`` which build the TLS context.

Every value is checked when the configuration is built (ports, timeouts, the URL's shape), so a
mistake is a :class:`~trio_streams.core.errors.ConfigurationError` at ``connect`` rather than a
surprise at the first command. Credentials never appear in a message or a repr: URLs are shown
with the password replaced by ``***``.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import re
import ssl
from dataclasses import dataclass, field
from typing import Any, Literal, final
from urllib.parse import parse_qsl, unquote, urlsplit

from ...core.errors import ConfigurationError
from .errors import Address

Topology = Literal["standalone", "cluster", "sentinel"]

_SCHEMES: dict[str, tuple[Topology, bool]] = {
    "redis": ("standalone", False),
    "rediss": ("standalone", True),
    "redis+cluster": ("cluster", False),
    "rediss+cluster": ("cluster", True),
    "redis+sentinel": ("sentinel", False),
    "rediss+sentinel": ("sentinel", True),
}


def redact_url(url: str) -> str:
    """``url`` with its password (and any ``...password=`` query value) replaced by ``***``.

    Everything up to the last ``@`` is the user information, whatever it contains, so even a
    password with unencoded ``/``, ``?`` or ``#`` is hidden.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "***" if "@" in url else url
    userinfo, at, after = rest.rpartition("@")
    if at:
        user, colon, _ = userinfo.partition(":")
        rest = f"{user}:***@{after}" if colon else f"***@{after}"
    rest = _SECRET_QUERY.sub(r"\1***", rest)
    return f"{scheme}{sep}{rest}"


_SECRET_QUERY = re.compile(r"(?i)([?&][^=&#]*pass[^=&#]*=)[^&#]*")


def _masked_repr(obj: Any, secrets: frozenset[str]) -> str:
    parts = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        shown = "'***'" if f.name in secrets and value is not None else repr(value)
        parts.append(f"{f.name}={shown}")
    return f"{type(obj).__name__}({', '.join(parts)})"


def _seconds(name: str, value: object, *, optional: bool = False) -> None:
    """Check a duration option: a finite number of seconds above zero (or None if optional)."""
    if value is None and optional:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        allowed = " (or None for no timeout)" if optional else ""
        raise ConfigurationError(
            f"{name} must be a finite number of seconds above zero{allowed}, not {value!r}"
        )


def _whole(name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(
            f"{name} must be a whole number of at least {minimum}, not {value!r}"
        )


@final
@dataclass(frozen=True, slots=True, repr=False)
class ConnectionOptions:
    """How to open and set up one connection (the same for every node of a deployment)."""

    username: str | None = None
    password: str | None = None
    db: int = 0
    client_name: str | None = None
    #: 3 asks for RESP3 with ``HELLO 3`` and falls back to RESP2 on servers without HELLO;
    #: 2 speaks RESP2 from the start.
    protocol: Literal[2, 3] = 3
    #: TLS context for ``rediss://``; None means plain TCP.
    ssl_context: ssl.SSLContext | None = None
    #: The name checked against the server certificate; None uses the host being connected.
    ssl_server_hostname: str | None = None
    #: Seconds allowed for TCP connect, TLS handshake and the HELLO/AUTH/SELECT exchange.
    connect_timeout: float = 5.0
    #: Seconds a command may wait for its reply before :class:`~.errors.RedisTimeoutError`
    #: (the connection is then closed). None (the default) leaves timeouts to the caller's
    #: Trio cancel scopes. A blocking command's own timeout is added to it, and a blocking
    #: command that may wait forever (``BLOCK 0``, a timeout of 0) is not bounded by it.
    command_timeout: float | None = None

    def __post_init__(self) -> None:
        _whole("db", self.db, minimum=0)
        if self.protocol not in (2, 3) or isinstance(self.protocol, bool):
            raise ConfigurationError(f"protocol must be 2 or 3, not {self.protocol!r}")
        _seconds("connect_timeout", self.connect_timeout)
        _seconds("command_timeout", self.command_timeout, optional=True)
        for name in ("username", "password", "client_name"):
            _text(name, getattr(self, name))
        if self.client_name is not None and any(c.isspace() for c in self.client_name):
            raise ConfigurationError(
                f"client_name must not contain spaces or line breaks, not {self.client_name!r}"
            )

    def __repr__(self) -> str:
        return _masked_repr(self, frozenset({"password"}))


@final
@dataclass(frozen=True, slots=True, repr=False)
class ClientConfig:
    """Everything a client needs: the topology, its addresses, connection and pool options."""

    topology: Topology = "standalone"
    #: The server (standalone), seed nodes (cluster) or sentinels (sentinel).
    addresses: tuple[Address, ...] = (("127.0.0.1", 6379),)
    connection: ConnectionOptions = field(default_factory=ConnectionOptions)
    #: Sentinel only: the monitored service whose primary to use.
    service_name: str | None = None
    #: Sentinel only: credentials for the sentinels themselves (they often have none).
    sentinel_username: str | None = None
    sentinel_password: str | None = None
    #: Connections kept per node; callers beyond this wait for one to be released.
    pool_size: int = 32
    #: Seconds to wait for a free pooled connection before :class:`~.errors.PoolTimeoutError`.
    pool_timeout: float = 10.0
    #: Reconnect backoff: the first delay after a failed connect, and the cap it doubles to.
    backoff_initial: float = 0.05
    backoff_cap: float = 2.0
    #: Pub/Sub: seconds of silence after which a subscription PINGs its server (0: never),
    #: and seconds the answer may take before the server is taken for dead (a reconnect and
    #: a Gap follow).
    health_check_interval: float = 5.0
    health_check_timeout: float = 5.0

    def __post_init__(self) -> None:
        if not self.addresses:
            raise ConfigurationError("a Redis client needs at least one address")
        for address in self.addresses:
            _check_address(address)
        if self.topology == "sentinel" and not self.service_name:
            raise ConfigurationError("a sentinel client needs the service name of its primary")
        if self.topology == "cluster" and self.connection.db:
            raise ConfigurationError(
                f"a cluster has only database 0, not {self.connection.db} (drop the URL path)"
            )
        if isinstance(self.pool_size, bool) or not isinstance(self.pool_size, int):
            raise ConfigurationError(f"pool_size must be a whole number, not {self.pool_size!r}")
        if self.pool_size < 1:
            raise ConfigurationError(f"pool_size must be at least 1, not {self.pool_size}")
        _seconds("pool_timeout", self.pool_timeout)
        _seconds("backoff_initial", self.backoff_initial)
        _seconds("backoff_cap", self.backoff_cap)
        if self.backoff_cap < self.backoff_initial:
            raise ConfigurationError(
                f"backoff_cap ({self.backoff_cap}) must not be below "
                f"backoff_initial ({self.backoff_initial})"
            )
        _seconds("health_check_timeout", self.health_check_timeout)
        if isinstance(self.health_check_interval, bool) or not (
            isinstance(self.health_check_interval, (int, float))
            and 0 <= self.health_check_interval < math.inf
        ):
            raise ConfigurationError(
                "health_check_interval must be a finite number of seconds >= 0 (0: no check), "
                f"not {self.health_check_interval!r}"
            )

    def __repr__(self) -> str:
        return _masked_repr(self, frozenset({"sentinel_password"}))


def _check_address(address: object) -> None:
    if not (isinstance(address, tuple) and len(address) == 2):
        raise ConfigurationError(f"an address is a (host, port) pair, not {address!r}")
    host, port = address
    if not isinstance(host, str) or not host:
        raise ConfigurationError(f"the host of address {address!r} must be a non-empty str")
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ConfigurationError(f"port {port!r} of host {host!r} is not between 1 and 65535")


_INT_OPTIONS = {"db", "pool_size", "protocol"}
_FLOAT_OPTIONS = {
    "connect_timeout",
    "command_timeout",
    "pool_timeout",
    "backoff_initial",
    "backoff_cap",
    "health_check_interval",
    "health_check_timeout",
}
_STR_OPTIONS = {"client_name", "sentinel_username", "sentinel_password", "ssl_server_hostname"}
_TLS_OPTIONS = {"ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_check_hostname"}


def make_ssl_context(
    *,
    ca_certs: str | None = None,
    certfile: str | None = None,
    keyfile: str | None = None,
    check_hostname: bool = True,
) -> ssl.SSLContext:
    """A client TLS context: verify the server against ``ca_certs`` (or the system store),
    optionally presenting a client certificate."""
    context = ssl.create_default_context(cafile=ca_certs)
    context.check_hostname = check_hostname
    if certfile:
        context.load_cert_chain(certfile, keyfile)
    return context


def _text(name: str, value: object) -> None:
    """``value`` is None or a str the server can receive (valid Unicode); the password is never
    shown in the error."""
    if value is None:
        return
    shown = "***" if name == "password" else repr(value)
    if not isinstance(value, str):
        raise ConfigurationError(f"{name} must be a str, not a {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigurationError(
            f"{name} is not valid Unicode (a lone surrogate?): {shown}"
        ) from None


def _parse_hosts(netloc: str, url: str) -> tuple[Address, ...]:
    addresses: list[Address] = []
    for part in netloc.split(","):
        if not part:
            continue
        host, port = part, "6379"
        if part.startswith("["):
            host, _, rest = part[1:].partition("]")
            if rest.startswith(":"):
                port = rest[1:]
            elif rest:
                raise ConfigurationError(f"bad host {part!r} in Redis URL {redact_url(url)!r}")
        elif part.count(":") == 1:
            host, port = part.split(":")
        elif ":" in part:
            try:
                ipaddress.IPv6Address(part)  # a bare IPv6 address, on the default port
            except ValueError:
                raise ConfigurationError(
                    f"bad host {part!r} in Redis URL {redact_url(url)!r}: one host:port, or an "
                    "IPv6 address in brackets ([::1]:6379)"
                ) from None
        if not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65535:
            raise ConfigurationError(
                f"bad port {port!r} in Redis URL {redact_url(url)!r}: "
                "a port is a number between 1 and 65535"
            )
        addresses.append((host or "127.0.0.1", int(port)))
    return tuple(addresses) or (("127.0.0.1", 6379),)


def _flag(value: str, name: str, url: str) -> bool:
    lowered = value.lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ConfigurationError(
        f"option {name}={value!r} in Redis URL {redact_url(url)!r} is not a boolean"
    )


def parse_url(url: str, **overrides: object) -> ClientConfig:
    """A :class:`ClientConfig` from a URL; keyword ``overrides`` win over the URL's values.

    The overrides take the same names as the query options, plus ``ssl_context``. Every
    mistake raises :class:`~trio_streams.core.errors.ConfigurationError` naming the option and the
    URL, with the password shown as ``***``.
    """
    shown = redact_url(url)
    topology, tls, userinfo, hosts, tail = _split_url(url, shown)
    parsed = urlsplit("x://h/" + tail)
    username, password = _credentials(userinfo)
    options: dict[str, object] = {"username": username, "password": password}
    service_name = _path_options(parsed.path, topology, shown, options)
    tls_args = _query_options(parsed.query, url, shown, options)
    for name, override in overrides.items():
        if name in _TLS_OPTIONS:
            tls_args[name] = override
        else:
            options[name] = override

    if tls_args and not tls and "ssl_context" not in options:
        raise ConfigurationError(f"TLS options in {shown!r} need a rediss:// URL")
    if tls and options.get("ssl_context") is None:
        options["ssl_context"] = make_ssl_context(
            ca_certs=tls_args.get("ssl_ca_certs"),  # type: ignore[arg-type]
            certfile=tls_args.get("ssl_certfile"),  # type: ignore[arg-type]
            keyfile=tls_args.get("ssl_keyfile"),  # type: ignore[arg-type]
            check_hostname=bool(tls_args.get("ssl_check_hostname", True)),
        )

    connection_fields = {f.name for f in dataclasses.fields(ConnectionOptions)}
    client_fields = {f.name for f in dataclasses.fields(ClientConfig)}
    unknown = set(options) - connection_fields - client_fields
    if unknown:
        raise ConfigurationError(f"unknown Redis client option(s): {', '.join(sorted(unknown))}")
    addresses = _parse_hosts(hosts, url)
    if topology == "standalone" and len(addresses) > 1:
        raise ConfigurationError(
            f"Redis URL {shown!r} names {len(addresses)} hosts: a standalone client talks to "
            "one server (several hosts are for redis+cluster:// and redis+sentinel://)"
        )
    try:
        connection = ConnectionOptions(
            **{k: v for k, v in options.items() if k in connection_fields}  # type: ignore[arg-type]
        )
        return ClientConfig(
            topology=topology,
            addresses=addresses,
            connection=connection,
            service_name=service_name,
            **{k: v for k, v in options.items() if k in client_fields},  # type: ignore[arg-type]
        )
    except ConfigurationError as exc:
        raise ConfigurationError(f"{exc} (Redis URL {shown!r})") from None


def _split_url(url: str, shown: str) -> tuple[Topology, bool, str, str, str]:
    """The topology and TLS its scheme says, the user info, the hosts, and what follows them
    (path and query)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in _SCHEMES:
        known = ", ".join(f"{s}://" for s in _SCHEMES)
        raise ConfigurationError(f"Redis URL {shown!r} must start with one of {known}")
    if "#" in url:
        raise ConfigurationError(
            f"Redis URL {shown!r} contains '#': a URL fragment means nothing to Redis "
            "(percent-encode a '#' in a user name or password as %23)"
        )
    topology, tls = _SCHEMES[scheme.lower()]
    # urlsplit does not accept several hosts; split the authority by hand. It ends at the
    # first "/" or "?" after the user info (whose password may hold an unencoded "/").
    query = rest.find("?")
    start = rest.rfind("@", 0, len(rest) if query == -1 else query) + 1
    cut = min(
        (i for i in (rest.find("/", start), rest.find("?", start)) if i != -1), default=len(rest)
    )
    authority, tail = rest[:cut], rest[cut:].lstrip("/")
    userinfo, at, hosts = authority.rpartition("@")
    if not at:
        hosts, userinfo = authority, ""
    return topology, tls, userinfo, hosts, tail


def _credentials(userinfo: str) -> tuple[str | None, str | None]:
    """The user name and password of a URL's user info (``user:password`` or ``password``)."""
    if not userinfo:
        return None, None
    user, colon, secret = userinfo.partition(":")
    if not colon:  # redis://secret@host is the password-only form
        return None, unquote(user)
    return unquote(user) or None, unquote(secret)


def _path_options(
    url_path: str, topology: Topology, shown: str, options: dict[str, object]
) -> str | None:
    """Read the path (``[/service][/db]``): the db goes into ``options``; returns the service
    name of a sentinel URL."""
    path = [unquote(p) for p in url_path.strip("/").split("/") if p]
    service_name: str | None = None
    if topology == "sentinel":
        if not path:
            raise ConfigurationError(f"sentinel URL {shown!r} must name the service: .../service")
        service_name = path.pop(0)
    if len(path) > 1:
        form = ".../service[/db]" if topology == "sentinel" else "...[/db]"
        raise ConfigurationError(
            f"unexpected path {'/'.join(path[1:])!r} in Redis URL {shown!r}: the path is {form}"
        )
    if path:
        if not (path[0].isascii() and path[0].isdigit()):
            raise ConfigurationError(
                f"database {path[0]!r} in Redis URL {shown!r} is not a database number"
            )
        options["db"] = int(path[0])
    return service_name


def _query_options(
    query: str, url: str, shown: str, options: dict[str, object]
) -> dict[str, object]:
    """Read the query's options into ``options``; returns the TLS ones, kept apart."""
    tls_args: dict[str, object] = {}
    given: set[str] = set(options) - {"username", "password"}  # the path's db
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name in given:
            raise ConfigurationError(
                f"option {name!r} is given twice in Redis URL {shown!r}: which one is meant?"
            )
        given.add(name)
        if name in _TLS_OPTIONS:
            tls_args[name] = _flag(value, name, url) if name == "ssl_check_hostname" else value
        else:
            options[name] = _option_value(name, value, shown)
    return tls_args


def _option_value(name: str, value: str, shown: str) -> object:
    """The value of query option ``name`` (not a TLS one), as its type says."""
    if name in _INT_OPTIONS:
        try:
            return int(value)
        except ValueError:
            raise ConfigurationError(
                f"option {name}={value!r} in Redis URL {shown!r} is not a whole number"
            ) from None
    if name in _FLOAT_OPTIONS:
        if name == "command_timeout" and value.lower() in ("", "none"):
            return None
        try:
            return float(value)
        except ValueError:
            raise ConfigurationError(
                f"option {name}={value!r} in Redis URL {shown!r} is not a number of seconds"
            ) from None
    if name in _STR_OPTIONS:
        return value
    raise ConfigurationError(f"unknown option {name!r} in Redis URL {shown!r}")
