"""What the fault proxy knows and decides, without any I/O: its connections, the faults in force,
and seeded schedules of faults.

:class:`ProxyConnection` is what a predicate sees of a connection; :class:`Fault` is one
standing fault (in force until healed); :class:`FaultSchedule` turns a seed into the same list
of :class:`ScheduledFault` every time.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:
    from .proxy import FaultProxy

__all__ = [
    "FAULT_KINDS",
    "Fault",
    "FaultKind",
    "FaultSchedule",
    "Match",
    "ProxyConnection",
    "ScheduledFault",
    "issued",
    "named",
]

#: Every kind of fault the proxy injects; :attr:`FaultProxy.injected` counts by these names.
FaultKind = Literal[
    "cut",
    "cut_after_bytes",
    "cut_after_commands",
    "reset_mid_reply",
    "delay",
    "blackhole",
    "refuse_new",
    "drip",
]
FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)


@dataclass(eq=False)
class ProxyConnection:
    """One client connection through the proxy, as fault predicates see it.

    Counts are of bytes forwarded so far; ``issued`` holds the name of every command the client
    sent (``"XREADGROUP"``, ``"BLMOVE"``, ...) and ``name`` the last name it gave itself with
    ``CLIENT SETNAME`` (or ``HELLO ... SETNAME``).
    """

    #: 0 for the first connection the proxy accepted, 1 for the next, ...
    index: int
    #: The client's (host, port).
    client: tuple[str, int]
    commands: int = 0
    issued: set[str] = field(default_factory=set)
    name: str | None = None
    bytes_to_server: int = 0
    bytes_to_client: int = 0

    @property
    def bytes(self) -> int:
        """Bytes forwarded in both directions."""
        return self.bytes_to_server + self.bytes_to_client


#: A predicate choosing the connections a fault applies to.
Match = Callable[[ProxyConnection], bool]


def issued(*names: str) -> Match:
    """A predicate: connections that sent any of the commands ``names`` (case-insensitive),
    e.g. ``issued("XREADGROUP")`` for a group consumer's reading connection."""
    wanted = {n.upper() for n in names}
    return lambda connection: not wanted.isdisjoint(connection.issued)


def named(name: str) -> Match:
    """A predicate: connections whose client named itself ``name`` (``CLIENT SETNAME``)."""
    return lambda connection: connection.name == name


@dataclass(eq=False)
class Fault:
    """A standing fault: in force, for the connections it matches, until :meth:`heal`.

    Counts in a fault are per connection and start when the fault is set (or when the
    connection opens, if later).
    """

    kind: FaultKind
    match: Match | None
    proxy: FaultProxy
    after_bytes: int | None = None
    after_commands: int | None = None
    to_server: float = 0.0
    to_client: float = 0.0
    chunk: int = 1
    every: float = 0.0
    #: (bytes, commands) of each live connection when the fault was set.
    baseline: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: Indexes of the connections this fault was injected into (each counted once).
    hit: set[int] = field(default_factory=set)
    healed: bool = False

    def matches(self, connection: ProxyConnection) -> bool:
        return self.match is None or bool(self.match(connection))

    def heal(self) -> None:
        """End this fault: held connections flow again, new ones are served."""
        self.proxy._remove(self)

    def __repr__(self) -> str:
        return f"<Fault {self.kind} healed={self.healed}>"


@dataclass(frozen=True)
class ScheduledFault:
    """One step of a schedule: at ``at`` seconds from its start, inject ``kind`` with ``params``
    and heal it ``hold`` seconds later (a cut is instant and has nothing to heal)."""

    at: float
    kind: FaultKind
    hold: float
    params: tuple[tuple[str, float], ...] = ()


#: The kinds a schedule mixes by default: each one ends by itself or is healed after its hold.
DEFAULT_SCHEDULE_KINDS: tuple[FaultKind, ...] = (
    "cut",
    "cut_after_bytes",
    "cut_after_commands",
    "reset_mid_reply",
    "delay",
    "blackhole",
    "refuse_new",
    "drip",
)


@dataclass(frozen=True)
class FaultSchedule:
    """A seeded mix of faults: one every ``every`` seconds for ``duration`` seconds, each of a
    kind drawn from ``kinds`` and held ``hold`` seconds (default: half of ``every``).

    The same seed gives the same :meth:`plan` (kinds, times and parameters), so a failure seen
    under one seed can be run again.
    """

    seed: int = 0
    every: float = 0.5
    duration: float = 10.0
    kinds: tuple[FaultKind, ...] = DEFAULT_SCHEDULE_KINDS
    hold: float | None = None

    def __post_init__(self) -> None:
        if self.every <= 0 or self.duration < 0:
            raise ValueError(
                f"FaultSchedule: every must be > 0 and duration >= 0 "
                f"(got every={self.every}, duration={self.duration})"
            )
        unknown = set(self.kinds) - set(FAULT_KINDS)
        if not self.kinds or unknown:
            raise ValueError(
                f"FaultSchedule: kinds must be some of {FAULT_KINDS} (got {self.kinds})"
            )

    def plan(self) -> list[ScheduledFault]:
        """The faults of this schedule, in order (a pure function of the fields)."""
        rng = random.Random(self.seed)
        hold = self.every / 2 if self.hold is None else self.hold
        count = int(self.duration / self.every + 1e-9)
        steps = []
        for step in range(1, count + 1):
            kind = rng.choice(self.kinds)
            at = round(step * self.every, 6)
            steps.append(ScheduledFault(at, kind, hold, _params(kind, rng)))
        return steps


def _params(kind: FaultKind, rng: random.Random) -> tuple[tuple[str, float], ...]:
    if kind == "cut_after_bytes":
        return (("bytes", rng.randint(1, 2048)),)
    if kind == "cut_after_commands":
        return (("commands", rng.randint(1, 8)),)
    if kind == "delay":
        return (("to_server", rng.uniform(0, 0.05)), ("to_client", rng.uniform(0, 0.05)))
    if kind == "drip":
        return (("chunk", rng.randint(1, 64)), ("every", rng.uniform(0.0005, 0.005)))
    return ()
