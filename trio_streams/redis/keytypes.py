"""Keys that hold another type than a subscription uses them as, told as one typed error.

Redis keys share one namespace: a stream key may have been filled as a string, a list or a
hash by another program, and the server then answers ``WRONGTYPE`` without naming the key.
Every Redis subscription checks the keys it uses at open (a ``TYPE`` each) or turns a
``WRONGTYPE`` reply into :class:`~trio_streams.core.errors.WrongKeyType` naming the key, what it
holds, and what the subscription wanted it for, so the start fails with one line an operator
can act on.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..core.destinations import Destination, DestinationKind
from ..core.errors import WrongKeyType
from .client import RedisClient
from .client.errors import RedisError
from .wire import text

if TYPE_CHECKING:
    from ..core.host import SubscriptionHost

__all__ = [
    "check_dead_letter_key",
    "check_key_type",
    "check_publisher_keys",
    "wrong_key_type",
    "wrong_type_found",
]

#: The type of key each kind of destination is written to (a channel is no key).
_KEY_TYPES = {DestinationKind.STREAM: "stream", DestinationKind.LIST: "list"}


def wrong_key_type(label: str, key: str, found: str, expected: str, role: str) -> WrongKeyType:
    """The error for ``key`` holding a ``found`` where subscription ``label`` uses it ``role``
    (``"as a work queue"``) and needs a ``expected``."""
    return WrongKeyType(
        f"{label}: key {key!r} holds a {found}, not a {expected}, so it cannot be used {role}; "
        "use another key, or delete this one"
    )


async def check_key_type(
    client: RedisClient, key: str, expected: str, *, label: str, role: str
) -> None:
    """Refuse, with :class:`~trio_streams.core.errors.WrongKeyType`, a ``key`` that exists and holds
    something else than ``expected`` (a ``TYPE`` name: ``stream``, ``list``, ``zset``...).

    One ``TYPE`` command; cancelled, it raises nothing of its own (the key is left unchecked)."""
    found = text(await client.execute("TYPE", key))
    if found not in (expected, "none"):
        raise wrong_key_type(label, key, found, expected, role)


async def check_dead_letter_key(
    client: RedisClient, host: SubscriptionHost, expected: str, *, label: str
) -> None:
    """Refuse, with :class:`~trio_streams.core.errors.WrongKeyType`, a ``dead_letter=`` key of the
    subscription that exists and holds something else than ``expected``: found at the start,
    not at a message's last attempt, when the letter could not be written. One ``TYPE``
    command, none without a dead letter; cancelled, the key is left unchecked."""
    destination = host.options.policy.dead_letter
    if destination is None:
        return
    await check_key_type(
        client, destination, expected, label=label, role="as the dead letters of the subscription"
    )


async def check_publisher_keys(
    client: RedisClient, destinations: Iterable[tuple[str, Destination]]
) -> None:
    """Refuse, with :class:`~trio_streams.core.errors.WrongKeyType`, a stream or list that a
    subscription's handler publishes its return value to (``(label, destination)`` pairs),
    when its key holds another type: found at the start, not at the first message handled.
    One ``TYPE`` command per key; cancelled, the rest are left unchecked."""
    checked: set[str] = set()
    for label, destination in destinations:
        expected = _KEY_TYPES.get(destination.kind)
        if expected is None or destination.name in checked:
            continue
        checked.add(destination.name)
        await check_key_type(
            client, destination.name, expected, label=label,
            role=f"as the {expected} its handler publishes to",
        )  # fmt: skip


async def wrong_type_found(
    client: RedisClient, key: str, expected: str, *, label: str, role: str
) -> WrongKeyType:
    """The error to raise for a ``WRONGTYPE`` reply about ``key``: what it holds is asked of
    the server (``value of another type`` if that fails, or if it changed back meanwhile).
    Cancelled while asking, it raises the cancellation, not the error."""
    try:
        found = text(await client.execute("TYPE", key))
    except RedisError:
        found = "value of another type"
    if found in (expected, "none"):
        found = "value of another type"
    return wrong_key_type(label, key, found, expected, role)
