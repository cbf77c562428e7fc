"""Dependencies: yield with cleanup after the settle, nesting, caching per delivery, overrides,
mount-time checks, batches, and cleanups racing cancellation."""

import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Annotated, Any

import pytest
import trio

from tests.support import serving
from trio_streams import (
    App,
    ConfigurationError,
    Context,
    Depends,
    Header,
    Headers,
    MemoryBroker,
    MemoryStream,
    Position,
    ack,
    drop,
    retry,
)
from trio_streams.core.depends import CLEANUP_TIMEOUT
from trio_streams.core.driver import Seeker
from trio_streams.core.handler import analyse
from trio_streams.core.outcome import Outcome
from trio_streams.memory.broker import MemorySubscription


@dataclass
class Order:
    id: int
    customer: str


def make_app(**options: Any) -> tuple[App, MemoryBroker]:
    app = App("svc", **options)
    return app, app.broker(MemoryBroker())


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What happened, in order; settles of the in-process transport are recorded too."""
    happened: list[str] = []
    settle = MemorySubscription.settle

    async def recording_settle(self: MemorySubscription, delivery: Any, outcome: Outcome) -> None:
        await settle(self, delivery, outcome)
        happened.append(f"settled {outcome.kind.value}")

    monkeypatch.setattr(MemorySubscription, "settle", recording_settle)
    return happened


# ---- yield: the value, and the cleanup after the settle ----------------------------------------


async def test_a_sync_generator_dependency_is_cleaned_up_after_the_delivery_is_settled(
    events: list[str],
) -> None:
    app, broker = make_app()

    def session() -> Iterator[str]:
        events.append("open")
        yield "session"
        events.append("close")

    @broker.subscriber(MemoryStream("orders"))
    async def handle(order: Order, db: Annotated[str, Depends(session)]) -> None:
        events.append(f"handle with {db}")

    async with app.test(raise_errors=True) as t:
        await t.publish("orders", Order(1, "a"))
    assert events == ["open", "handle with session", "settled ack", "close"]


async def test_an_async_generator_dependency_is_cleaned_up_after_the_delivery_is_settled(
    events: list[str],
) -> None:
    app, broker = make_app()

    async def session() -> AsyncIterator[str]:
        events.append("open")
        await trio.lowlevel.checkpoint()
        yield "session"
        await trio.lowlevel.checkpoint()
        events.append("close")

    @broker.subscriber(MemoryStream("orders"))
    async def handle(order: Order, db: str = Depends(session)) -> None:  # type: ignore[assignment]
        events.append(f"handle with {db}")

    async with app.test(raise_errors=True) as t:
        await t.publish("orders", Order(1, "a"))
        await t.publish("orders", Order(2, "b"))
    assert events == ["open", "handle with session", "settled ack", "close"] * 2


async def test_the_cleanup_sees_the_handlers_exception_after_the_retry_is_settled(
    events: list[str],
) -> None:
    app, broker = make_app()

    async def session() -> AsyncIterator[str]:
        try:
            yield "session"
        except RuntimeError as exc:
            events.append(f"rollback after {exc}")
            raise
        else:
            events.append("commit")

    @broker.subscriber(MemoryStream("orders"), max_attempts=2)
    async def handle(order: Order, ctx: Context, db: Annotated[str, Depends(session)]) -> None:
        if ctx.attempt == 1:
            raise RuntimeError("gateway down")

    async with app.test() as t:
        await t.publish("orders", Order(1, "a"))
        assert t.handler(handle).settled == [retry(), ack()]
    assert events == [
        "settled retry",
        "rollback after gateway down",
        "settled ack",
        "commit",
    ]


async def test_a_cleanup_that_swallows_the_exception_changes_nothing() -> None:
    app, broker = make_app()

    def forgiving() -> Iterator[int]:
        try:
            yield 1
        except RuntimeError:
            pass  # swallowing it cannot undo the retry: the delivery is settled

    @broker.subscriber(MemoryStream("s"), max_attempts=2)
    async def handle(n: int, dep: Annotated[int, Depends(forgiving)]) -> None:
        raise RuntimeError("boom")

    async with app.test() as t:
        await t.publish("s", 1)
        assert t.handler(handle).settled == [retry(), drop()]


async def test_cleanups_run_last_entered_first_when_a_later_dependency_fails(
    events: list[str],
) -> None:
    app, broker = make_app()

    def first() -> Iterator[str]:
        try:
            yield "first"
        except LookupError as exc:
            events.append(f"first sees {exc}")
            raise

    async def second() -> AsyncIterator[str]:
        try:
            yield "second"
        finally:
            events.append("second closed")

    def registry() -> str:
        raise LookupError("tenant registry unavailable")

    @broker.subscriber(MemoryStream("s"), max_attempts=1)
    async def handle(
        n: int,
        a: Annotated[str, Depends(first)],
        b: Annotated[str, Depends(second)],
        c: Annotated[str, Depends(registry)],
    ) -> None:
        raise AssertionError("never called")

    async with app.test() as t:
        await t.publish("s", 1)
        record = t.handler(handle)
        assert record.settled == [drop()]
        assert isinstance(record.errors[0], LookupError)
    assert events == ["settled drop", "second closed", "first sees tenant registry unavailable"]


async def test_a_failing_cleanup_is_logged_and_the_settled_outcome_stands(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app, broker = make_app()

    async def flaky() -> AsyncIterator[int]:
        yield 1
        raise OSError("connection reset while closing")

    def twice() -> Iterator[int]:
        yield 1
        yield 2

    @broker.subscriber(MemoryStream("s"), name="orders")
    async def handle(
        n: int, a: Annotated[int, Depends(flaky)], b: Annotated[int, Depends(twice)]
    ) -> None: ...

    async with app.test(raise_errors=True) as t:
        await t.publish("s", 1)
        await t.publish("s", 2)
        assert t.handler(handle).settled == [ack(), ack()]
    failures = [r for r in caplog.records if "cleanup of dependency" in r.getMessage()]
    assert len(failures) == 4
    assert all(r.levelno == logging.ERROR for r in failures)
    assert "orders: the cleanup of dependency test_a_failing_cleanup" in failures[0].getMessage()
    assert {type(r.exc_info[1]) for r in failures if r.exc_info} == {OSError, RuntimeError}


async def test_a_delivery_cancelled_at_shutdown_still_cleans_up_shielded(
    autojump_clock: trio.abc.Clock,
) -> None:
    app, broker = make_app(shutdown_timeout=1)
    seen: list[str] = []
    started = trio.Event()

    async def connection() -> AsyncIterator[str]:
        try:
            yield "conn"
        except trio.Cancelled:
            seen.append("cancelled")
            raise
        finally:
            await trio.sleep(2)  # an await in a cleanup still runs: it is shielded
            seen.append("closed")

    @broker.subscriber(MemoryStream("s"), name="handle")
    async def handle(n: int, conn: Annotated[str, Depends(connection)]) -> None:
        started.set()
        await trio.sleep_forever()

    async with serving(app) as running:
        await running.publish(broker, "s", 1)
        await started.wait()
    assert seen == ["cancelled", "closed"]
    assert running.stats()["handle"].outstanding == 0


async def test_a_cleanup_that_hangs_is_cancelled_after_the_cleanup_timeout(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    app, broker = make_app(shutdown_timeout=1)
    started = trio.Event()
    reached: list[float] = []

    async def stuck() -> AsyncIterator[str]:
        try:
            yield "x"
        finally:
            start = trio.current_time()
            try:
                await trio.sleep_forever()
            finally:
                reached.append(trio.current_time() - start)

    @broker.subscriber(MemoryStream("s"), name="stuck")
    async def handle(n: int, x: Annotated[str, Depends(stuck)]) -> None:
        started.set()
        await trio.sleep_forever()

    with trio.fail_after(CLEANUP_TIMEOUT * 4):
        async with serving(app) as running:
            await running.publish(broker, "s", 1)
            await started.wait()
    assert reached == [pytest.approx(CLEANUP_TIMEOUT)]
    assert f"did not finish within {CLEANUP_TIMEOUT} s" in caplog.text


# ---- nesting ---------------------------------------------------------------------------------


async def test_a_dependency_takes_dependencies_context_headers_position_and_the_payload() -> None:
    app, broker = make_app()

    def tenant(name: Annotated[str, Header("x-tenant")]) -> str:
        return name

    async def settings(who: Annotated[str, Depends(tenant)], headers: Headers) -> dict[str, str]:
        return {"tenant": who, "trace": headers["trace"]}

    def customer(order: Order, where: Position, ctx: Context) -> str:
        assert ctx.attempt == 1
        return f"{order.customer}@{where.describe()}"

    class Gateway:
        def __init__(
            self,
            config: Annotated[dict[str, str], Depends(settings)],
            *,
            who: Annotated[str, Depends(customer)],
            retries: int = 3,
        ) -> None:
            self.description = f"{config['tenant']}/{config['trace']}/{who}/{retries}"

    seen: list[str] = []

    @broker.subscriber(MemoryStream("orders"))
    async def handle(order: Order, gateway: Annotated[Gateway, Depends(Gateway)]) -> None:
        seen.append(gateway.description)

    async with app.test(raise_errors=True) as t:
        await t.publish("orders", Order(1, "ann"), headers={"x-tenant": "acme", "trace": "t1"})
    assert seen == ["acme/t1/ann@sequence:1/3"]


async def test_a_missing_header_in_a_nested_dependency_runs_the_decode_policy() -> None:
    app, broker = make_app()

    def tenant(name: Annotated[str, Header("x-tenant")]) -> str:
        return name

    def settings(who: Annotated[str, Depends(tenant)]) -> str:
        return who

    @broker.subscriber(MemoryStream("s"), dead_letter="dlq")
    async def handle(n: int, config: Annotated[str, Depends(settings)]) -> None: ...

    async with app.test() as t:
        await t.publish("s", 1)
        assert t.handler(handle).settled == [drop()]
        assert t.published("dlq")[0].headers["x-dead-letter-reason"] == "undecodable"


async def test_the_fn_ctx_form_still_gets_the_context() -> None:
    app, broker = make_app()

    def attempt(ctx) -> int:  # type: ignore[no-untyped-def]
        return ctx.attempt  # type: ignore[no-any-return]

    seen: list[int] = []

    @broker.subscriber(MemoryStream("s"))
    async def handle(n: int, a: Annotated[int, Depends(attempt)]) -> None:
        seen.append(a)

    async with app.test(raise_errors=True) as t:
        await t.publish("s", 1)
    assert seen == [1]


async def test_dependencies_work_in_ordered_lanes() -> None:
    app, broker = make_app()
    closed: list[int] = []

    def per_order(order: Order) -> Iterator[int]:
        yield order.id
        closed.append(order.id)

    seen: list[tuple[str, int]] = []

    @broker.subscriber(MemoryStream("orders"), workers=3, by_key=lambda o: o.customer)
    async def handle(order: Order, n: Annotated[int, Depends(per_order)]) -> None:
        seen.append((order.customer, n))

    async with app.test(raise_errors=True) as t:
        for i, who in enumerate("abab"):
            await t.publish("orders", Order(i, who))
    assert sorted(seen) == [("a", 0), ("a", 2), ("b", 1), ("b", 3)]
    assert sorted(closed) == [0, 1, 2, 3]


# ---- caching per delivery ------------------------------------------------------------------


async def test_a_dependency_used_twice_in_one_delivery_is_called_once() -> None:
    app, broker = make_app()
    opened: list[int] = []

    async def connection() -> AsyncIterator[int]:
        opened.append(len(opened))
        yield len(opened)

    def repository(conn: Annotated[int, Depends(connection)]) -> int:
        return conn

    seen: list[tuple[int, int]] = []

    @broker.subscriber(MemoryStream("s"))
    async def handle(
        n: int,
        conn: Annotated[int, Depends(connection)],
        repo: Annotated[int, Depends(repository)],
    ) -> None:
        seen.append((conn, repo))

    async with app.test(raise_errors=True) as t:
        await t.publish("s", 1)
        await t.publish("s", 2)
    assert seen == [(1, 1), (2, 2)]  # shared within a delivery, fresh for the next one


async def test_use_cache_false_calls_the_dependency_afresh() -> None:
    app, broker = make_app()
    calls: list[int] = []

    def counter() -> int:
        calls.append(1)
        return len(calls)

    seen: list[tuple[int, int]] = []

    @broker.subscriber(MemoryStream("s"))
    async def handle(
        n: int,
        a: Annotated[int, Depends(counter)],
        b: Annotated[int, Depends(counter, use_cache=False)],
    ) -> None:
        seen.append((a, b))

    async with app.test(raise_errors=True) as t:
        await t.publish("s", 1)
    assert seen == [(1, 2)]


# ---- overrides in app.test() ---------------------------------------------------------------


class Gateway:
    def charge(self, amount: float) -> str:
        raise AssertionError("the real gateway is never called in tests")


async def get_gateway() -> AsyncIterator[Gateway]:
    yield Gateway()


class FakeGateway(Gateway):
    def __init__(self) -> None:
        self.charged: list[float] = []

    def charge(self, amount: float) -> str:
        self.charged.append(amount)
        return "ok"


def build_payments() -> tuple[App, Any]:
    app, broker = make_app()

    def service(gateway: Annotated[Gateway, Depends(get_gateway)]) -> Gateway:
        return gateway

    @broker.subscriber(MemoryStream("payments"))
    async def pay(amount: float, gateway: Annotated[Gateway, Depends(service)]) -> None:
        gateway.charge(amount)

    @broker.subscriber(MemoryStream("refunds"))
    async def refund(amount: float, gateway: Annotated[Gateway, Depends(get_gateway)]) -> None:
        gateway.charge(-amount)

    return app, pay


async def test_app_test_dependency_overrides_replace_a_dependency_wherever_it_is_used() -> None:
    app, pay = build_payments()
    fake = FakeGateway()

    def fake_gateway(ctx: Context) -> Gateway:
        assert ctx.stream in ("payments", "refunds")
        return fake

    async with app.test(raise_errors=True, dependency_overrides={get_gateway: fake_gateway}) as t:
        await t.publish("payments", 9.5)
        await t.publish("refunds", 2.0)
    assert fake.charged == [9.5, -2.0]

    async with app.test() as t:  # the overrides ended with the test that set them
        await t.publish("payments", 1.0)
        assert "never called in tests" in str(t.handler(pay).errors[0])


async def test_an_override_that_no_handler_uses_is_refused() -> None:
    app, _ = build_payments()

    def unrelated() -> int:
        return 1

    with pytest.raises(ConfigurationError, match=r"no handler depends on .*unrelated"):
        async with app.test(dependency_overrides={unrelated: lambda: 2}):
            pass


async def test_an_override_with_a_parameter_that_cannot_be_filled_is_refused_at_start() -> None:
    app, _ = build_payments()

    def needs_something(mystery: int) -> Gateway:
        return FakeGateway()

    with pytest.raises(
        ConfigurationError, match=r"dependency .*needs_something, parameter 'mystery'"
    ):
        async with app.test(dependency_overrides={get_gateway: needs_something}):
            pass


# ---- checked at mount ----------------------------------------------------------------------


def test_a_dependency_with_a_parameter_that_cannot_be_filled_is_refused_at_mount() -> None:
    def lookup(tenant_id: int) -> str:
        return str(tenant_id)

    def tenant(name: Annotated[str, Depends(lookup)]) -> str:
        return name

    async def handle(order: Order, who: Annotated[str, Depends(tenant)]) -> None: ...

    with pytest.raises(ConfigurationError) as caught:
        analyse(handle)
    message = str(caught.value)
    assert "handle" in message and "dependency" in message and "lookup" in message
    assert "parameter 'tenant_id': cannot tell what to pass" in message


def _cycle_a(x: "Annotated[int, Depends(_cycle_c)]") -> int:
    return x


def _cycle_b(y: Annotated[int, Depends(_cycle_a)]) -> int:
    return y


def _cycle_c(z: Annotated[int, Depends(_cycle_b)]) -> int:
    return z


def test_a_dependency_cycle_is_refused_at_mount() -> None:
    async def handle(n: int, v: Annotated[int, Depends(_cycle_a)]) -> None: ...

    with pytest.raises(
        ConfigurationError, match=r"dependency cycle _cycle_a -> _cycle_c -> _cycle_b -> _cycle_a"
    ):
        analyse(handle)


def test_depends_needs_a_callable() -> None:
    async def handle(n: int, v: Annotated[int, Depends(42)]) -> None: ...

    with pytest.raises(ConfigurationError, match="Depends\\(\\) takes a callable"):
        analyse(handle)


def test_a_dependency_that_takes_a_seeker_makes_its_handler_need_a_seekable_source() -> None:
    def rewind(seeker: Seeker) -> Seeker:
        return seeker

    async def handle(n: int, s: Annotated[Seeker, Depends(rewind)]) -> None: ...

    handler = analyse(handle)
    assert handler.seeks and handler.needs_context


def test_a_handler_without_dependencies_has_no_dependency_plan() -> None:
    async def handle(n: int, ctx: Context) -> None: ...

    assert analyse(handle).dependencies is None


# ---- batches ---------------------------------------------------------------------------------


async def test_a_batch_handlers_dependency_is_solved_once_per_batch_and_cleaned_up_after_it(
    events: list[str],
) -> None:
    app, broker = make_app()

    def session(orders: list[Order], contexts: list[Context]) -> Iterator[str]:
        events.append(f"open for {[o.id for o in orders]} at {[c.attempt for c in contexts]}")
        yield "session"
        events.append("close")

    @broker.subscriber(MemoryStream("orders"), batch=3, max_wait=0.5)
    async def handle(orders: list[Order], db: Annotated[str, Depends(session)]) -> None:
        events.append(f"handle {len(orders)} with {db}")

    async with app.test(raise_errors=True) as t:
        for i in range(3):
            t.hub(broker).append("orders", f'{{"id": {i}, "customer": "c"}}'.encode(), {})
        await t.settled()
    assert events == [
        "open for [0, 1, 2] at [1, 1, 1]",
        "handle 3 with session",
        "settled ack",
        "settled ack",
        "settled ack",
        "close",
    ]


def test_a_batch_dependency_cannot_take_a_per_message_parameter() -> None:
    def tenant(ctx: Context) -> str:
        return ctx.headers["tenant"]

    async def handle(orders: list[Order], who: Annotated[str, Depends(tenant)]) -> None: ...

    with pytest.raises(ConfigurationError, match=r"dependency .*tenant, parameter 'ctx'.*batch"):
        analyse(handle, batch=True)


# ---- nasty cases ---------------------------------------------------------------------------


async def test_a_delivery_made_stale_while_its_dependencies_were_solved_is_still_cleaned_up(
    autojump_clock: trio.abc.Clock,
) -> None:
    app, broker = make_app()
    for n in range(1, 6):
        broker.hub.append("s", str(n).encode(), {})
    opened: list[int] = []
    closed: list[int] = []
    handled: list[int] = []
    seeked = False

    async def slow_session(n: int) -> AsyncIterator[int]:
        opened.append(n)
        try:
            await trio.sleep(0 if n == 1 else 1)  # 2 is still being solved when 1 seeks
            yield n
        finally:
            closed.append(n)

    @broker.subscriber(MemoryStream("s").replay(), workers=2, buffer=4)
    async def handle(n: int, ctx: Context, s: Annotated[int, Depends(slow_session)]) -> None:
        nonlocal seeked
        handled.append(n)
        if n == 1 and not seeked:
            seeked = True
            await ctx.seeker.seek(Position.sequence(5))

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            running = await nursery.start(app.serve)
            await running.wait_stopped()
    assert 2 in opened and 2 not in handled  # solved, then found stale
    assert sorted(opened) == sorted(closed)


async def test_the_cleanup_sees_the_encode_error_of_an_unencodable_return_value() -> None:
    app, broker = make_app()
    seen: list[str] = []

    async def session() -> AsyncIterator[None]:
        try:
            yield None
        except TypeError as exc:
            seen.append(type(exc).__name__)
            raise

    @broker.subscriber(MemoryStream("s"), dead_letter="dlq")
    @broker.publisher("out")
    async def handle(n: int, db: Annotated[None, Depends(session)]) -> object:
        return object()

    async with app.test() as t:
        await t.publish("s", 1)
        assert t.handler(handle).call_count == 1
    assert seen == ["EncodeError"]
