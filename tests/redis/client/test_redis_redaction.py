"""Credentials never appear in what the client shows: every error the tests can provoke with
a password in the URL, and the repr of every object that holds one, is searched for it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager

import pytest

from tests.redis_servers import ACL_USER, RedisServer, redis_server
from trio_streams.core.errors import ConfigurationError
from trio_streams.redis.client import (
    AuthenticationError,
    ConnectionOptions,
    RedisError,
    connect,
    open_connection,
    parse_url,
)
from trio_streams.redis.client.connection import mask_echoed_secret

SECRET = "s3cr3t-Pa55"


def chain(error: BaseException) -> Iterator[BaseException]:
    """The error and every cause or context behind it."""
    seen: set[int] = set()
    stack = [error]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        stack.extend(e for e in (current.__cause__, current.__context__) if e is not None)
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)


def assert_no_secret(what: object) -> None:
    texts = [str(what), repr(what)]
    if isinstance(what, BaseException):
        for error in chain(what):
            texts += [str(error), repr(error), *map(str, error.args)]
    for text in texts:
        assert SECRET not in text, text


BAD_URLS = [
    f"http://app:{SECRET}@h",
    f"redis://app:{SECRET}@h:port",
    f"redis://app:{SECRET}@h:99999",
    f"redis://{SECRET}@h/zero",
    f"redis://app:{SECRET}@h/0/extra",
    f"redis://app:{SECRET}@h#frag",
    f"redis://app:{SECRET[:4]}#{SECRET[4:]}@h",  # an unencoded '#' inside the password
    f"redis://app:{SECRET}@h?pool_size=many",
    f"redis://app:{SECRET}@h?colour=blue",
    f"redis://app:{SECRET}@h?password={SECRET}",
    f"redis://app:{SECRET}@h?ssl_ca_certs=/ca.pem",
    f"redis://app:{SECRET}@h?protocol=4",
    f"redis://app:{SECRET}@h?connect_timeout=nan",
    f"redis://app:{SECRET}@h?command_timeout=-1",
    f"rediss://app:{SECRET}@h?ssl_check_hostname=maybe",
    f"redis+sentinel://app:{SECRET}@s:26379",
    f"redis+sentinel://s:26379/svc?sentinel_password={SECRET}&pool_size=0",
    f"redis+cluster://app:{SECRET}@a:7000,b:port",
    f"redis+cluster://app:{SECRET}@a:7000/3",
]


@pytest.mark.parametrize("url", BAD_URLS)
def test_url_errors_do_not_show_the_password(url: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_url(url)
    assert_no_secret(caught.value)
    assert "***" in str(caught.value) or "@" not in url.split("?")[0]


def test_configs_and_clients_do_not_show_the_password() -> None:
    urls = [
        f"redis://app:{SECRET}@h:6379/1",
        f"redis://{SECRET}@h",
        f"redis+cluster://app:{SECRET}@a:7000",
        f"redis+sentinel://app:{SECRET}@s:26379/svc?sentinel_password={SECRET}",
    ]
    for url in urls:
        config = parse_url(url)
        assert_no_secret(config)
        assert_no_secret(config.connection)
        client = connect(url)
        assert_no_secret(client)
    assert_no_secret(ConnectionOptions(password=SECRET))


async def test_errors_from_servers_do_not_show_the_password(
    acl_redis_server: RedisServer, redis_server: RedisServer
) -> None:
    errors: list[RedisError] = []
    seen: list[object] = []
    port = acl_redis_server.port
    for protocol in (3, 2):
        # A wrong password (the secret is the wrong one).
        async with connect(f"redis://{ACL_USER}:{SECRET}@127.0.0.1:{port}", protocol=protocol) as c:
            seen.append(c)
            with pytest.raises(RedisError) as caught:
                await c.execute("PING")
            errors.append(caught.value)
        if protocol == 2:  # AUTH to a server without a password: "AUTH <password> called..."
            async with connect(f"redis://{SECRET}@{redis_server.url[8:]}", protocol=2) as c:
                with pytest.raises(RedisError) as caught:
                    await c.execute("PING")
                errors.append(caught.value)
        # A bad database behind a password.
        async with connect(
            f"redis://{ACL_USER}:{SECRET}@127.0.0.1:{port}/99", protocol=protocol
        ) as c:
            with pytest.raises(RedisError) as caught:
                await c.execute("PING")
            errors.append(caught.value)
    # A server that has no HELLO echoes the arguments of the unknown command back.
    with redis_server_without_hello() as old:
        async with connect(f"redis://{SECRET}@127.0.0.1:{old.port}") as c:
            with pytest.raises(RedisError) as caught:
                await c.execute("PING")
            errors.append(caught.value)
        with pytest.raises(RedisError) as caught:
            await open_connection(old.address, ConnectionOptions(password=SECRET, db=99))
        errors.append(caught.value)
    # Servers that are not there, for each topology.
    dead = redis_server.port
    redis_server.kill()
    for url in (
        f"redis://app:{SECRET}@127.0.0.1:{dead}",
        f"redis+cluster://app:{SECRET}@127.0.0.1:{dead}",
        f"redis+sentinel://app:{SECRET}@127.0.0.1:{dead}/svc?sentinel_password={SECRET}",
    ):
        async with connect(url) as c:
            seen.append(c)
            with pytest.raises(RedisError) as caught:
                await c.execute("PING")
            errors.append(caught.value)
            with pytest.raises(RedisError) as caught:
                async with c.dedicated_connection():
                    pass
            errors.append(caught.value)
    assert len(errors) == 13
    for error in errors:
        assert_no_secret(error)
    for thing in seen:
        assert_no_secret(thing)


def redis_server_without_hello() -> AbstractContextManager[RedisServer]:
    return redis_server("--rename-command", "HELLO", "", "--requirepass", "other")


@pytest.mark.parametrize("password", ["pass", "password", "word", "username", "WRONG"])
async def test_a_wrong_password_masks_the_password_not_the_words_of_the_servers_answer(
    acl_redis_server: RedisServer, password: str
) -> None:
    url = f"redis://{ACL_USER}:{password}@127.0.0.1:{acl_redis_server.port}"
    async with connect(url) as client:
        with pytest.raises(AuthenticationError) as caught:
            await client.execute("PING")
    assert str(caught.value).startswith("WRONGPASS invalid username-password pair"), caught.value
    assert "***" not in str(caught.value)


async def test_a_wrong_password_that_is_a_secret_is_never_shown_and_the_answer_is_whole(
    acl_redis_server: RedisServer,
) -> None:
    url = f"redis://{ACL_USER}:{SECRET}@127.0.0.1:{acl_redis_server.port}"
    async with connect(url) as client:
        with pytest.raises(AuthenticationError) as caught:
            await client.execute("PING")
    assert "WRONGPASS invalid username-password pair" in str(caught.value)
    assert_no_secret(caught.value)


@pytest.mark.parametrize(
    ("message", "secret", "masked"),
    [
        (
            "ERR unknown command 'HELLO', with args beginning with: '3' 'AUTH' 'app' 'pass' ",
            "pass",
            "ERR unknown command 'HELLO', with args beginning with: '3' 'AUTH' 'app' '***' ",
        ),
        (  # the server lists 128 characters of arguments: the password's start is masked too
            "ERR unknown command 'HELLO', with args beginning with: '3' 'AUTH' 'app' 'abcd' ",
            "abcdefgh" * 30,
            "ERR unknown command 'HELLO', with args beginning with: '3' 'AUTH' 'app' '***' ",
        ),
        (
            "WRONGPASS invalid username-password pair or user is disabled.",
            "pass",
            "WRONGPASS invalid username-password pair or user is disabled.",
        ),
        ("ERR 'password' is not 'pass'", "pass", "ERR 'password' is not '***'"),
    ],
)
def test_an_echoed_password_is_masked_as_an_argument_and_nothing_else(
    message: str, secret: str, masked: str
) -> None:
    assert mask_echoed_secret(message, secret) == masked
