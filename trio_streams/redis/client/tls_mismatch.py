"""A URL whose scheme does not match the server: ``rediss://`` to a server that speaks plain
RESP on that port, or ``redis://`` to one that only speaks TLS there.

Neither side says so by itself. A plain server takes a TLS ClientHello for the start of an
inline command and waits for its end, so the handshake would wait out ``connect_timeout``:
when the handshake has no answer after :data:`PROBE_AFTER` seconds, :func:`answers_plain`
asks the same port, on a second connection, for a plain ``PING``; a server that answers in
RESP does not speak TLS there, and the connect fails at once, saying to use ``redis://``. A
TLS server takes a plain command for a broken handshake and closes the connection:
:func:`plain_refused` words that failure with the hint that the server may require TLS.
"""

from __future__ import annotations

import ssl

import trio

from ...core.groups import open_nursery
from .errors import Address, RedisConnectionError, format_address

__all__ = ["PROBE_AFTER", "answers_plain", "plain_refused", "tls_handshake", "wrong_scheme_hint"]

#: Seconds a TLS handshake may go unanswered before the port is asked for plain RESP.
PROBE_AFTER = 0.5

#: OpenSSL's reasons for a handshake that met something else than TLS.
_NOT_TLS_REASONS = frozenset(
    {"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG", "HTTP_REQUEST"}
)
_USE_REDIS = (
    "the server does not speak TLS on this port: check the URL, redis:// instead of rediss://"
)
_MAY_NEED_TLS = "the server may require TLS: check the URL, rediss:// instead of redis://"


def wrong_scheme_hint(error: ssl.SSLError) -> str | None:
    """The hint for a TLS handshake that failed because the server answered in plain text."""
    return _USE_REDIS if error.reason in _NOT_TLS_REASONS else None


async def answers_plain(address: Address) -> bool:
    """Whether ``address`` answers a plain ``PING`` in RESP (``+PONG``, or an error reply such
    as ``-NOAUTH``). A TLS server closes the connection, or sends a TLS alert: False. Cancelled,
    the probe's connection is closed."""
    host, port = address
    try:
        stream = await trio.open_tcp_stream(host, port)
    except OSError:
        return False
    async with stream:
        try:
            await stream.send_all(b"PING\r\n")
            first = await stream.receive_some(1)
        except (OSError, trio.BrokenResourceError):
            return False
    return first[:1] in (b"+", b"-")


async def tls_handshake(stream: trio.SSLStream[trio.SocketStream], address: Address) -> None:
    """``stream``'s TLS handshake; unanswered after :data:`PROBE_AFTER` seconds by a server
    that answers plain RESP on the port, a :class:`RedisConnectionError` saying to use
    ``redis://``. Cancelled, neither the handshake nor the probe goes on."""
    async with open_nursery() as nursery:

        async def probe() -> None:
            await trio.sleep(PROBE_AFTER)
            if await answers_plain(address):
                raise RedisConnectionError(
                    f"cannot connect to {format_address(address)}: the TLS handshake got no "
                    f"answer, and the port answers plain commands; {_USE_REDIS}",
                    address=address,
                )

        nursery.start_soon(probe, name=f"TLS probe of {format_address(address)}")
        await stream.do_handshake()
        nursery.cancel_scope.cancel()


def plain_refused(error: BaseException, address: Address) -> RedisConnectionError:
    """The error for a plain connection closed at its first command: what happened, and that
    the server may require TLS (a reply that is not RESP stays a protocol error)."""
    reason = error.reason if isinstance(error, RedisConnectionError) else str(error)
    if isinstance(error, OSError) and error.strerror:
        reason = error.strerror
    return RedisConnectionError(
        f"cannot connect to {format_address(address)}: the connection was closed at the first "
        f"command ({reason or type(error).__name__}); {_MAY_NEED_TLS}",
        address=address,
    )
