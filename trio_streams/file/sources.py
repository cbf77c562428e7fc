"""``FileStream``: what a stream-file subscription reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, final

from ..core.description import SourceDescription
from ..core.errors import ConfigurationError
from ..core.positions import Position
from ..core.sources import NamedSource
from ..core.transport import Sharing, check_source_args
from ..memory.sources import MemoryStream
from .durable import check_consumer_name
from .group_store import check_group_name
from .keys import check_stream_key

__all__ = ["DEFAULT_CLAIM", "DEFAULT_LEASE", "FileStream", "check_stream_key"]

#: Seconds a group member's claim lasts unless it renews it (it renews a third of the way).
DEFAULT_LEASE = 30.0
#: Messages a group member takes in one claim.
DEFAULT_CLAIM = 256


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
    - ``.group("billing")``: a member of a consumer group. Members in any number of processes
      on the host share the messages: each is handed to one member at a time (see
      :mod:`~trio_streams.file.group`).

    Under ``app.test()`` it runs as the ``MemoryStream`` of the same keys, start and mode (a
    durable name has nothing to resume in memory and is ignored there; a group is the
    in-process group of that name).
    """

    label = "FileStream"
    shown = (
        ("start_at", None),
        ("durable", None),
        ("group", None),
        ("ordered", False),
        ("lease", DEFAULT_LEASE),
        ("claim", DEFAULT_CLAIM),
    )

    keys: tuple[str, ...]
    replaying: bool
    start_at: Position | None
    #: Its durable consumer's name; True: named after the app and subscription at start.
    durable: str | Literal[True] | None
    #: The consumer group it is a member of (None: it reads every message itself); made by
    #: :meth:`group` (or ``group=``).
    group_name: str | None
    #: A group's stream keys are each handled in order across the group.
    ordered: bool
    #: Seconds a group member's claim lasts unless renewed (it renews while it runs).
    lease: float
    #: Messages a group member takes at once.
    claim: int

    def __init__(
        self,
        *keys: str,
        start_at: Position | None = None,
        durable: str | bool | None = None,
        replaying: bool = False,
        group: str | None = None,
        ordered: bool = False,
        lease: float = DEFAULT_LEASE,
        claim: int = DEFAULT_CLAIM,
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
        _check_group(group, durable, ordered, lease, claim)
        object.__setattr__(self, "keys", tuple(keys))
        object.__setattr__(self, "replaying", replaying)
        object.__setattr__(self, "start_at", start_at)
        object.__setattr__(self, "durable", durable)
        object.__setattr__(self, "group_name", group)
        object.__setattr__(self, "ordered", ordered)
        object.__setattr__(self, "lease", float(lease))
        object.__setattr__(self, "claim", claim)

    def replay(self) -> FileStream:
        """The same keys read from the beginning (or ``start_at``), ending at the file's end.

        For a group: a new group starts at the beginning, and each member ends once the group
        has nothing left for it (see :mod:`~trio_streams.file.group`)."""
        return self.evolve(replaying=True)

    def group(
        self,
        name: str,
        *,
        ordered: bool = False,
        lease: float = DEFAULT_LEASE,
        claim: int = DEFAULT_CLAIM,
    ) -> FileStream:
        """A member of consumer group ``name`` reading these keys: members in any number of
        processes on this host share the messages, each handed to one member at a time,
        at-least-once (see :mod:`~trio_streams.file.group`).

        - ``ordered``: each stream key is handled in order across the group (a key is held by
          one member at a time, and moves to another only between batches).
        - ``lease``: seconds a member's claim lasts unless renewed; a live member renews it while
          its handlers run. A member whose process is gone loses its claims at once.
        - ``claim``: messages a member takes at once.
        """
        return self.evolve(group=name, ordered=ordered, lease=lease, claim=claim)

    def arguments(self) -> dict[str, Any]:
        return {
            "start_at": self.start_at,
            "durable": self.durable,
            "replaying": self.replaying,
            "group": self.group_name,
            "ordered": self.ordered,
            "lease": self.lease,
            "claim": self.claim,
        }

    def derived_by(self) -> str | None:
        return "replay" if self.replaying else None

    @property
    def streams(self) -> tuple[str, ...]:
        return self.keys

    @property
    def seekable(self) -> bool:
        return True

    @property
    def sharing(self) -> Sharing:
        """A group's members share its messages; any other file subscription reads them all."""
        return Sharing.SPLIT if self.group_name is not None else Sharing.EVERY

    @property
    def consumer_name(self) -> str | None:
        # A durable consumer holds a lock beside the file: one process at a time runs it.
        return "<app>.<subscription>" if self.durable is True else self.durable

    def description(self) -> SourceDescription:
        return SourceDescription(system="trio_streams.file", group=self.group_name)

    def in_process(self) -> MemoryStream:
        return MemoryStream(
            *self.keys,
            start_at=self.start_at,
            replaying=self.replaying,
            group=self.group_name,
            group_seek="alone" if self.group_name is not None else None,
        )


def _check_group(
    group: str | None, durable: object, ordered: object, lease: object, claim: object
) -> None:
    if group is None:
        if ordered:
            raise ConfigurationError("ordered=True orders a consumer group: give it a group")
        return
    check_group_name(group)
    if durable is not None:
        raise ConfigurationError(
            "a FileStream is either a durable consumer or a member of a group, not both: a "
            "group keeps its members' position itself"
        )
    if not isinstance(ordered, bool):
        raise ConfigurationError(f"ordered is True or False, not {ordered!r}")
    if isinstance(lease, bool) or not isinstance(lease, int | float) or not 1 <= lease <= 86400:
        raise ConfigurationError(f"lease takes 1 to 86400 seconds, not {lease!r}")
    if isinstance(claim, bool) or not isinstance(claim, int) or not 1 <= claim <= 100_000:
        raise ConfigurationError(f"claim takes 1 to 100000 messages, not {claim!r}")
