"""Which of an app's brokers a destination named in a test is on.

``t.publish("orders", ...)`` and ``t.published("orders.dead")`` take no ``broker=`` when only
one broker can mean the name: the broker whose subscriptions read it (for a channel, also one a
pattern subscription matches), whose publishers publish to it, or whose handlers dead-letter to
it, and that has that kind of destination at all (a ``Destination.list`` is never on a stream
file). A name more than one broker uses, or none does, is refused with one line naming the
candidates and how to pick one (``broker=``).

It also tells a typo from a name the app uses: ``t.publish`` to a destination no subscription
of the app reads, and ``t.published`` of one nothing of the app writes to, are refused with one
line listing the names the app knows, the closest first (:func:`check_read`,
:func:`check_written`).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from ..core.broker import Broker
from ..core.destinations import Destination, DestinationKind
from ..core.errors import ConfigurationError
from ..core.routing import Subscription
from ..memory.channels import MemoryChannel
from ..memory.queues import MemoryList

__all__ = ["broker_for", "check_read", "check_written"]


def names_on(broker: Broker) -> set[str]:
    """Every destination name ``broker`` reads, publishes to or dead-letters to, prefixed."""
    names = {publisher.full_destination for publisher in broker.all_publishers()}
    for subscription in broker.subscriptions:
        names.update(subscription.source.streams)
        if subscription.options.policy.dead_letter:
            names.add(subscription.options.policy.dead_letter)
    return names


def means(broker: Broker, target: Destination) -> bool:
    """Whether ``target`` is on ``broker``: a kind it has, and a name it uses (for a channel,
    one of its pattern subscriptions may match the name instead)."""
    if target.kind not in broker.destination_kinds:
        return False
    if target.name in names_on(broker):
        return True
    return target.is_channel and any(
        isinstance(reads := s.source.in_process(), MemoryChannel) and reads.matches(target.name)
        for s in broker.subscriptions
    )


def reads(subscription: Subscription, target: Destination) -> bool:
    """Whether ``subscription`` reads what is published to ``target``: a stream it reads, its
    list, or a channel of its bus that one of its names (or patterns) matches."""
    source = subscription.source.in_process()
    if isinstance(source, MemoryChannel):
        sharded = target.kind is DestinationKind.SHARD_CHANNEL
        return target.is_channel and sharded == source.sharded and source.matches(target.name)
    if isinstance(source, MemoryList):
        return target.kind is DestinationKind.LIST and target.name == source.key
    return target.kind is DestinationKind.STREAM and target.name in source.streams


def check_read(
    app_name: str, brokers: Sequence[Broker], broker: Broker, target: Destination
) -> None:
    """Refuse, with one line, a test's publish to ``target`` on ``broker`` that no subscription
    of the app reads (a typo, most often): it would do nothing."""
    if any(reads(s, target) for s in broker.subscriptions):
        return
    read = {n for b in brokers for s in b.subscriptions for n in s.source.streams}
    where = f" on broker {broker.name!r}" if len(brokers) > 1 else ""
    raise ConfigurationError(
        f"no subscription of app {app_name!r}{where} reads {target.kind.value} {target.name!r}; "
        f"{_known(target.name, read, 'it reads')}; publish with unread_ok=True to publish "
        "where nothing reads"
    )


def check_written(app_name: str, brokers: Sequence[Broker], target: Destination) -> None:
    """Refuse, with one line, a look at ``target`` that nothing of the app (on any of its
    ``brokers``) reads, publishes or dead-letters to: a typo, most often, whose messages would
    always be ``[]``. The caller looks only where nothing was published."""
    if any(means(broker, target) for broker in brokers):
        return
    known = {name for b in brokers for name in names_on(b)}
    raise ConfigurationError(
        f"nothing of app {app_name!r} writes to {target.kind.value} {target.name!r} and nothing "
        f"was published to it; {_known(target.name, known, 'it knows')}; look with "
        "unwritten_ok=True to look at it anyway"
    )


def _known(name: str, known: set[str], what: str) -> str:
    """``it knows 'orders', 'invoices'``: the names, the closest to ``name`` first."""
    if not known:
        return f"{what} no destination"
    close = difflib.get_close_matches(name, known, n=len(known), cutoff=0.6)
    ordered = close + sorted(known.difference(close))
    return f"{what} {', '.join(repr(n) for n in ordered)}"


def broker_for(
    app_name: str, brokers: Sequence[Broker], destination: str | Destination, chosen: Broker | None
) -> Broker:
    """The broker of ``brokers`` (the app's, in registration order) that ``destination`` is on;
    ``chosen`` (a test's ``broker=``) wins, if it is one of them."""
    if chosen is not None:
        if chosen not in brokers:
            raise ConfigurationError(f"broker {chosen.name!r} is not a broker of app {app_name!r}")
        return chosen
    if len(brokers) == 1:
        return brokers[0]
    target = Destination.of(destination)
    meaning = [b for b in brokers if means(b, target)]
    if len(meaning) == 1:
        return meaning[0]
    labels = _labels(brokers)
    if meaning:
        where = " or ".join(labels[b] for b in meaning)
        raise ConfigurationError(
            f"{target.kind.value} {target.name!r} could be on broker {where}: "
            "say which with broker="
        )
    raise ConfigurationError(
        f"{target.kind.value} {target.name!r} is named by none of the brokers of app "
        f"{app_name!r} ({', '.join(labels.values())}): say which with broker="
    )


def _labels(brokers: Sequence[Broker]) -> dict[Broker, str]:
    """Each broker's name, with its place among the app's brokers where two share a name."""
    names = [b.name for b in brokers]
    return {
        b: repr(b.name) if names.count(b.name) == 1 else f"{b.name!r} ({_ordinal(n)})"
        for n, b in enumerate(brokers, 1)
    }


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
