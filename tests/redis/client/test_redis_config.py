"""URL parsing: every form a deployment uses, and a clear error for each mistake."""

from __future__ import annotations

import ssl

import pytest

from trio_streams.core.errors import ConfigurationError
from trio_streams.redis.client import ClientConfig, ConnectionOptions, parse_url


def test_standalone_url_with_user_db_and_options() -> None:
    config = parse_url("redis://app:p%40ss@cache.local:6380/3?client_name=orders&pool_size=4")
    assert config.topology == "standalone"
    assert config.addresses == (("cache.local", 6380),)
    assert config.connection.username == "app"
    assert config.connection.password == "p@ss"
    assert config.connection.db == 3
    assert config.connection.client_name == "orders"
    assert config.pool_size == 4
    assert config.connection.ssl_context is None


def test_password_only_and_defaults() -> None:
    config = parse_url("redis://secret@localhost")
    assert config.connection.username is None
    assert config.connection.password == "secret"
    assert config.addresses == (("localhost", 6379),)
    assert config.connection.protocol == 3


def test_tls_url_builds_a_verifying_context() -> None:
    config = parse_url("rediss://[::1]:6390?ssl_check_hostname=false")
    context = config.connection.ssl_context
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert not context.check_hostname
    assert config.addresses == (("::1", 6390),)


def test_cluster_and_sentinel_urls() -> None:
    cluster = parse_url("redis+cluster://a:7000,b:7001")
    assert cluster.topology == "cluster"
    assert cluster.addresses == (("a", 7000), ("b", 7001))
    sentinel = parse_url("redis+sentinel://s1:26379,s2:26380/orders/2?sentinel_password=x")
    assert sentinel.topology == "sentinel"
    assert sentinel.service_name == "orders"
    assert sentinel.connection.db == 2
    assert sentinel.sentinel_password == "x"


def test_overrides_win_over_the_url() -> None:
    config = parse_url("redis://h/1", db=5, protocol=2, pool_timeout=0.5)
    assert (config.connection.db, config.connection.protocol, config.pool_timeout) == (5, 2, 0.5)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://h", "must start with one of"),
        ("redis://h:port", "bad port 'port'"),
        ("redis://h/zero", "database 'zero'"),
        ("redis://h?pool_size=many", "pool_size='many'"),
        ("redis://h?colour=blue", "unknown option 'colour'"),
        ("redis://h?ssl_ca_certs=/ca.pem", "need a rediss:// URL"),
        ("redis+sentinel://h:26379", "must name the service"),
        ("redis://h?protocol=4", "protocol must be 2 or 3"),
        ("redis://h?pool_size=0", "pool_size must be at least 1"),
        ("rediss://h?ssl_check_hostname=maybe", "is not a boolean"),
    ],
)
def test_bad_urls_say_what_is_wrong(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        parse_url(url)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://h#frag", "contains '#'"),
        ("redis://h:6379/0#frag", "contains '#'"),
        ("redis://h:99999", "bad port '99999'.*between 1 and 65535"),
        ("redis://h:-1", "bad port '-1'"),
        ("redis://h:0", "bad port '0'"),
        ("redis+cluster://a:7000,b:70000", "bad port '70000'"),
        ("redis://[::1]x", "bad host"),
        ("redis://h?connect_timeout=nan", "connect_timeout must be a finite number"),
        ("redis://h?connect_timeout=-1", "connect_timeout must be a finite number"),
        ("redis://h?connect_timeout=inf", "connect_timeout must be a finite number"),
        ("redis://h?pool_timeout=0", "pool_timeout must be a finite number"),
        ("redis://h?command_timeout=nan", "command_timeout must be a finite number"),
        ("redis://h?command_timeout=soon", "command_timeout='soon'"),
        ("redis://h?backoff_initial=1&backoff_cap=0.5", "backoff_cap .* must not be below"),
        ("redis://h/0/extra", "unexpected path 'extra'"),
        ("redis://h/1/2/3", "unexpected path '2/3'"),
        ("redis+sentinel://s:26379/svc/1/extra", "unexpected path 'extra'"),
        ("redis://h/-1", "database '-1'"),
        ("redis+cluster://h:7000/2", "a cluster has only database 0"),
    ],
)
def test_loose_urls_are_refused_with_a_clear_error(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        parse_url(url)


def test_command_timeout_is_an_option_and_off_by_default() -> None:
    assert parse_url("redis://h").connection.command_timeout is None
    assert parse_url("redis://h?command_timeout=2.5").connection.command_timeout == 2.5
    assert parse_url("redis://h?command_timeout=none").connection.command_timeout is None
    assert parse_url("redis://h", command_timeout=1).connection.command_timeout == 1


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: ConnectionOptions(connect_timeout=float("nan")), "connect_timeout"),
        (lambda: ConnectionOptions(connect_timeout=-1), "connect_timeout"),
        (lambda: ConnectionOptions(command_timeout=0), "command_timeout"),
        (lambda: ConnectionOptions(db=-1), "db must be"),
        (lambda: ConnectionOptions(db=True), "db must be"),
        (lambda: ClientConfig(addresses=(("h", 99999),)), "between 1 and 65535"),
        (lambda: ClientConfig(addresses=(("h", -1),)), "between 1 and 65535"),
        (lambda: ClientConfig(addresses=(("", 6379),)), "non-empty"),
        (lambda: ClientConfig(backoff_initial=float("nan")), "backoff_initial"),
    ],
)
def test_options_built_directly_are_checked_too(build: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        build()  # type: ignore[operator]
