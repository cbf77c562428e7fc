"""Waits on server-side conditions that no event announces (bounded, never bare sleeps)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from trio_streams.redis.client import RedisClient
from trio_streams.redis.client.subscriber import Gap, Message, Subscription


async def blocked_clients(observer: RedisClient, command: str) -> list[str]:
    """CLIENT LIST lines of clients blocked in ``command`` (flag ``b``)."""
    listing = (await observer.execute("CLIENT", "LIST")).decode()
    found = []
    for line in listing.splitlines():
        fields = dict(part.split("=", 1) for part in line.split(" ") if "=" in part)
        if "b" in fields.get("flags", "") and fields.get("cmd") == command:
            found.append(line)
    return found


async def eventually(
    check: Callable[[], Awaitable[bool]], *, within: float = 5.0, what: str = "a condition"
) -> None:
    """Re-check a server-side condition until it holds; fail after ``within`` seconds."""
    delay = 0.001
    with trio.move_on_after(within):
        while True:
            if await check():
                return
            await trio.sleep(delay)
            delay = min(delay * 2, 0.05)
    raise AssertionError(f"timed out after {within}s waiting for {what}")


async def wait_until_no_blocked_client(observer: RedisClient, command: str) -> None:
    """The server frees a closed client on its next event loop turn; wait for that, bounded."""

    async def none_blocked() -> bool:
        return not await blocked_clients(observer, command)

    await eventually(none_blocked, what=f"no client blocked in {command}")


async def wait_until_blocked(observer: RedisClient, command: str) -> None:
    """Wait until some client is blocked in ``command`` on the server."""

    async def some_blocked() -> bool:
        return bool(await blocked_clients(observer, command))

    await eventually(some_blocked, what=f"a client blocked in {command}")


async def read_until_message(
    subscription: Subscription, items: list[Message | Gap], got_message: trio.Event
) -> None:
    """Collect what a subscription yields (gaps included) until its first message."""
    async for item in subscription:
        items.append(item)
        if isinstance(item, Message):
            got_message.set()
            return
