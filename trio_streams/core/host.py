"""What a subscription offers the transport source it runs: its options, an owner for the
source's own tasks, and a way to report faults it recovers from.

A server transport does more than hand out deliveries. It renews leases and heartbeats, reclaims
entries of dead consumers, promotes delayed messages, and it meets faults it recovers from: a
dropped connection while it reconnects, a flush that failed, a gap in a Pub/Sub stream. None of
that may stop the app, and none of it may run in a task nobody owns. The subscription hands its
source a :class:`SubscriptionHost` at :meth:`~trio_streams.core.transport.SubscriptionSource.open`:

- ``host.options`` — the core's options for the subscription (workers, lanes, batch, channel
  capacity, the attempts cap), so the source can size its reads;
- ``host.retry_target`` — what the subscription's retry copies name as their target
  (``retry_headers(delivery, host.retry_target)``), so other subscriptions of the same stream
  pass over them;
- ``host.start_soon(fn, *args)`` — run a task in the subscription's own nursery. Such tasks are
  cancelled after the dispatcher has drained and before the source is closed; one that raises
  fails the subscription (and so the app), like any task of it;
- ``host.report_fault(kind, message)`` and ``host.clear_fault(kind)`` — a fault that lasts until
  it clears (a connection being re-established). While any fault of any subscription lasts, the
  app's health is ``degraded``. A fault is logged once when it begins and once when it clears,
  counted in the subscription's stats, and delivered to fault observers (the test harness
  records them as ``t.faults``). The line a fault begins with is one WARNING line: the
  subscription, the kind, the message, the server (an error of the chain that names its
  ``address``) and the cause (the innermost error of the chain, through exception groups), if
  the message does not say them already. The traceback is logged at DEBUG: a server that goes
  away is an event an operator expects, not a crash.
- A fault that failed settles report (``report_fault(..., left="the entries stayed pending")``)
  counts each report while it lasts, and its line when it clears says how many settles failed
  meanwhile and what became of their deliveries ("fault 'settle' cleared after 6 failed
  settles; the entries stayed pending"): the later failures are not logged one by one.

A source may also raise :class:`~trio_streams.core.transport.SourceFault` from ``read``, ``settle``,
``dead_letter`` or ``aclose``: the core reports it like ``report_fault`` and carries on; every
fault a read raised clears when a read next returns, and every fault a settle or dead letter
raised clears when one next succeeds. Any other exception still fails the app. A source whose
read blocks (a quiet stream) should call ``host.clear_fault(kind)`` itself once it has its
connection back: the next read may not return for a long time.

A fault the server's silence caused — its error, or the error's ``__cause__``, is a
``ConnectionError`` or a ``TimeoutError`` (a lost connection, a command timeout) — is over once
the server answers again, whatever step failed: on a quiet stream the failed step (a flush, a
lease renewal) may not come again for a long time, or ever. A source calls
``host.answered()`` when a command of its own succeeds (a periodic task's, at least once every
few seconds), and every such fault clears, whichever task reported it. A fault the server
answered with an error (a refused command, a key of another type) is not cleared by it: only
the step that failed, succeeding, clears it.

``host.options.channel_capacity`` is the channel's size before the read count is known; the
channel is made at least one read large (``read_count``, which ``open`` may still set) once
``open`` has returned.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, final

import trio

from .reporting import with_cause

if TYPE_CHECKING:
    from .routing import SubscriberOptions

__all__ = ["Fault", "SubscriptionHost"]


@final
@dataclass(frozen=True, slots=True)
class Fault:
    """One change of a fault: it began (``cleared`` False) or it cleared (``cleared`` True)."""

    subscription: str
    #: A short, stable name of what went wrong (``"connection"``, ``"flush"``, ``"gap"``).
    kind: str
    message: str
    error: BaseException | None = None
    cleared: bool = False

    def __str__(self) -> str:
        what = "cleared" if self.cleared else self.message
        return f"{self.subscription}: {self.kind}: {what}"


@final
class SubscriptionHost:
    """The subscription, as its source sees it; see the module docstring."""

    def __init__(
        self,
        label: str,
        options: SubscriberOptions,
        nursery: trio.Nursery,
        *,
        logger: logging.Logger,
        on_fault: Callable[[Fault], None],
        retry_target: str | None = None,
    ) -> None:
        self.label = label
        #: What this subscription's retry copies name as their target
        #: (``delivery.retry_headers(delivery, host.retry_target)``): ``<app>/<subscription>``.
        #: Other subscriptions of the stream pass over a copy meant for this one. A source whose
        #: members share the reading (a consumer group) sets it in ``open`` to name the group,
        #: so any member handles the copy.
        self.retry_target = retry_target or label
        self.options = options
        self._nursery = nursery
        self._log = logger
        self._on_fault = on_fault
        #: Faults that began and have not cleared, by kind.
        self.active: dict[str, Fault] = {}
        #: Faults reported since the subscription started (each report counts).
        self.count = 0
        #: Per lasting fault of failed settles: how many settles failed, and what became of
        #: their deliveries (said when it clears).
        self._failed_settles: dict[str, tuple[int, str]] = {}

    def start_soon(
        self, fn: Callable[..., Awaitable[Any]], *args: Any, name: str | None = None
    ) -> None:
        """Run ``fn(*args)`` in the subscription's nursery (see the module docstring)."""
        self._nursery.start_soon(fn, *args, name=name or f"{self.label}: {fn!r}")

    def report_fault(
        self,
        kind: str,
        message: str,
        *,
        error: BaseException | None = None,
        left: str | None = None,
    ) -> None:
        """A fault of ``kind`` began (or goes on): counted each time, logged when it begins.
        ``left``, for a settle that failed: what became of its delivery; the settles that
        fail while the fault lasts are counted, and said with ``left`` when it clears."""
        self.count += 1
        fault = Fault(self.label, kind, message, error)
        began = kind not in self.active
        self.active[kind] = fault
        if left is not None:
            failed = 1 if began else self._failed_settles.get(kind, (0, left))[0] + 1
            self._failed_settles[kind] = (failed, left)
        if began:
            self._log.warning(
                "%s: fault %r: %s (recovering)", self.label, kind, _with_cause(message, error)
            )
            if error is not None:
                self._log.debug("%s: the traceback of fault %r", self.label, kind, exc_info=error)
        self._on_fault(fault)

    def answered(self) -> None:
        """The source's server answered a command: every fault caused by its not answering
        (see the module docstring) clears. Cheap when no fault lasts (a periodic task may call
        it at each pass); synchronous."""
        if not self.active:
            return
        for kind, fault in list(self.active.items()):
            if _unanswered(fault.error):
                self.clear_fault(kind)

    def clear_fault(self, kind: str) -> None:
        """The fault of ``kind`` is over (nothing happens if none is active)."""
        fault = self.active.pop(kind, None)
        failed_settles = self._failed_settles.pop(kind, None)
        if fault is None:
            return
        if failed_settles is None:
            self._log.info("%s: fault %r cleared", self.label, kind)
        else:
            failed, left = failed_settles
            self._log.info(
                "%s: fault %r cleared after %d failed settle%s%s",
                self.label,
                kind,
                failed,
                "" if failed == 1 else "s",
                f"; {left}" if left else "",
            )
        self._on_fault(Fault(self.label, kind, fault.message, cleared=True))


def _with_cause(message: str, error: BaseException | None) -> str:
    """``message``, then the server and the innermost cause of ``error`` where it does not
    name them already."""
    if error is None:
        return message
    server = _server_of(error)
    if server is not None and server not in message:
        message = f"{message}; server {server}"
    return with_cause(error, message)


def _server_of(error: BaseException) -> str | None:
    """``host:port`` of the first error of ``error``'s ``__cause__`` chain that names its server
    in an ``address`` (the Redis client's errors do), or None."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        address = getattr(current, "address", None)
        if isinstance(address, tuple) and len(address) == 2:
            host, port = address
            return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
        current = current.__cause__
    return None


def _unanswered(error: BaseException | None) -> bool:
    """Whether ``error``, or an error in its ``__cause__`` chain, says a server did not answer
    (a ``ConnectionError``: lost, refused, reset; a ``TimeoutError``: no reply in time)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, ConnectionError | TimeoutError):
            return True
        seen.add(id(error))
        error = error.__cause__
    return False
