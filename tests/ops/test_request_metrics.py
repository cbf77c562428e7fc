"""Prometheus metrics of request-reply: requests made, what each came to, the round trip of
those answered, requests in flight and late replies per broker; on the handler side, the
replies sent, a value or a failure."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import trio
import trio.testing
from prometheus_client import CollectorRegistry, generate_latest

from tests.redis_servers import redis_server
from trio_streams import App, Destination, MemoryBroker, MemoryStream
from trio_streams.core.replies import RemoteError
from trio_streams.core.requests import NoResponders, ReplyLost, RequestTimeout
from trio_streams.prometheus import PrometheusMiddleware
from trio_streams.running.http_endpoints import serve_endpoints

from .http_client import get
from .test_metrics import samples

MEMORY = {"broker": "memory"}
ORDERS = {"broker": "memory", "destination": "orders"}


@dataclass
class Order:
    id: int


class Metrics:
    """A middleware on its own registry, and what it exports now."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.middleware = PrometheusMiddleware(registry=self.registry)

    def value(self, name: str, **labels: str) -> float:
        got = samples(generate_latest(self.registry))
        return got.get((f"trio_streams_{name}", tuple(sorted(labels.items()))), 0.0)

    def names(self) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
        return set(samples(generate_latest(self.registry)))


def replying_app(metrics: Metrics, release: trio.Event | None = None) -> App:
    """``double`` answers an order with twice its id, a negative one with its failure (one
    attempt); with ``release``, it waits for it before answering order 0."""
    app = App("svc", middlewares=[metrics.middleware])
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("orders"), max_attempts=1, name="double")
    async def double(order: Order) -> int:
        if order.id < 0:
            raise ValueError("negative")
        if order.id == 0 and release is not None:
            await release.wait()
        return order.id * 2

    return app


# ---- the metrics, a sentence a test ----------------------------------------------------------


async def test_requests_sent_are_counted_by_broker_and_destination() -> None:
    metrics = Metrics()
    async with replying_app(metrics).test() as t:
        for n in (1, 2, 3):
            await t.request("orders", Order(n))
    assert metrics.value("requests_total", **ORDERS) == 3


async def test_requests_are_counted_by_outcome_ok_remote_error_and_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    metrics = Metrics()
    async with replying_app(metrics).test() as t:
        await t.request("orders", Order(1))
        await t.request("orders", Order(2))
        with pytest.raises(RemoteError):
            await t.request("orders", Order(-1))
        with pytest.raises(RequestTimeout):
            await t.request("nobody", Order(1), timeout=1, unread_ok=True)
    outcomes = {
        outcome: metrics.value("request_outcomes_total", **ORDERS, outcome=outcome)
        for outcome in ("ok", "remote_error", "timeout", "no_responders", "lost")
    }
    assert outcomes == {"ok": 2, "remote_error": 1, "timeout": 0, "no_responders": 0, "lost": 0}
    nobody = {"broker": "memory", "destination": "nobody"}
    assert metrics.value("request_outcomes_total", **nobody, outcome="timeout") == 1
    assert metrics.value("requests_total", **nobody) == 1


async def test_a_request_whose_reply_subscription_is_lost_is_counted_lost() -> None:
    metrics = Metrics()
    broker = MemoryBroker(middlewares=[metrics.middleware])

    async def waits() -> None:
        with pytest.raises(ReplyLost):
            await broker.request(Order(1), "nobody")

    async with trio.open_nursery() as nursery, broker:
        nursery.start_soon(waits)
        await trio.testing.wait_all_tasks_blocked()
    labels = {"broker": "memory", "destination": "nobody"}
    assert metrics.value("request_outcomes_total", **labels, outcome="lost") == 1


async def test_the_round_trip_histogram_observes_the_requests_answered(
    autojump_clock: trio.testing.MockClock,
) -> None:
    metrics = Metrics()
    release = trio.Event()
    async with replying_app(metrics, release).test() as t:
        await t.request("orders", Order(1))
        with pytest.raises(RemoteError):
            await t.request("orders", Order(-1))
        with pytest.raises(RequestTimeout):
            await t.request("orders", Order(0), timeout=1)  # its handler waits for release
        release.set()
    # The two answered; a timeout's wait is the timeout, not a round trip.
    assert metrics.value("request_duration_seconds_count", **ORDERS) == 2
    assert metrics.value("request_duration_seconds_bucket", **ORDERS, le="+Inf") == 2


async def test_late_replies_dropped_are_counted_per_broker(
    autojump_clock: trio.testing.MockClock,
) -> None:
    metrics = Metrics()
    release = trio.Event()
    async with replying_app(metrics, release).test() as t:
        with pytest.raises(RequestTimeout):
            await t.request("orders", Order(0), timeout=1)
        assert metrics.value("late_replies_total", **MEMORY) == 0
        release.set()  # the handler answers now: nobody waits for it
        await t.settled()
        await trio.testing.wait_all_tasks_blocked()
        assert metrics.value("late_replies_total", **MEMORY) == 1
    assert metrics.value("replies_sent_total", **MEMORY, outcome="value") == 1


async def test_requests_in_flight_is_a_gauge_per_broker() -> None:
    metrics = Metrics()
    release = trio.Event()
    async with replying_app(metrics, release).test() as t, trio.open_nursery() as nursery:
        nursery.start_soon(t.request, "orders", Order(0))
        await trio.testing.wait_all_tasks_blocked()
        assert metrics.value("requests_in_flight", **MEMORY) == 1
        release.set()
    assert metrics.value("requests_in_flight", **MEMORY) == 0


async def test_replies_sent_are_counted_by_outcome_value_or_error() -> None:
    metrics = Metrics()
    async with replying_app(metrics).test() as t:
        await t.request("orders", Order(1))
        await t.request("orders", Order(2))
        with pytest.raises(RemoteError):
            await t.request("orders", Order(-1))
    assert metrics.value("replies_sent_total", **MEMORY, outcome="value") == 2
    assert metrics.value("replies_sent_total", **MEMORY, outcome="error") == 1


# ---- the nasty cases -------------------------------------------------------------------------


async def test_a_reply_is_a_publish_under_one_destination_label_not_its_reply_address() -> None:
    metrics = Metrics()
    async with replying_app(metrics).test() as t:
        await t.request("orders", Order(1))
        await t.request("orders", Order(2))
    assert metrics.value("published_total", broker="memory", destination="(reply)") == 2
    assert metrics.value("published_total", **ORDERS) == 2  # the requests themselves
    destinations = {dict(labels).get("destination") for _, labels in metrics.names()}
    assert not [d for d in destinations if d and d.startswith("trio-streams")]


async def test_a_cancelled_request_is_counted_cancelled_and_leaves_no_request_in_flight() -> None:
    metrics = Metrics()
    release = trio.Event()
    async with replying_app(metrics, release).test() as t:
        with trio.CancelScope() as scope:

            async def cancel_when_waiting() -> None:
                await trio.testing.wait_all_tasks_blocked()
                scope.cancel()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(cancel_when_waiting)
                await t.request("orders", Order(0))  # its handler waits for release
        release.set()  # its late reply is the handler's business, not the request's
    assert scope.cancelled_caught
    assert metrics.value("request_outcomes_total", **ORDERS, outcome="cancelled") == 1
    assert metrics.value("requests_in_flight", **MEMORY) == 0
    assert metrics.value("request_duration_seconds_count", **ORDERS) == 0


async def test_late_replies_never_go_backwards_when_the_broker_opens_a_new_reply_inbox(
    autojump_clock: trio.testing.MockClock,
) -> None:
    metrics = Metrics()
    app = App("svc", middlewares=[metrics.middleware])
    broker = app.broker(MemoryBroker())
    gates: list[trio.Event] = []

    @broker.subscriber(MemoryStream("orders"), name="slow")
    async def slow(order: Order) -> int:
        await gates[-1].wait()
        return order.id

    for _ in range(2):  # each run of the app connects its broker anew: a new inbox
        gates.append(trio.Event())
        async with app.test() as t:
            with pytest.raises(RequestTimeout):
                await t.request("orders", Order(1), timeout=1)
            gates[-1].set()
            await t.settled()
            await trio.testing.wait_all_tasks_blocked()
            assert broker.late_replies == 1  # the broker counts per inbox
    # Scraped once, at the end: what the first inbox dropped is carried all the same.
    assert metrics.value("late_replies_total", **MEMORY) == 2


# ---- live --------------------------------------------------------------------------------------


async def test_a_live_redis_request_reply_is_counted_and_scraped_over_http() -> None:
    from trio_streams.redis import RedisBroker, RedisStream

    with redis_server() as server:
        metrics = Metrics()
        app = App("svc", middlewares=[metrics.middleware])
        broker = app.broker(RedisBroker(server.url))

        @broker.subscriber(RedisStream("orders", group="g"), max_attempts=1, name="double")
        async def double(order: Order) -> int:
            if order.id < 0:
                raise ValueError("negative")
            return order.id * 2

        async with trio.open_nursery() as nursery:
            running = await nursery.start(app.serve)
            [url] = await nursery.start(serve_endpoints, app, "127.0.0.1", 0)
            with trio.fail_after(20):
                assert (await broker.request(Order(21), "orders")).json() == 42
                with pytest.raises(RemoteError):
                    await broker.request(Order(-1), "orders")
                with pytest.raises(NoResponders):
                    await broker.request(Order(1), Destination.channel("nobody"))
                _, _, body = await get(url, "/metrics")
            await running.aclose()
            nursery.cancel_scope.cancel()
    got = samples(body)

    def value(name: str, **labels: str) -> float:
        return got.get((f"trio_streams_{name}", tuple(sorted(labels.items()))), 0.0)

    orders = {"broker": "redis", "destination": "orders"}
    nobody = {"broker": "redis", "destination": "nobody"}
    assert value("requests_total", **orders) == 2
    assert value("request_outcomes_total", **orders, outcome="ok") == 1
    assert value("request_outcomes_total", **orders, outcome="remote_error") == 1
    assert value("request_outcomes_total", **nobody, outcome="no_responders") == 1
    assert value("request_duration_seconds_count", **orders) == 2
    assert value("requests_in_flight", broker="redis") == 0
    assert value("late_replies_total", broker="redis") == 0
    assert value("replies_sent_total", broker="redis", outcome="value") == 1
    assert value("replies_sent_total", broker="redis", outcome="error") == 1
    assert value("published_total", broker="redis", destination="(reply)") == 2
