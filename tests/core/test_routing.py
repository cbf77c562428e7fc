"""Routers, prefixes, publishers and mount-time checks."""

import pytest

from trio_streams import (
    App,
    ConfigurationError,
    MemoryBroker,
    MemoryStream,
    Router,
)


async def test_a_router_mounts_its_handlers_with_its_prefix_and_defaults() -> None:
    router = Router(prefix="billing.", max_attempts=5)
    seen: list[tuple[str, int]] = []

    @router.subscriber(MemoryStream("invoices"))
    async def invoices(n: int) -> None:
        seen.append(("invoices", n))

    app = App("svc")
    broker = app.broker(MemoryBroker())
    broker.include_router(router)
    (subscription,) = broker.subscriptions
    assert subscription.source == MemoryStream("billing.invoices")
    assert subscription.options.policy.max_attempts == 5

    async with app.test() as t:
        await t.publish("billing.invoices", 3)
        await t.publish("invoices", 4, unread_ok=True)  # not the prefixed stream
    assert seen == [("invoices", 3)]


async def test_nested_routers_stack_prefixes_and_later_declarations_mount_too() -> None:
    inner = Router(prefix="v1.")
    outer = Router(prefix="api.")
    outer.include_router(inner)
    app = App("svc")
    broker = app.broker(MemoryBroker(prefix="prod."))
    broker.include_router(outer)
    seen: list[int] = []

    @inner.subscriber(MemoryStream("ping"))
    async def ping(n: int) -> None:
        seen.append(n)

    assert [s.source.streams for s in broker.subscriptions] == [("prod.api.v1.ping",)]
    async with app.test() as t:
        await t.publish("prod.api.v1.ping", 1)
    assert seen == [1]


async def test_router_publishers_publish_with_the_routers_prefix() -> None:
    router = Router(prefix="shop.")
    out = router.publisher("receipts")

    @out
    @router.subscriber(MemoryStream("orders"))
    async def handle(n: int) -> int:
        return n * 10

    with pytest.raises(ConfigurationError, match="not yet included"):
        _ = out.broker
    app = App("svc")
    broker = app.broker(MemoryBroker())
    broker.include_router(router)
    async with app.test() as t:
        await t.publish("shop.orders", 2)
        assert [m.json() for m in t.published("shop.receipts")] == [20]
        await out.publish(5)
        assert [m.json() for m in t.published("shop.receipts")] == [20, 5]


def test_a_router_is_included_once() -> None:
    router = Router()
    broker = MemoryBroker()
    broker.include_router(router)
    with pytest.raises(ConfigurationError, match="included once"):
        MemoryBroker().include_router(router)
    with pytest.raises(ConfigurationError, match="included once"):
        router.include_router(router)


def test_subscription_names_default_to_the_handler_and_stay_unique() -> None:
    broker = MemoryBroker()

    async def handle(n: int) -> None: ...

    broker.subscriber(MemoryStream("a"))(handle)
    broker.subscriber(MemoryStream("b"))(handle)
    broker.subscriber(MemoryStream("c"), name="custom")(handle)
    names = [s.name for s in broker.subscriptions]
    assert names[1] == names[0] + "#2"
    assert names[2] == "custom"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"workers": 0}, "workers must be an int >= 1"),
        ({"batch": 0}, "batch must be an int >= 1"),
        ({"max_attempts": 0}, "max_attempts counts deliveries"),
        ({"retry_delay": -1}, "retry_delay must be >= 0"),
        ({"max_wait": 0}, "max_wait must be > 0"),
        ({"buffer": 0}, "buffer must be an int >= 1"),
        ({"batch": 2, "by_key": "k"}, "cannot be combined"),
    ],
)
def test_bad_subscriber_options_are_refused_at_declaration(
    options: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        MemoryBroker().subscriber(MemoryStream("s"), **options)  # type: ignore[arg-type]


def test_batch_handlers_cannot_have_publishers_in_either_decorator_order() -> None:
    broker = MemoryBroker()

    async def first(numbers: list[int]) -> None: ...

    async def second(numbers: list[int]) -> None: ...

    with pytest.raises(ConfigurationError, match="cannot have publishers"):
        broker.subscriber(MemoryStream("s"), batch=2)(broker.publisher("out")(first))
    mounted = broker.subscriber(MemoryStream("s"), batch=2)(second)
    with pytest.raises(ConfigurationError, match="cannot have publishers"):
        broker.publisher("out")(mounted)


def test_a_seeker_parameter_needs_a_seekable_source() -> None:
    from trio_streams import Seeker, UnsupportedError

    broker = MemoryBroker()

    async def handle(n: int, seeker: Seeker) -> None: ...

    broker.subscriber(MemoryStream("s"))(handle)
    with pytest.raises(UnsupportedError, match=r"takes a Seeker, but .* cannot seek"):
        broker.subscriber(MemoryStream("s", group="g"))(handle)
