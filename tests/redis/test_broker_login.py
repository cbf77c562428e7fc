"""A ``RedisBroker`` whose login the server refuses fails its connect with that refusal: it
is not taken for a server that keeps its command table from the user."""

from __future__ import annotations

import logging

import pytest
import trio

from tests.redis_servers import ACL_PASSWORD, ACL_USER, RedisServer
from tests.support import serving
from trio_streams import App
from trio_streams.redis import RedisBroker
from trio_streams.redis.client import AuthenticationError


async def test_a_wrong_password_fails_the_connect_as_itself_with_no_word_of_command(
    acl_redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    server = acl_redis_server
    app = App("svc")
    app.broker(RedisBroker(f"redis://{ACL_USER}:wrongpw@{server.host}:{server.port}"))
    with caplog.at_level(logging.WARNING), pytest.raises(AuthenticationError), trio.fail_after(10):
        await app.serve()  # the start fails: the error as itself
    assert "COMMAND" not in caplog.text


async def test_the_right_password_connects(acl_redis_server: RedisServer) -> None:
    server = acl_redis_server
    app = App("svc")
    broker = app.broker(
        RedisBroker(f"redis://{ACL_USER}:{ACL_PASSWORD}@{server.host}:{server.port}")
    )
    async with serving(app):
        await broker.publish("app:orders", b"1")
