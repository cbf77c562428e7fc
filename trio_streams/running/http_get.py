"""One plain HTTP/1.1 ``GET`` over a Trio stream: what ``top`` and the supervisor read.

Both read small answers from endpoints of this package (``/metrics``, ``/readyz``) over a
connection of their own (``Connection: close``), so reading to the end of the stream is the
whole answer; no client library is needed for that.
"""

from __future__ import annotations

import trio

__all__ = ["NotHttp", "get_over"]


class NotHttp(ValueError):
    """The peer answered something that is not an HTTP response."""


async def get_over(stream: trio.abc.Stream, host: str, path: str) -> tuple[int, bytes]:
    """Send ``GET path`` on ``stream`` and read the answer to its end: status and body.
    ``stream`` is closed on return. Cancelled, the connection is closed mid-read."""
    async with stream:
        request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        await stream.send_all(request.encode())
        chunks = []
        while chunk := await stream.receive_some():
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    try:
        return int(head.split(b" ", 2)[1]), body
    except (IndexError, ValueError):
        raise NotHttp(f"GET {path} did not answer HTTP") from None
