"""Counting what the client writes: each ``Connection._send`` is one write to a socket."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

from trio_streams import RunningApp
from trio_streams.redis.client.connection import Connection


class Writes:
    """Every write the client made while installed, as the commands each one carried."""

    def __init__(self) -> None:
        self.writes: list[list[tuple[bytes, ...]]] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> Writes:
        original = Connection._send

        async def send(connection: Connection, data: bytes) -> None:
            self.writes.append(commands_in(bytes(data)))
            await original(connection, data)

        monkeypatch.setattr(Connection, "_send", send)
        return self

    def with_command(self, name: bytes) -> list[list[tuple[bytes, ...]]]:
        """The writes that carried at least one ``name`` command."""
        return [w for w in self.writes if any(c[0].upper() == name for c in w)]


def commands_in(data: bytes) -> list[tuple[bytes, ...]]:
    """The RESP commands (arrays of bulk strings) in one write."""
    out: list[tuple[bytes, ...]] = []
    at = 0
    while at < len(data):
        assert data[at : at + 1] == b"*", data[at : at + 20]
        end = data.index(b"\r\n", at)
        count = int(data[at + 1 : end])
        at = end + 2
        args: list[bytes] = []
        for _ in range(count):
            end = data.index(b"\r\n", at)
            size = int(data[at + 1 : end])
            args.append(data[end + 2 : end + 2 + size])
            at = end + 2 + size + 2
        out.append(tuple(args))
    return out


def stat(info: Any, name: str) -> int:
    """One counter of an ``INFO`` reply."""
    text = info.decode() if isinstance(info, bytes) else str(info)
    for line in text.splitlines():
        if line.startswith(f"{name}:"):
            return int(line.split(":", 1)[1])
    raise AssertionError(f"no {name} in INFO")


def calls(info: Any, command: str) -> int:
    """How many times ``command`` ran, from ``INFO commandstats`` (0 if never)."""
    text = info.decode() if isinstance(info, bytes) else str(info)
    for line in text.splitlines():
        if line.startswith(f"cmdstat_{command}:"):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


def one_left_outstanding(running: RunningApp) -> Callable[[], Awaitable[bool]]:
    """For ``eventually``: the running app's one subscription has one delivery left outstanding (the
    others settled). The count drops only once a settle has returned, so a flush a settle sent
    has been answered by then."""

    async def check() -> bool:
        await trio.lowlevel.checkpoint()
        (stats,) = running.stats().values()
        return stats.outstanding == 1

    return check
