"""``trio-streams publish URL KEY [PAYLOAD]``: messages to Redis, as an app's broker writes them.

The URL is one :class:`~trio_streams.redis.RedisBroker` takes (``redis://``, ``rediss://``,
``redis+cluster://``, ``redis+sentinel://``), and the messages go out through that broker's own
transport, connected as an app connects it, so they are what an app's ``broker.publish``
writes and its handlers receive them, headers included:

- by default a stream entry: one ``XADD`` (the payload in ``_payload``, each header in
  ``h:<name>``: :mod:`trio_streams.redis.wire`); the receipt is ``KEY id:MS-SEQ``, the entry's id;
- ``--list``: the list/Pub/Sub frame (:mod:`trio_streams.redis.frames`) pushed at the end a
  list's consumers do not take from by default (``RPUSH``), as
  ``broker.publish(Destination.list(KEY), ...)`` does; the receipt is ``KEY length:N``, the
  list's length after the push;
- ``--channel``: one ``PUBLISH`` (``SPUBLISH`` with ``--sharded``) of that frame, as
  ``Destination.channel(KEY)`` is; the receipt is ``KEY receivers:N``, the subscribers it
  reached (in a cluster, a classic channel's count is of the node that took it). A channel
  some message reached nobody on is said once, on stderr, as a note: Pub/Sub keeps nothing.

Every message is checked before the server is asked anything; then each stream or list key is
asked its type (one ``TYPE`` each; skipped for a user the ACL does not allow it), so a key that
holds something else is refused before anything is published. Then the messages go out one by
one, in order, each receipt printed as it comes; an error stops the rest. The error is one line,
``cannot publish to URL: CAUSE`` (the password masked), exit 1; below it, how many messages
went out before it. ``seq`` and ``timestamp_ms`` of a ``--ndjson`` line are not used: the
server gives each entry its id.

Ctrl-C cancels the command in flight (its outcome unknown, as for any command a connection was
sending when it was cut) and exits 130; nothing after it is sent.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import trio

from ..core.destinations import Destination, DestinationKind
from ..core.errors import ConfigurationError, TrioStreamsError, WrongKeyType
from ..core.extras import require
from ..core.positions import Position
from ..redis.broker import RedisBroker, RedisTransport
from ..redis.client import NoPermissionError, RedisClient, redact_url
from ..redis.wire import text
from .args import bad_command_line, error_line, error_notes, note_line
from .publish_input import Outgoing, read_messages

__all__ = ["publish_to_redis"]

#: The type of key each kind of destination writes to (a channel is no key).
_KEY_TYPES = {DestinationKind.STREAM: "stream", DestinationKind.LIST: "list"}
#: What to say of a key that holds the other kind (found, expected).
_ADVICE = {
    ("list", "stream"): "; --list pushes to a list",
    ("stream", "list"): "; without --list, publish adds an entry to a stream",
}


@dataclass
class _Report:
    """What went out: how many messages, and per channel how many reached no subscriber."""

    total: int
    published: int = 0
    unheard: dict[Destination, list[int]] = field(default_factory=dict)

    def sent(self, destination: Destination, receipt: Any) -> str:
        """The receipt line of a message just published to ``destination``."""
        self.published += 1
        if isinstance(receipt, Position):
            return f"{destination.name} id:{receipt.entry_id}"
        if destination.is_channel:
            counts = self.unheard.setdefault(destination, [0, 0])
            counts[0] += receipt == 0
            counts[1] += 1
            return f"{destination.name} receivers:{receipt}"
        return f"{destination.name} length:{receipt}"

    def notes(self) -> list[str]:
        """One note per channel some message reached nobody on."""
        lines = []
        for destination, (nobody, sent) in self.unheard.items():
            if not nobody:
                continue
            sharded = destination.kind is DestinationKind.SHARD_CHANNEL
            kind = "sharded channel" if sharded else "channel"
            what = "the message" if sent == 1 else f"{nobody} of its {sent} messages"
            lines.append(
                f"nobody was subscribed to {kind} {destination.name!r}: {what} reached no one "
                "(Pub/Sub keeps nothing)"
            )
        return lines

    def partial(self) -> list[str]:
        """What an error line adds when some messages went out before it."""
        if not self.published:
            return []
        verb = "was" if self.published == 1 else "were"
        return [
            f"{self.published} of the {self.total} messages {verb} published before it (their "
            "receipts are on stdout); the others were not"
        ]


def publish_to_redis(args: argparse.Namespace) -> int:
    """Publish the command line's messages to the Redis URL ``args.target``; the exit status."""
    if args.beacon_interval is not None:
        bad_command_line(
            f"--beacon-interval is for a stream file target; {redact_url(args.target)} is "
            "Redis, which has no beacons: leave it out"
        )
    require("redis", "a Redis target")  # hiredis: refused before any input is read
    broker = RedisBroker(args.target)

    def destination(key: str) -> Destination:
        try:
            key.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ConfigurationError(f"key {key!r} is not UTF-8 text ({exc.reason})") from None
        if args.list:
            return broker.check_destination(Destination.list(key))
        if args.channel:
            return broker.check_destination(Destination.channel(key, sharded=args.sharded))
        return broker.check_destination(Destination(key))

    messages = read_messages(args, destination)
    sends = [(destination(message.key), message) for message in messages]
    report = _Report(total=len(sends))
    try:
        with _warnings_as_lines():
            trio.run(_publish, broker, sends, report)
    except TrioStreamsError as exc:
        sys.stdout.flush()  # the receipts of what went out come first
        sys.stderr.write(error_line(f"cannot publish to {redact_url(args.target)}: {exc}") + "\n")
        for note in [*error_notes(exc), *report.partial()]:
            sys.stderr.write(f"  {note}\n")
        return 1
    sys.stdout.flush()
    for note in report.notes():
        sys.stderr.write(note_line(note) + "\n")
    return 0


@contextmanager
def _warnings_as_lines() -> Iterator[None]:
    """What trio-streams logs at WARNING while publishing (a server that does not let this user
    read its command table, say) as the command's own lines on stderr, ``trio-streams publish:
    warning: ...``, not as bare log records."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter(note_line("%(message)s", label="warning")))
    logger = logging.getLogger("trio_streams")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


async def _publish(
    broker: RedisBroker, sends: Sequence[tuple[Destination, Outgoing]], report: _Report
) -> None:
    """Connect the broker, check the keys' types, then publish each message in order."""
    async with broker.connect() as transport:
        if not isinstance(transport, RedisTransport):  # pragma: no cover - the broker's own
            raise TypeError(f"{broker!r} connected {transport!r}, not a RedisTransport")
        await _check_key_types(transport.client, [destination for destination, _ in sends])
        for destination, message in sends:
            receipt = await _send(transport, destination, message)
            sys.stdout.write(report.sent(destination, receipt) + "\n")


async def _send(transport: RedisTransport, destination: Destination, message: Outgoing) -> Any:
    """What ``Broker.publish`` does with an encoded message, without an app's middlewares: a
    stream through the transport's ``publish``, a list or channel through ``publish_to``."""
    if destination.kind is DestinationKind.STREAM:
        return await transport.publish(destination.name, message.payload, message.headers)
    return await transport.publish_to(destination, message.payload, message.headers)


async def _check_key_types(client: RedisClient, destinations: Sequence[Destination]) -> None:
    """Refuse, with :class:`~trio_streams.core.errors.WrongKeyType`, a stream or list key that
    holds another type. A user the ACL does not allow ``TYPE`` is not checked: the publish
    itself then says ``WRONGTYPE``. Cancelled, the rest are left unchecked."""
    checked: set[str] = set()
    for destination in destinations:
        expected = _KEY_TYPES.get(destination.kind)
        if expected is None or destination.name in checked:
            continue
        checked.add(destination.name)
        try:
            found = text(await client.execute("TYPE", destination.name))
        except NoPermissionError:
            return  # a user that may only write: the publish says WRONGTYPE, if it comes to it
        if found not in (expected, "none"):
            raise WrongKeyType(
                f"key {destination.name!r} holds a {found}, not a {expected}"
                + _ADVICE.get((found, expected), "")
            )
