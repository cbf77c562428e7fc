"""A URL whose scheme does not match the server fails fast with a line that says so:
``rediss://`` to a server that speaks plain RESP on the port, ``redis://`` to a TLS-only one.
Real servers (the TLS one with trustme certificates), real sockets, loopback only."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import trio

from tests.cli.support import cli, stderr_lines
from tests.redis_servers import RedisServer
from trio_streams.redis.client import RedisConnectionError, RedisTimeoutError, connect

#: Far longer than any test waits: only the fast refusal can end these connects in time.
_PATIENT = "connect_timeout=120"


async def _refusal(url: str) -> RedisConnectionError:
    with trio.fail_after(30):
        async with connect(url) as client:
            with pytest.raises(RedisConnectionError) as refused:
                await client.execute("PING")
    return refused.value


async def test_a_tls_handshake_against_a_server_that_does_not_speak_tls_fails_fast(
    redis_server: RedisServer,
) -> None:
    error = await _refusal(f"rediss://127.0.0.1:{redis_server.port}?{_PATIENT}")
    assert not isinstance(error, RedisTimeoutError)
    assert f"127.0.0.1:{redis_server.port}" in str(error)
    assert "the server does not speak TLS on this port" in str(error)
    assert "redis:// instead of rediss://" in str(error)


async def test_a_plain_connection_to_a_tls_only_server_says_the_server_may_require_tls(
    tls_redis_server: RedisServer,
) -> None:
    error = await _refusal(f"redis://127.0.0.1:{tls_redis_server.port}?{_PATIENT}")
    assert f"127.0.0.1:{tls_redis_server.port}" in str(error)
    assert "the server may require TLS" in str(error)
    assert "rediss:// instead of redis://" in str(error)


async def test_a_tls_handshake_answered_in_plain_text_says_to_use_redis() -> None:
    # A server that answers the ClientHello at once with a RESP error, as a plain Redis does
    # when the ClientHello happens to hold a newline.
    async def answer(stream: trio.SocketStream) -> None:
        async with stream:
            await stream.receive_some(65536)
            await stream.send_all(b"-ERR unknown command\r\n")
            await stream.receive_some(65536)

    async with trio.open_nursery() as nursery:
        [listener] = await nursery.start(partial(trio.serve_tcp, answer, 0, host="127.0.0.1"))
        port = listener.socket.getsockname()[1]
        error = await _refusal(f"rediss://127.0.0.1:{port}?{_PATIENT}")
        nursery.cancel_scope.cancel()
    assert "TLS handshake failed" in str(error)
    assert "redis:// instead of rediss://" in str(error)


async def test_a_tls_server_slow_to_answer_the_handshake_is_not_taken_for_a_plain_one(
    tls_redis_server: RedisServer,
) -> None:
    tls = tls_redis_server.tls
    assert tls is not None
    url = (
        f"rediss://127.0.0.1:{tls_redis_server.port}?ssl_ca_certs={tls.ca}"
        f"&ssl_certfile={tls.client_cert}&ssl_keyfile={tls.client_key}&connect_timeout=2"
    )
    tls_redis_server.pause()  # accepts (the kernel does), answers nothing: neither TLS nor RESP
    try:
        error = await _refusal(url)
    finally:
        tls_redis_server.resume()
    assert isinstance(error, RedisTimeoutError)
    assert "redis://" not in str(error)


async def test_a_tls_server_still_connects_over_tls(tls_redis_server: RedisServer) -> None:
    async with connect(tls_redis_server.url) as client:
        assert await client.execute("PING") == b"PONG"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("scheme", "fixture", "says"),
    [
        ("rediss", "redis_server", "redis:// instead of rediss://"),
        ("redis", "tls_redis_server", "the server may require TLS"),
    ],
)
def test_record_with_a_url_of_the_wrong_scheme_says_which_in_one_line_with_status_1(
    request: pytest.FixtureRequest, tmp_path: Path, scheme: str, fixture: str, says: str
) -> None:
    server: RedisServer = request.getfixturevalue(fixture)
    url = f"{scheme}://127.0.0.1:{server.port}?{_PATIENT}"
    result = cli("record", url, "orders", "--to", str(tmp_path / "orders.ss"))
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    [line] = stderr_lines(result)
    assert says in line, line
