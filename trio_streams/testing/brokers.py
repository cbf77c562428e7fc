"""Which of an app's brokers a destination named in a test is on.

``t.publish("orders", ...)`` and ``t.published("orders.dead")`` take no ``broker=`` when only
one broker can mean the name: the broker whose subscriptions read it (for a channel, also one a
pattern subscription matches), whose publishers publish to it, or whose handlers dead-letter to
it, and that has that kind of destination at all (a ``Destination.list`` is never on a stream
file). A name more than one broker uses, or none does, is refused with one line naming the
candidates and how to pick one (``broker=``).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..broker import Broker
from ..destinations import Destination
from ..errors import ConfigurationError
from ..memory.channels import MemoryChannel

__all__ = ["broker_for"]


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
