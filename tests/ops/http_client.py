"""A plain HTTP/1.1 GET over a Trio socket, for the endpoint tests."""

from __future__ import annotations

import trio


async def get(url: str, path: str) -> tuple[int, dict[str, str], bytes]:
    """GET ``path`` from ``url`` (``http://host:port``): status, headers, body."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream(host.strip("[]"), int(port))
        async with stream:
            request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
            await stream.send_all(request.encode())
            data = b""
            while chunk := await stream.receive_some():
                data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode().split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body
