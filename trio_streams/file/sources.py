"""``FileStream``: what a stream-file subscription reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, final

from ..core.description import SourceDescription
from ..core.errors import ConfigurationError
from ..core.positions import Position
from ..core.sources import NamedSource
from ..core.transport import check_source_args
from ..memory.sources import MemoryStream
from .durable import check_consumer_name
from .format import INTERNAL_KEY, WILDCARD_KEY, key_is_valid

__all__ = ["FileStream", "check_stream_key"]


@final
@dataclass(frozen=True, slots=True, init=False, repr=False)
class FileStream(NamedSource):
    """One or more stream keys of a stream file.

    - ``FileStream("orders")`` follows the live tail: only messages written from now on.
    - ``.replay()`` reads from the beginning and ends after the last message (or at an
      end-of-stream message), never before every message read was delivered.
    - ``start_at=FilePosition...`` starts somewhere else (a live subscription then follows).
    - ``FileStream("a", "b")`` reads several keys, in the order they were written.
    - ``durable="name"``: a resumable consumer. It stores how far it got beside the file and,
      after a restart, resumes there instead of at ``start_at``: at-least-once, nothing skipped.
    - ``durable=True``: the same, named after the app and the subscription that run it
      (``<app>.<subscription>``, :func:`~.durable.consumer_name_of`), when the app starts it:
      what a plain name subscribes to (``@broker.subscriber("orders")``).

    Under ``app.test()`` it runs as the ``MemoryStream`` of the same keys, start and mode (a
    durable name has nothing to resume in memory and is ignored there).
    """

    label = "FileStream"
    shown = (("start_at", None), ("durable", None))

    keys: tuple[str, ...]
    replaying: bool
    start_at: Position | None
    #: Its durable consumer's name; True: named after the app and subscription at start.
    durable: str | Literal[True] | None

    def __init__(
        self,
        *keys: str,
        start_at: Position | None = None,
        durable: str | bool | None = None,
        replaying: bool = False,
    ) -> None:
        check_source_args("FileStream", keys, start_at)
        for key in keys:
            check_stream_key(key)
        if durable is False:
            durable = None
        elif durable is not None and durable is not True:
            if not isinstance(durable, str):
                raise ConfigurationError(
                    f"durable takes a consumer name (a str) or True (one named after the app "
                    f"and subscription), not {durable!r}"
                )
            check_consumer_name(durable)
        object.__setattr__(self, "keys", tuple(keys))
        object.__setattr__(self, "replaying", replaying)
        object.__setattr__(self, "start_at", start_at)
        object.__setattr__(self, "durable", durable)

    def replay(self) -> FileStream:
        """The same keys read from the beginning (or ``start_at``), ending at the file's end."""
        return self.evolve(replaying=True)

    def arguments(self) -> dict[str, Any]:
        return {"start_at": self.start_at, "durable": self.durable, "replaying": self.replaying}

    def derived_by(self) -> str | None:
        return "replay" if self.replaying else None

    @property
    def streams(self) -> tuple[str, ...]:
        return self.keys

    @property
    def seekable(self) -> bool:
        return True

    @property
    def consumer_name(self) -> str | None:
        # A durable consumer holds a lock beside the file: one process at a time runs it.
        return "<app>.<subscription>" if self.durable is True else self.durable

    def description(self) -> SourceDescription:
        return SourceDescription(system="trio_streams.file")

    def in_process(self) -> MemoryStream:
        return MemoryStream(*self.keys, start_at=self.start_at, replaying=self.replaying)


def check_stream_key(key: str) -> None:
    """Refuse, with ``ConfigurationError``, a key the format cannot hold or reserves.

    An empty key is refused too: the format would store it, but no subscription can name it.
    """
    if not key:
        raise ConfigurationError(
            "stream key '' is empty: a stream key is 1 to 249 characters of [A-Za-z0-9._-]"
        )
    if key in (INTERNAL_KEY, WILDCARD_KEY):
        raise ConfigurationError(f"stream key {key!r} is reserved by the stream-file format")
    if not key.isascii() or not key_is_valid(key.encode("ascii")):
        raise ConfigurationError(
            f"stream key {key!r} is not valid in a stream file: at most 249 characters of "
            "[A-Za-z0-9._-]"
        )
