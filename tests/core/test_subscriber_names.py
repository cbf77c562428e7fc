"""``@broker.subscriber("orders")``: a plain stream name is the broker's default subscription.

One test per sentence of the contract: what a name is on each broker, through routers, with the
other options, refused when wrong, and alike under ``app.test()``, in AsyncAPI and in the
startup banner. The transports' own behaviour on a real file and a real server is in
``tests/file/test_subscriber_names.py`` and ``tests/redis/streams/test_subscriber_names.py``.
"""

from __future__ import annotations

import json
import logging
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cli.support import cli
from trio_streams import (
    App,
    ConfigurationError,
    Context,
    MemoryBroker,
    MemoryStream,
    Position,
    Router,
    UnsupportedError,
    retry,
)
from trio_streams.core.broker import Broker
from trio_streams.core.transport import Source
from trio_streams.file import FileBroker, FileStream
from trio_streams.integrations.asyncapi import asyncapi_document
from trio_streams.redis import RedisBroker, RedisStream
from trio_streams.redis.streams import Mode
from trio_streams.running.supervisor import check_workers

BrokerFactory = Callable[[Path], Broker]

#: Each broker, with the explicit source a plain name "orders" stands for on it.
BROKERS: dict[str, tuple[BrokerFactory, Source]] = {
    "memory": (lambda _: MemoryBroker(), MemoryStream("orders")),
    "redis": (lambda _: RedisBroker("redis://127.0.0.1:1"), RedisStream("orders")),
    "file": (lambda tmp: FileBroker(tmp / "names.ss"), FileStream("orders", durable=True)),
}


async def _noop(n: int) -> None:
    pass


# ---- what a plain name is, per broker --------------------------------------------------------


def test_a_plain_name_on_a_memory_broker_is_the_live_in_process_stream_of_that_name() -> None:
    broker = MemoryBroker()
    broker.subscriber("orders")(_noop)
    (subscription,) = broker.subscriptions
    assert subscription.source == MemoryStream("orders")


def test_a_plain_name_on_a_redis_broker_is_a_consumer_group_member_of_that_stream() -> None:
    broker = RedisBroker("redis://127.0.0.1:1")
    broker.subscriber("orders")(_noop)
    (subscription,) = broker.subscriptions
    source = subscription.source
    assert source == RedisStream("orders")
    assert isinstance(source, RedisStream) and source.mode is Mode.GROUP
    # No group of its own and none on the broker: the app running it names it (<app>/<sub>).
    assert source.group is None


def test_a_plain_name_on_a_redis_broker_takes_the_brokers_group_and_consumer() -> None:
    broker = RedisBroker("redis://127.0.0.1:1", group="billing", consumer="c1")
    broker.subscriber("orders")(_noop)
    (subscription,) = broker.subscriptions
    assert subscription.source == RedisStream("orders", group="billing", consumer="c1")


def test_a_plain_name_on_a_file_broker_is_a_durable_consumer_named_after_the_app(
    tmp_path: Path,
) -> None:
    broker = FileBroker(tmp_path / "names.ss")
    broker.subscriber("orders")(_noop)
    (subscription,) = broker.subscriptions
    assert subscription.source == FileStream("orders", durable=True)
    assert repr(subscription.source) == "FileStream('orders', durable=True)"


def test_a_broker_without_a_default_subscription_refuses_a_name_and_says_what_it_reads() -> None:
    class Plain(Broker):
        source_types = (MemoryStream,)

        def connect(self) -> Any:  # pragma: no cover - never connected
            raise NotImplementedError

    with pytest.raises(
        UnsupportedError,
        match=r"handler _noop: subscriber\('orders'\) on Plain: Plain has no default "
        r"subscription for a plain name: give a source \(MemoryStream\(\.\.\.\)\)",
    ):
        Plain().subscriber("orders")(_noop)


@pytest.mark.parametrize("kind", BROKERS)
def test_explicit_sources_stay_the_full_form_beside_names(kind: str, tmp_path: Path) -> None:
    make, default = BROKERS[kind]
    broker = make(tmp_path)
    explicit = {
        "memory": MemoryStream("orders").replay(),
        "redis": RedisStream("orders").tail(),
        "file": FileStream("orders").replay(),
    }[kind]
    broker.subscriber("orders", name="by_name")(_noop)
    broker.subscriber(explicit, name="explicit")(_noop)
    assert {s.name: s.source for s in broker.subscriptions} == {
        "by_name": default,
        "explicit": explicit,
    }


def test_the_memory_default_is_what_app_test_runs_the_other_brokers_names_as(
    tmp_path: Path,
) -> None:
    memory = MemoryBroker().source_for("orders")
    assert memory == MemoryStream("orders")
    for kind in ("redis", "file"):
        make, _ = BROKERS[kind]
        stand_in = make(tmp_path).source_for("orders").in_process()
        assert isinstance(stand_in, MemoryStream)
        # The live tail from the tip, every subscription its own reader: the memory default.
        assert (stand_in.keys, stand_in.group, stand_in.replaying) == (("orders",), None, False)
        assert stand_in.start_at in (None, Position.end())


# ---- routers ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", BROKERS)
def test_a_routers_name_is_resolved_when_its_declarations_reach_a_broker(
    kind: str, tmp_path: Path
) -> None:
    make, default = BROKERS[kind]
    inner = Router(prefix="v1.")
    outer = Router(prefix="shop.")

    inner.subscriber("orders", name="early")(_noop)

    outer.include_router(inner)
    broker = make(tmp_path)
    broker.include_router(outer)

    # Declared once the router is in a broker: resolved at once.
    inner.subscriber("orders", name="late")(_noop)

    expected = typing.cast(Any, default).with_prefix("shop.v1.")
    assert {s.name: s.source for s in broker.subscriptions} == {"early": expected, "late": expected}


def test_a_routers_name_is_prefixed_by_the_broker_too_and_takes_its_group() -> None:
    router = Router(prefix="shop.")
    router.subscriber("orders")(_noop)
    broker = RedisBroker("redis://127.0.0.1:1", prefix="prod.", group="billing")
    broker.include_router(router)
    (subscription,) = broker.subscriptions
    assert subscription.source == RedisStream("prod.shop.orders", group="billing")


def test_a_name_the_transport_refuses_only_with_a_routers_prefix_is_refused_at_inclusion(
    tmp_path: Path,
) -> None:
    router = Router(prefix="shop/")  # a stream file's keys hold no "/"
    router.subscriber("orders")(_noop)  # a router has no transport to ask: accepted here
    with pytest.raises(
        ConfigurationError,
        match=r"handler _noop: subscriber\('shop/orders'\) on file .*: stream key 'shop/orders' "
        r"is not valid in a stream file: at most 249 characters of \[A-Za-z0-9\._-\]",
    ):
        FileBroker(tmp_path / "names.ss").include_router(router)


# ---- the other options -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", BROKERS)
def test_other_subscriber_options_keep_working_with_a_name(kind: str, tmp_path: Path) -> None:
    make, _ = BROKERS[kind]
    router = Router(max_attempts=4)
    router.subscriber("orders", workers=3, dead_letter="orders.dead", count=10, name="billing")(
        _noop
    )
    broker = make(tmp_path)
    broker.include_router(router)
    (subscription,) = broker.subscriptions
    assert subscription.name == "billing"
    assert subscription.options.workers == 3
    assert subscription.options.policy.max_attempts == 4  # the router's default
    assert subscription.options.policy.dead_letter == "orders.dead"
    assert subscription.transport_options == {"count": 10}


@pytest.mark.parametrize(
    ("kind", "options", "refusal"),
    [
        ("file", {"pipeline": True}, r"does not understand subscriber option\(s\) \['pipeline'\]"),
        ("redis", {"count": 0}, "count must be an int >= 1, got 0"),
        ("memory", {"dead_letter": "orders"}, "is read by its own subscription"),
    ],
)
def test_what_a_transport_refuses_of_a_name_it_refuses_at_declaration(
    kind: str, options: dict[str, Any], refusal: str, tmp_path: Path
) -> None:
    make, _ = BROKERS[kind]
    with pytest.raises(ConfigurationError, match=refusal):
        make(tmp_path).subscriber("orders", **options)(_noop)


# ---- what is refused -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "named"),
    [
        (42, r"not 42 \(int\)"),
        (None, r"not None \(NoneType\)"),
        (b"orders", r"not b'orders' \(bytes\)"),
        (RedisStream, r"not <class .*RedisStream'> \(ABCMeta\)"),
        ("", "not an empty name, which names no stream"),
    ],
)
def test_a_wrong_type_or_an_empty_name_is_refused_naming_what_was_given_and_what_is_accepted(
    given: object, named: str
) -> None:
    router = Router()
    with pytest.raises(ConfigurationError, match=named) as refused:
        router.subscriber(given)  # type: ignore[arg-type]
    assert "takes a stream name (a non-empty str" in str(refused.value)
    assert "or a source (RedisStream(...), FileStream(...), MemoryStream(...)" in str(refused.value)


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("or ders", "is not valid in a stream file: at most 249 characters of"),
        ("x" * 250, "is not valid in a stream file: at most 249 characters of"),
        ("SEA_STREAMER_INTERNAL", "is reserved by the stream-file format"),
    ],
)
def test_a_name_a_file_broker_refuses_is_refused_at_declaration_naming_the_key(
    key: str, why: str, tmp_path: Path
) -> None:
    broker = FileBroker(tmp_path / "names.ss")
    with pytest.raises(ConfigurationError, match=why) as refused:
        broker.subscriber(key)(_noop)
    assert f"handler _noop: subscriber({key!r}) on {broker.name}" in str(refused.value)
    assert broker.subscriptions == []


# ---- app.test() ------------------------------------------------------------------------------


def _retrying_app(kind: str, tmp_path: Path, source: Source | str) -> tuple[App, list[Any]]:
    """An app whose handler fails message 2 once; what it saw: (message, attempt)."""
    make, _ = BROKERS[kind]
    app = App("svc")
    broker = app.broker(make(tmp_path))
    seen: list[Any] = []

    @broker.subscriber(source, max_attempts=3, workers=2, name="handle")
    async def handle(n: int, ctx: Context) -> Any:
        seen.append((n, ctx.attempt))
        return retry() if n == 2 and ctx.attempt == 1 else None

    return app, seen


@pytest.mark.parametrize("kind", BROKERS)
async def test_app_test_runs_a_name_subscribed_handler_in_memory_like_the_explicit_form(
    kind: str, tmp_path: Path
) -> None:
    runs: list[list[Any]] = []
    for source in ("orders", BROKERS[kind][1]):
        app, seen = _retrying_app(kind, tmp_path, source)
        async with app.test() as t:
            for n in (1, 2, 3):
                await t.publish("orders", n)
            assert not t.handler("handle").errors
        runs.append(sorted(seen))
    by_name, explicit = runs
    assert by_name == explicit == [(1, 1), (2, 1), (2, 2), (3, 1)]


# ---- descriptions ----------------------------------------------------------------------------


def _described_app(tmp_path: Path, sources: dict[str, Source | str]) -> App:
    app = App("shop")
    for kind, source in sources.items():
        broker = app.broker(BROKERS[kind][0](tmp_path))

        @broker.subscriber(source, name=f"{kind}_orders")
        async def handle(order: int) -> None:
            """Take an order."""

    return app


def test_the_asyncapi_document_of_names_is_the_document_of_the_sources_they_stand_for(
    tmp_path: Path,
) -> None:
    by_name = asyncapi_document(_described_app(tmp_path, dict.fromkeys(BROKERS, "orders")))
    explicit = asyncapi_document(_described_app(tmp_path, {k: v[1] for k, v in BROKERS.items()}))
    assert by_name == explicit
    summaries = {op["summary"] for op in by_name["operations"].values()}
    assert summaries == {
        "memory_orders: MemoryStream('orders')",
        "redis_orders: RedisStream('orders')",
        "file_orders: FileStream('orders', durable=True)",
    }
    binding = by_name["channels"]["redis.orders"]["bindings"]["redis"]
    assert binding["method"] == "xreadgroup"


def test_the_asyncapi_command_shows_the_source_a_name_resolved_to() -> None:
    result = cli("asyncapi", "tests.core.names_app:app")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    summaries = sorted(op["summary"] for op in document["operations"].values())
    assert summaries == [
        "archive: FileStream('orders', durable=True)",
        "bill: RedisStream('orders', group='billing')",
        "count: MemoryStream('orders')",
    ]


async def test_the_startup_banner_shows_the_source_a_name_resolved_to(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    app = _described_app(tmp_path, dict.fromkeys(BROKERS, "orders"))
    with caplog.at_level(logging.INFO, logger="trio_streams.app.shop"):
        async with app.test():
            pass
    lines = {r.getMessage().split(" on ")[0] for r in caplog.records if "reads" in r.getMessage()}
    assert lines == {
        "shop: subscription 'memory_orders' reads MemoryStream('orders')",
        "shop: subscription 'redis_orders' reads RedisStream('orders')",
        "shop: subscription 'file_orders' reads FileStream('orders', durable=True)",
    }
    (file_line,) = [r.getMessage() for r in caplog.records if "'file_orders'" in r.getMessage()]
    assert "resuming durable consumer named after its app and subscription" in file_line


def test_the_subscriber_type_hints_take_a_source_or_a_name() -> None:
    hints = typing.get_type_hints(Router.subscriber)
    assert hints["source"] == Source | str


# ---- run --workers ---------------------------------------------------------------------------


def test_run_workers_refuses_a_file_name_subscription_and_splits_a_redis_one(
    tmp_path: Path,
) -> None:
    app = _described_app(tmp_path, {"redis": "orders", "file": "orders"})
    (problem,) = check_workers(app, 2, allow_broadcast=True)
    assert problem.startswith(
        "subscription 'file_orders' (FileStream('orders', durable=True)) is the consumer "
        "'<app>.<subscription>', which one process at a time can run"
    )
