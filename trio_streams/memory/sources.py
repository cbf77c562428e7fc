"""``MemoryStream``: what an in-process subscription reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.description import SourceDescription
from ..core.errors import ConfigurationError
from ..core.positions import Position, PositionKind
from ..core.sources import NamedSource
from ..core.transport import Sharing, check_source_args

__all__ = ["SYSTEM", "MemoryStream"]

#: ``messaging.system`` of the in-process transport's spans.
SYSTEM = "trio_streams.memory"


@dataclass(frozen=True, slots=True, init=False, repr=False)
class MemoryStream(NamedSource):
    """One or more in-process streams.

    - ``MemoryStream("orders")`` follows the live tail: only messages published from now on.
    - ``.replay()`` reads from the beginning and ends at the tip.
    - ``start_at=Position...`` starts somewhere else (a live subscription then keeps following).
    - ``group="workers"``: a consumer group; each message goes to one member. Several streams
      are read in the order they were published.
    - ``group_seek``: whether a member of ``group`` may seek, which moves the whole group (the
      in-process form of a Redis group subscription): ``"alone"`` — only while no other member
      of the group is open (refused otherwise, as live); ``"shared"`` — whatever the others;
      None (the default) — members cannot seek.
    - ``refused_seeks``: position kinds a seek refuses, each with the reason — what the real
      transport a source stands in for under ``app.test()`` refuses (a Redis stream has no
      sequence numbers).
    """

    label = "MemoryStream"
    shown = (("group", None), ("start_at", None))

    keys: tuple[str, ...]
    replaying: bool
    start_at: Position | None
    group: str | None
    refused_seeks: tuple[tuple[PositionKind, str], ...]
    group_seek: str | None

    def __init__(
        self,
        *streams: str,
        group: str | None = None,
        start_at: Position | None = None,
        replaying: bool = False,
        refused_seeks: tuple[tuple[PositionKind, str], ...] = (),
        group_seek: str | None = None,
    ) -> None:
        check_source_args("MemoryStream", streams, start_at)
        if group is not None and (not isinstance(group, str) or not group):
            raise ConfigurationError(f"group must be a non-empty string, not {group!r}")
        if group_seek not in (None, "alone", "shared"):
            raise ConfigurationError(f"group_seek is 'alone', 'shared' or None, not {group_seek!r}")
        object.__setattr__(self, "keys", tuple(streams))
        object.__setattr__(self, "replaying", replaying)
        object.__setattr__(self, "start_at", start_at)
        object.__setattr__(self, "group", group)
        object.__setattr__(self, "refused_seeks", tuple(refused_seeks))
        object.__setattr__(self, "group_seek", group_seek)

    def replay(self) -> MemoryStream:
        """The same streams read from the beginning, ending at the tip."""
        return self.evolve(replaying=True)

    def arguments(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "start_at": self.start_at,
            "replaying": self.replaying,
            "refused_seeks": self.refused_seeks,
            "group_seek": self.group_seek,
        }

    def derived_by(self) -> str | None:
        return "replay" if self.replaying else None

    @property
    def streams(self) -> tuple[str, ...]:
        return self.keys

    @property
    def seekable(self) -> bool:
        """Fan-out subscriptions seek; consumer group members only with ``group_seek``."""
        return self.group is None or self.group_seek is not None

    @property
    def sharing(self) -> Sharing:
        return Sharing.LOCAL

    def description(self) -> SourceDescription:
        return SourceDescription(system=SYSTEM, group=self.group)

    def in_process(self) -> MemoryStream:
        return self
