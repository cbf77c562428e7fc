"""What the fault proxy knows and decides, without any I/O: its connections, the faults in force,
and seeded schedules of faults.

:class:`ProxyConnection` is what a predicate sees of a connection; :class:`Fault` is one
standing fault (in force until healed); :class:`FaultSchedule` turns a seed into the same list
of :class:`ScheduledFault` every time.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal, final, get_args

from ...core.errors import TrioStreamsError

if TYPE_CHECKING:
    from .proxy import FaultProxy

__all__ = [
    "FAULT_KINDS",
    "MAX_SCHEDULE_STEPS",
    "Fault",
    "FaultKind",
    "FaultSchedule",
    "Match",
    "ProxyConnection",
    "ProxyError",
    "ScheduledFault",
    "issued",
    "named",
]


class ProxyError(TrioStreamsError):
    """The proxy was used in a way it cannot serve (not started, started twice, bad arguments,
    a ``match=`` predicate that raised); the message says which."""


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


@final
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


@final
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
        """Whether this fault applies to ``connection``. A predicate that raises is a bug of the
        test, not a fault: it comes out as :class:`ProxyError` naming the predicate, the fault
        and the connection, with the predicate's error as its cause."""
        return self.match is None or call_match(self.match, self.kind, connection)

    def heal(self) -> None:
        """End this fault: held connections flow again, new ones are served."""
        self.proxy._remove(self)

    def __repr__(self) -> str:
        return f"<Fault {self.kind} healed={self.healed}>"


@final
@dataclass(frozen=True)
class ScheduledFault:
    """One step of a schedule: at ``at`` seconds from its start, inject ``kind`` with ``params``
    and heal it ``hold`` seconds later (a cut is instant and has nothing to heal)."""

    at: float
    kind: FaultKind
    hold: float
    params: tuple[tuple[str, float], ...] = ()


#: The kinds a schedule mixes by default: each one ends by itself or is healed after its hold.
DEFAULT_SCHEDULE_KINDS: tuple[FaultKind, ...] = FAULT_KINDS


#: The most steps a :class:`FaultSchedule` may plan (``duration / every``).
MAX_SCHEDULE_STEPS: Final = 1_000_000


@final
@dataclass(frozen=True)
class FaultSchedule:
    """A seeded mix of faults: one every ``every`` seconds for ``duration`` seconds, each of a
    kind drawn from ``kinds`` and held ``hold`` seconds (default: half of ``every``).

    Every time is a finite number of seconds >= 0 (``every`` > 0), and ``duration / every``
    at most :data:`MAX_SCHEDULE_STEPS`; construction raises ``ValueError`` (``TypeError`` for
    what is not a number) naming the field otherwise, so :meth:`plan` never fails.

    The same seed gives the same :meth:`plan` (kinds, times and parameters), so a failure seen
    under one seed can be run again.
    """

    seed: int = 0
    every: float = 0.5
    duration: float = 10.0
    kinds: tuple[FaultKind, ...] = DEFAULT_SCHEDULE_KINDS
    hold: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise TypeError(
                f"FaultSchedule: seed is an int (the same seed, the same plan), not {self.seed!r}"
            )
        for name in ("every", "duration", "hold"):
            value = getattr(self, name)
            if name == "hold" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"FaultSchedule: {name} is a number of seconds, not {value!r}")
            if not math.isfinite(value) or value < 0:
                raise ValueError(
                    f"FaultSchedule: {name} must be finite and >= 0 seconds (got {name}={value!r})"
                )
        if self.every <= 0:
            raise ValueError(
                f"FaultSchedule: every must be > 0 and duration >= 0 "
                f"(got every={self.every}, duration={self.duration})"
            )
        steps = self.duration / self.every
        if steps > MAX_SCHEDULE_STEPS:
            raise ValueError(
                f"FaultSchedule: duration={self.duration} every={self.every} makes {steps:.3g} "
                f"steps, over MAX_SCHEDULE_STEPS ({MAX_SCHEDULE_STEPS}): a longer every?"
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


def check_count(where: str, name: str, value: object) -> int:
    """``value`` as a count of at least 1 (an int, not a bool), else :class:`ProxyError` naming
    ``name`` and the value."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProxyError(f"{where}: {name} must be an int >= 1, not {value!r}")
    if value < 1:
        raise ProxyError(f"{where}: {name} must be >= 1 (got {value!r})")
    return value


def check_seconds(where: str, name: str, value: object) -> float:
    """``value`` as a finite number of seconds >= 0 (an int or a float, not a bool), else
    :class:`ProxyError` naming ``name`` and the value."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProxyError(f"{where}: {name} must be a number of seconds, not {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ProxyError(f"{where}: {name} must be finite and >= 0 seconds (got {value!r})")
    return float(value)


def check_match(where: str, match: object) -> Match | None:
    """``match`` as a predicate (a callable) or None, else :class:`ProxyError`."""
    if match is not None and not callable(match):
        raise ProxyError(f"{where}: match= must be a predicate on a connection, not {match!r}")
    return match


def call_match(match: Match, kind: FaultKind, connection: ProxyConnection) -> bool:
    """``match(connection)``; an error it raises comes out as :class:`ProxyError` naming the
    predicate, the fault's ``kind`` and the connection, with the error as its cause."""
    try:
        return bool(match(connection))
    except Exception as exc:
        raise ProxyError(
            f"FaultProxy: the match= predicate {match!r} of a {kind} fault raised "
            f"{type(exc).__name__} on connection {connection.index}: {exc}"
        ) from exc
