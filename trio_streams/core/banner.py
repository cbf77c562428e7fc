"""The startup banner: what a running app reads, from where, and how, in a few INFO lines.

One line names the app and its brokers, then one line per subscription: its name, its source,
the broker, where it starts (the tip, the beginning, a position, or where a durable consumer
stopped), and how it runs (workers, ordered lanes, batches, ``max_attempts``, the dead letter).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .routing import BY_STREAM

if TYPE_CHECKING:
    from .broker import Broker
    from .routing import Subscription
    from .subscription import SubscriptionRunner

__all__ = ["describe_subscription", "log_banner"]


def log_banner(
    logger: logging.Logger,
    app: str,
    brokers: Sequence[Broker],
    runners: Sequence[SubscriptionRunner],
) -> None:
    """Log the banner at INFO (nothing is built when INFO is off)."""
    if not logger.isEnabledFor(logging.INFO):
        return
    names = ", ".join(broker.name for broker in brokers) or "no broker"
    logger.info("%s: running, %d subscription(s) on %s", app, len(runners), names)
    for runner in runners:
        logger.info(
            "%s: %s", app, describe_subscription(runner.subscription, starts=runner.source.starts)
        )


def describe_subscription(subscription: Subscription, *, starts: str | None = None) -> str:
    """One line for the startup banner: name, source and where it starts, broker, options.

    ``starts`` replaces where the source declares it starts (the opened source knows better)."""
    source = subscription.source
    options = subscription.options
    parts = [f"workers={options.workers}"]
    if options.by_key is not None:
        parts.append(f"ordered lanes by {'stream' if options.by_key is BY_STREAM else 'key'}")
    if options.batch is not None:
        parts.append(f"batch={options.batch}")
    parts.append(f"max_attempts={options.policy.max_attempts}")
    if options.policy.dead_letter is not None:
        parts.append(f"dead letter {options.policy.dead_letter!r}")
    return (
        f"subscription {subscription.name!r} reads {source!r} on {subscription.broker.name}, "
        f"{starts or _start_of(source)} ({', '.join(parts)})"
    )


def _start_of(source: object) -> str:
    """Where a source starts, from the attributes the stream sources share."""
    durable = getattr(source, "durable", None)
    start_at = getattr(source, "start_at", None)
    replaying = getattr(source, "replaying", None)
    if durable is not None:
        if start_at is not None:
            first = f"from {start_at!r}"
        else:
            first = "from the beginning" if replaying else "from the tip"
        who = "named after its app and subscription" if durable is True else repr(durable)
        return f"resuming durable consumer {who} where it stopped (the first time: {first})"
    if start_at is not None:
        return f"from {start_at!r}" + (", then following" if replaying is False else "")
    if replaying:
        return "replaying from the beginning"
    if replaying is False:
        return "following from the tip"
    return "starting where its transport starts"
