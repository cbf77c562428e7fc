"""Publishing to a stream file from a script, without an app: :class:`FilePublisher`.

::

    async with trio_streams.file.open_publisher("orders.ss") as publisher:
        receipt = await publisher.publish("orders", {"id": 1}, headers={"source": "import"})

Messages are encoded as an app's ``broker.publish`` encodes them (bytes as they are, ``str`` as
UTF-8, anything else as JSON; headers in the same envelope), so the app's handlers read them as
if the app had published them. Each ``publish`` appends and writes the message out before it
returns, while any number of apps and other publishers write the same file (see
:mod:`.writer`); the :class:`~trio_streams.file.writer.Receipt` says where it went. When it
reaches the disk is the publisher's ``durability`` (:mod:`.durability`); closing syncs what is
left. The publisher shares the process's writer of the file with the apps of this process.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import trio

from ..core.codec import encode
from .durability import DEFAULT_DURABILITY, Durability, check_durability
from .envelope import seal
from .errors import StreamFileNotFoundError, WriterClosedError
from .format import DEFAULT_BEACON_INTERVAL
from .keys import check_stream_key
from .writer import Receipt, WriterHandle, WriterRegistry, writers

__all__ = ["FilePublisher", "open_publisher"]

_NO_HEADERS: Mapping[str, str] = {}


class FilePublisher(trio.abc.AsyncResource):
    """Publishes messages to the stream file at ``path``; close it (or use ``async with``).

    The file is created (with ``beacon_interval``) unless ``existing_only`` is set, in which
    case a missing file is a :class:`~trio_streams.file.errors.StreamFileNotFoundError`. With
    ``end_with_eos`` closing writes an end-of-stream message (the next writer to append
    overwrites it).

    ``durability`` is the writer's (see :class:`~trio_streams.file.writer.StreamWriter`):
    ``"publish"`` returns each receipt once its message is on disk (one sync per
    ``publish_many``); ``"interval"`` (the default) syncs at most ``sync_interval`` seconds
    after a publish while :meth:`keep_synced` runs in a nursery, else at the first publish that
    long after the last sync, and at close; ``"close"`` only at close.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        beacon_interval: int = DEFAULT_BEACON_INTERVAL,
        existing_only: bool = False,
        end_with_eos: bool = False,
        registry: WriterRegistry | None = None,
        durability: Durability = DEFAULT_DURABILITY,
        sync_interval: float | None = None,
    ) -> None:
        self.path = os.fspath(path)
        check_durability(durability, sync_interval)
        if existing_only and not os.path.exists(self.path):
            raise StreamFileNotFoundError(
                "no such stream file, and the publisher has existing_only=True", path=self.path
            )
        self._end_with_eos = end_with_eos
        self._handle: WriterHandle | None = (registry or writers).acquire(
            self.path,
            beacon_interval=beacon_interval,
            durability=durability,
            sync_interval=sync_interval,
        )
        self._keys: set[str] = set()

    def _writer(self) -> WriterHandle:
        if self._handle is None:
            raise WriterClosedError("publish through a closed publisher", path=self.path)
        return self._handle

    def _payload(self, key: str, message: Any, headers: Mapping[str, str] | None) -> bytes:
        if key not in self._keys:
            check_stream_key(key)
            self._keys.add(key)
        return seal(encode(message), headers or _NO_HEADERS)

    async def publish(
        self,
        key: str,
        message: Any,
        *,
        headers: Mapping[str, str] | None = None,
        timestamp_ms: int | None = None,
    ) -> Receipt:
        """Append ``message`` to stream ``key`` and write it out; returns its receipt.

        ``timestamp_ms`` defaults to now. Cancellable while another writer appends (until the
        file's lock is taken); a cancelled publish appended nothing.
        """
        writer = self._writer()
        return await writer.apublish(key, self._payload(key, message, headers), timestamp_ms)

    async def publish_many(
        self,
        key: str,
        messages: Iterable[Any],
        *,
        headers: Mapping[str, str] | None = None,
    ) -> list[Receipt]:
        """Append every message of ``messages`` to stream ``key`` in one append (no other
        writer's message comes between them); returns their receipts, in order."""
        writer = self._writer()
        items = [(key, self._payload(key, message, headers), None) for message in messages]
        return await writer.apublish_many(items)

    async def keep_synced(self) -> None:
        """Sync what this process published to the file at most ``sync_interval`` seconds after
        it, until cancelled (see :meth:`StreamWriter.keep_synced
        <trio_streams.file.writer.StreamWriter.keep_synced>`): run it in a nursery and cancel it
        before closing the publisher."""
        await self._writer().keep_synced()

    async def aclose(self) -> None:
        """Write what is left, fsync and let go of the file (shielded)."""
        handle, self._handle = self._handle, None
        if handle is not None:
            await handle.aclose(eos=self._end_with_eos)


def open_publisher(path: str | os.PathLike[str], **options: Any) -> FilePublisher:
    """A :class:`FilePublisher` on ``path`` (``options`` are its keyword arguments), for
    ``async with``."""
    return FilePublisher(path, **options)
