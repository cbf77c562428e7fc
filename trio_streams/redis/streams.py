"""``RedisStream``: what a Redis stream subscription reads."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from types import EllipsisType
from typing import Any, Self, final

from ..core.description import Binding, SourceDescription
from ..core.errors import ConfigurationError
from ..core.positions import Position, PositionKind
from ..core.sources import NamedSource
from ..core.transport import Sharing, check_source_args
from ..memory.sources import MemoryStream

#: Why a plain stream refuses ``Position.sequence`` (live, and under ``app.test()``).
SEQUENCE_REFUSAL = (
    "cannot address a Redis stream: its entries are addressed by id (Position.entry) and time "
    "(Position.timestamp)"
)

__all__ = ["DeletePolicy", "Mode", "NoGroup", "RedisStream"]

#: How dead letters sent to a stream are written: a stream's, a list's or a channel's with
#: ``dead_letter_kind="stream"``.
XADD = Binding("redis", {"method": "xadd"})


class NoGroup(enum.Enum):
    """What a group subscription does when its group (or stream) vanishes while it runs
    (``FLUSHALL``, ``DEL``, a restart without persistence)."""

    #: Create the group again at the configured start, log a warning, count it.
    RECREATE = "recreate"
    #: Fail the subscription (and so the app) with :class:`~.broker.GroupVanished`.
    FAIL = "fail"


class DeletePolicy(enum.Enum):
    """What ``delete_on_ack`` does to the references other consumer groups hold to an entry
    it deletes (the options of ``XACKDEL``).

    Only :attr:`KEEPREF` can be done without ``XACKDEL`` (by ``XACK`` and ``XDEL`` in one
    ``MULTI``/``EXEC``); the others are refused at start by a server that lacks it.
    """

    #: Delete the entry; other groups' pending lists keep their references to it (their
    #: consumers find it deleted: acknowledged there, never handled). ``XDEL`` does the same.
    KEEPREF = "keepref"
    #: Delete the entry and every group's reference to it: no other group sees it again.
    DELREF = "delref"
    #: Acknowledge it; delete it only once every group has read and acknowledged it (the
    #: group that acknowledges it last, with this policy, deletes it; or a trim).
    ACKED = "acked"


#: Seconds an entry may sit unacknowledged in a dead consumer's pending list before another
#: consumer of the group claims it.
DEFAULT_MIN_IDLE = 60.0
#: Seconds after which a consumer of the group that holds nothing is removed by the hygiene
#: pass, unless the subscription says otherwise (``remove_idle_consumers=None``: never).
DEFAULT_REMOVE_IDLE = 300.0


class Mode(enum.Enum):
    """How a ``RedisStream`` is read."""

    #: Through a consumer group (the default): acknowledged, each entry to one member.
    GROUP = "group"
    #: Without a group, following the tip (``RedisStream(key).tail()``).
    TAIL = "tail"
    #: Without a group, from the beginning to the tip, then the end (``.replay()``).
    REPLAY = "replay"


@final
@dataclass(frozen=True, slots=True, init=False, repr=False)
class RedisStream(NamedSource):
    """One Redis stream, read through a consumer group (or plainly: :meth:`replay`,
    :meth:`tail`).

    - ``group``: the consumer group (default: the broker's ``group=``, else one group per
      subscription, named ``<app>/<subscription>``). Each entry goes to one consumer of it.
    - ``consumer``: this consumer's name. Default: stable for app, subscription, host and
      worker slot (``<host>:<app>/<subscription>:<slot>``, see :mod:`.names`), so a restarted
      process takes back its own pending entries at open; two live processes never share a
      name (:class:`~.lists.ConsumerNameInUse`).
    - ``start``: where a group created at open starts: ``Position.end()`` (the tip, default),
      ``Position.beginning()`` or ``Position.entry(id)`` (that entry included). An existing
      group is accepted as it is.
    - ``min_idle``: seconds after which an entry another consumer left unacknowledged is claimed
      (its handler is kept from being claimed by a lease while it runs).
    - ``on_nogroup``: ``"recreate"`` (default) or ``"fail"`` (see :class:`NoGroup`).
    - ``remove_idle_consumers``: seconds; other consumers of the group that have no pending
      entries and have been idle that long are removed (``XGROUP DELCONSUMER``) by the
      hygiene pass (every 30 s). Default :data:`DEFAULT_REMOVE_IDLE` (5 minutes); ``None``:
      never.
    - ``delete_on_ack``: a work queue: an acknowledged entry is deleted too, in the same
      step (``XACKDEL`` where the server has it, else ``XACK`` and ``XDEL`` in one
      ``MULTI``/``EXEC``). Without it ``XACK`` deletes nothing: trim the stream
      (``RedisBroker(maxlen=...)``).
    - ``delete_policy``: with ``delete_on_ack``, what becomes of other groups' references to
      a deleted entry (:class:`DeletePolicy`): ``"keepref"`` (default: kept, as ``XDEL``
      leaves them), ``"delref"`` (removed) or ``"acked"`` (deleted only once every group
      acknowledged it). ``"delref"`` and ``"acked"`` need a server with ``XACKDEL``; one
      without it is refused when the app starts.
    - ``shared_seek``: a handler's seek (``ctx.seeker.seek``) moves the whole group, so it is
      refused while other consumers of the group are live; ``True`` allows it anyway (they
      are moved too). See :mod:`.group_position`.

    Under ``app.test()`` it runs as the ``MemoryStream`` of the same key, group and start (an
    entry-id start runs from the beginning there: in-process streams have no entry ids); its
    seeks are refused as live (a sequence number; another live member of a named group,
    unless ``shared_seek``).
    """

    label = "RedisStream"
    shown = (("group", None), ("consumer", None), ("start", None), ("shared_seek", False))

    key: str
    group: str | None
    consumer: str | None
    start_at: Position | None
    min_idle: float
    on_nogroup: NoGroup
    mode: Mode
    delete_on_ack: bool
    delete_policy: DeletePolicy | None
    remove_idle_consumers: float | None
    shared_seek: bool

    def __init__(
        self,
        key: str,
        *,
        group: str | None = None,
        consumer: str | None = None,
        start: Position | None = None,
        min_idle: float = DEFAULT_MIN_IDLE,
        on_nogroup: NoGroup | str = NoGroup.RECREATE,
        delete_on_ack: bool = False,
        delete_policy: DeletePolicy | str | None = None,
        remove_idle_consumers: float | EllipsisType | None = ...,
        mode: Mode = Mode.GROUP,
        shared_seek: bool = False,
    ) -> None:
        check_source_args("RedisStream", (key,), start, entry_ids=True, parameter="start")
        _check_names(group, consumer)
        mode = Mode(mode)
        if remove_idle_consumers is ...:
            remove_idle_consumers = DEFAULT_REMOVE_IDLE if mode is Mode.GROUP else None
        _check_mode(key, mode, group, consumer, start, delete_on_ack)
        _check_remove_idle(remove_idle_consumers, mode)
        _check_seconds(delete_on_ack, min_idle)
        if not isinstance(shared_seek, bool):
            raise ConfigurationError(f"shared_seek is True or False, not {shared_seek!r}")
        if shared_seek and mode is not Mode.GROUP:
            raise ConfigurationError(
                f"shared_seek needs a consumer group: RedisStream({key!r}).{mode.value}() "
                "seeks alone"
            )
        deletes = _delete_policy(delete_on_ack, delete_policy)
        try:
            policy = NoGroup(on_nogroup)
        except ValueError:
            raise ConfigurationError(
                f"on_nogroup is 'recreate' or 'fail', not {on_nogroup!r}"
            ) from None
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "group", group)
        object.__setattr__(self, "consumer", consumer)
        object.__setattr__(self, "start_at", start)
        object.__setattr__(self, "min_idle", float(min_idle))
        object.__setattr__(self, "on_nogroup", policy)
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "delete_on_ack", delete_on_ack)
        object.__setattr__(self, "shared_seek", shared_seek)
        object.__setattr__(self, "delete_policy", deletes)
        object.__setattr__(
            self,
            "remove_idle_consumers",
            None if remove_idle_consumers is None else float(remove_idle_consumers),
        )

    @property
    def start(self) -> Position:
        """Where reading starts: ``start``, else the tip (the beginning for a replay)."""
        if self.start_at is not None:
            return self.start_at
        return Position.beginning() if self.mode is Mode.REPLAY else Position.end()

    @property
    def replaying(self) -> bool:
        return self.mode is Mode.REPLAY

    def replay(self) -> Self:
        """The stream read without a group from the beginning (or ``start``) to the tip, then
        the end; seekable."""
        return self.evolve(mode=Mode.REPLAY)

    def tail(self) -> Self:
        """The stream read without a group from the tip (or ``start``), following; seekable."""
        return self.evolve(mode=Mode.TAIL)

    def arguments(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "consumer": self.consumer,
            "start": self.start_at,
            "min_idle": self.min_idle,
            "on_nogroup": self.on_nogroup,
            "delete_on_ack": self.delete_on_ack,
            "delete_policy": self.delete_policy,
            "remove_idle_consumers": (
                ...
                if self.remove_idle_consumers == DEFAULT_REMOVE_IDLE
                else self.remove_idle_consumers
            ),
            "mode": self.mode,
            "shared_seek": self.shared_seek,
        }

    def derived_by(self) -> str | None:
        return None if self.mode is Mode.GROUP else self.mode.value

    def with_defaults(self, *, group: str | None, consumer: str | None) -> Self:
        """This source with the broker's group and consumer where it names none (a plain
        replay or tail keeps reading without a group)."""
        if self.mode is not Mode.GROUP:
            return self
        return self.evolve(group=self.group or group, consumer=self.consumer or consumer)

    @property
    def streams(self) -> tuple[str, ...]:
        return (self.key,)

    @property
    def seekable(self) -> bool:
        """Every Redis stream subscription seeks: a plain replay or tail moves its own place; a
        group member moves its whole group (``XGROUP SETID``), refused while other consumers of
        it are live unless ``shared_seek``."""
        return True

    @property
    def sharing(self) -> Sharing:
        """A group's members split the entries; plain readers each read every one."""
        return Sharing.SPLIT if self.mode is Mode.GROUP else Sharing.EVERY

    @property
    def consumer_name(self) -> str | None:
        return self.consumer if self.mode is Mode.GROUP else None

    def description(self) -> SourceDescription:
        """Read with ``xreadgroup`` (its group and consumer) or ``xread``; dead letters are
        ``xadd``ed."""
        if self.mode is Mode.GROUP:
            fields: dict[str, str | None] = {"method": "xreadgroup", "groupName": self.group}
            if self.consumer:
                fields["consumerName"] = self.consumer
            reads = Binding("redis", fields)
        else:
            reads = Binding("redis", {"method": "xread"})
        return SourceDescription(system="redis", reads=reads, dead_letters=XADD, group=self.group)

    def in_process(self) -> MemoryStream:
        start = self.start
        if start.kind is PositionKind.ENTRY:
            start = Position.beginning()  # in-process streams have no entry ids
        if self.mode is not Mode.GROUP:
            return MemoryStream(
                self.key,
                start_at=start,
                replaying=self.replaying,
                refused_seeks=((PositionKind.SEQUENCE, SEQUENCE_REFUSAL),),
            )
        # No group named: one group per subscription, which in process is a cursor of its own.
        return MemoryStream(
            self.key,
            group=self.group,
            start_at=start,
            refused_seeks=((PositionKind.SEQUENCE, SEQUENCE_REFUSAL),),
            group_seek="shared" if self.shared_seek else "alone",
        )


def _check_mode(
    key: str,
    mode: Mode,
    group: str | None,
    consumer: str | None,
    start: Position | None,
    delete_on_ack: bool,
) -> None:
    """Refuse what the mode cannot take (a plain read has no group) and a start it cannot."""
    allowed: tuple[PositionKind, ...] = (
        PositionKind.BEGINNING,
        PositionKind.END,
        PositionKind.ENTRY,
    )
    if mode is not Mode.GROUP:
        allowed += (PositionKind.TIMESTAMP,)
        if group is not None or consumer is not None:
            raise ConfigurationError(
                f"RedisStream({key!r}).{mode.value}() reads without a consumer group: "
                "give no group or consumer"
            )
        if delete_on_ack:
            raise ConfigurationError("delete_on_ack needs a consumer group (nothing is acked)")
    if start is not None and start.kind not in allowed:
        raise ConfigurationError(
            f"a Redis stream starts at Position.beginning(), Position.end(), "
            f"Position.entry(id){'' if mode is Mode.GROUP else ' or Position.timestamp(ms)'}"
            f", not {start!r}"
        )


def _delete_policy(delete_on_ack: bool, policy: object) -> DeletePolicy | None:
    """The policy ``delete_on_ack`` deletes with (:attr:`DeletePolicy.KEEPREF` unless given);
    None without ``delete_on_ack``, which refuses a policy (it would delete nothing)."""
    if policy is None:
        return DeletePolicy.KEEPREF if delete_on_ack else None
    try:
        chosen = DeletePolicy(policy.lower() if isinstance(policy, str) else policy)
    except ValueError:
        raise ConfigurationError(
            f"delete_policy is 'keepref', 'delref' or 'acked' (a DeletePolicy), not {policy!r}"
        ) from None
    if not delete_on_ack:
        raise ConfigurationError(
            f"delete_policy={chosen.value!r} says how delete_on_ack deletes an acknowledged "
            "entry: give delete_on_ack=True too"
        )
    return chosen


def _check_names(group: str | None, consumer: str | None) -> None:
    """Refuse a group or consumer name that is not a non-empty string."""
    for what, value in (("group", group), ("consumer", consumer)):
        if value is not None and (not isinstance(value, str) or not value):
            raise ConfigurationError(f"{what} must be a non-empty string, not {value!r}")


def _check_remove_idle(remove_idle_consumers: object, mode: Mode) -> None:
    """Refuse a ``remove_idle_consumers`` that is not seconds (at least 1), or one without a
    group."""
    if remove_idle_consumers is None:
        return
    if isinstance(remove_idle_consumers, bool) or not isinstance(
        remove_idle_consumers, int | float
    ):
        raise ConfigurationError(
            f"remove_idle_consumers takes seconds, not {remove_idle_consumers!r}"
        )
    if not 1 <= remove_idle_consumers < float("inf"):
        raise ConfigurationError(
            f"remove_idle_consumers must be at least 1 s, got {remove_idle_consumers!r}"
        )
    if mode is not Mode.GROUP:
        raise ConfigurationError("remove_idle_consumers needs a consumer group")


def _check_seconds(delete_on_ack: object, min_idle: object) -> None:
    """Refuse a ``delete_on_ack`` that is not a bool, a ``min_idle`` that is not seconds (at
    least 0.01)."""
    if not isinstance(delete_on_ack, bool):
        raise ConfigurationError(f"delete_on_ack is True or False, not {delete_on_ack!r}")
    if isinstance(min_idle, bool) or not isinstance(min_idle, int | float):
        raise ConfigurationError(f"min_idle takes seconds, not {min_idle!r}")
    if not 0.01 <= min_idle < float("inf"):
        raise ConfigurationError(f"min_idle must be at least 0.01 s, got {min_idle!r}")
