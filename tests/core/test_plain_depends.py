"""Plain dependencies (functions and ``async def``, no generator in the tree) are solved in line,
without a dependency scope, from a plan made at mount. Each promise of the general solve holds
there: every dependency called as often, in the same order, with the same arguments (cached per
delivery, afresh with ``use_cache=False``); the first that raises stops the solve where the
general one stops; a dependency's error runs the failure policy with the handler not called (a
``DecodeError`` the decode policy); overrides apply; a generator anywhere in the tree keeps the
general path. Each case runs on the in-line path and, forced by a middleware that wraps every
delivery, on the general path, and both must agree.
"""

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any

import pytest
import trio

from tests.support import serving
from trio_streams import (
    App,
    Depends,
    Header,
    Headers,
    MemoryBroker,
    MemoryStream,
    Middleware,
    Position,
    retry,
)
from trio_streams.core.delivery import SequenceDelivery
from trio_streams.core.depends import DependencyScope, PlainArguments
from trio_streams.core.driver import Seeker
from trio_streams.core.handler import analyse
from trio_streams.core.middleware import HandlerCall


@dataclass
class Order:
    id: int
    customer: str


class Wrapping(Middleware):
    """A middleware that wraps every delivery: its subscription takes the general path."""

    @asynccontextmanager
    async def handle(self, call: HandlerCall) -> AsyncIterator[None]:
        yield


def calls_log() -> tuple[list[str], Callable[..., Any]]:
    log: list[str] = []

    def note(name: str, value: Any) -> Any:
        log.append(f"{name}({value!r})")
        return value

    return log, note


def nasty_handler(log: list[str], fail: str | None = None) -> Callable[..., Any]:
    """A handler whose tree has a bit of everything: the payload in a dependency, a header
    leaf, a position, nesting, a dependency used three times (cached twice, once afresh),
    keyword-only parameters, an ``async def``; ``fail`` names the dependency that raises."""

    def check(name: str) -> None:
        log.append(name)
        if name == fail:
            raise ValueError(f"{name} failed")

    def base(order: Order) -> int:
        check("base")
        return order.id

    async def tenant(tenant: Annotated[str, Header("x-tenant")] = "none") -> str:
        check("tenant")
        await trio.lowlevel.checkpoint()
        return tenant

    def scoped(b: Annotated[int, Depends(base)], *, t: Annotated[str, Depends(tenant)]) -> str:
        check("scoped")
        return f"{t}:{b}"

    def fresh(
        b: Annotated[int, Depends(base, use_cache=False)], position: Position | None
    ) -> tuple[int, Any]:
        check("fresh")
        return b, position

    async def handle(
        order: Order,
        s: Annotated[str, Depends(scoped)],
        f: Annotated[tuple[int, Any], Depends(fresh)],
        headers: Headers,
        again: Annotated[int, Depends(base)],
    ) -> None:
        log.append(f"handler {s} {f[0]} {again} {sorted(headers)}")

    return handle


# ---- the plan ------------------------------------------------------------------------------


def test_a_tree_of_plain_dependencies_is_planned_once_at_mount() -> None:
    handler = analyse(nasty_handler([]))
    assert handler.dependencies is not None
    assert isinstance(handler.dependencies.plain, PlainArguments)
    assert handler.dependencies.plain.awaits  # tenant is an async def


def test_a_generator_anywhere_in_the_tree_keeps_the_general_path() -> None:
    def opened() -> Iterator[int]:
        yield 1

    async def session() -> AsyncIterator[int]:
        yield 1

    def outer(inner: Annotated[int, Depends(session)]) -> int:
        return inner

    async def nested(n: int, o: Annotated[int, Depends(outer)]) -> None: ...

    async def top(n: int, o: Annotated[int, Depends(opened)]) -> None: ...

    for handle in (nested, top):
        dependencies = analyse(handle).dependencies
        assert dependencies is not None and dependencies.plain is None


def test_a_tree_of_def_functions_alone_solves_without_a_coroutine() -> None:
    def a(n: int) -> int:
        return n + 1

    async def handle(n: int, x: Annotated[int, Depends(a)]) -> None: ...

    dependencies = analyse(handle).dependencies
    assert dependencies is not None and dependencies.plain is not None
    assert not dependencies.plain.awaits
    assert dependencies.plain.solve_now(None, None, 41) == [42]


@pytest.mark.parametrize("fail", [None, "base", "tenant", "scoped", "fresh"])
async def test_the_plan_calls_every_dependency_as_often_in_the_same_order_as_the_general_solve(
    fail: str | None,
) -> None:
    general_log: list[str] = []
    plain_log: list[str] = []
    general = analyse(nasty_handler(general_log, fail)).dependencies
    plain = analyse(nasty_handler(plain_log, fail)).dependencies
    assert general is not None and plain is not None and plain.plain is not None
    delivery = SequenceDelivery("s", b"{}", {"x-tenant": "acme"}, 7, None, 1, None)
    order = Order(3, "c")
    general_result: Any = None
    plain_result: Any = None
    try:
        general_result = await general.solve(delivery, None, order, DependencyScope())
    except ValueError as exc:
        general_result = str(exc)
    try:
        plain_result = await plain.plain.solve(delivery, None, order)
    except ValueError as exc:
        plain_result = str(exc)
    assert plain_log == general_log
    assert plain_result == general_result
    if fail is None:
        assert general_log == ["base", "tenant", "scoped", "base", "fresh"]


# ---- the in-line path and the general path agree -----------------------------------------


async def run_both_ways(
    make: Callable[[list[str]], Callable[..., Any]],
    messages: list[tuple[bytes, dict[str, str]]],
    **options: Any,
) -> list[tuple[list[str], list[str], list[str], list[str]]]:
    """Handle ``messages`` with the handler ``make`` builds, on the in-line path and on the
    general path: for each, (what happened, the outcomes settled, the errors recorded, and
    the observers' record of each delivery: was the handler called, its outcome, its message)."""
    results = []
    for middlewares in ((), (Wrapping(),)):
        log: list[str] = []
        app = App("svc", middlewares=list(middlewares))
        broker = app.broker(MemoryBroker())
        handle = broker.subscriber(MemoryStream("s"), **options)(make(log))
        async with app.test() as t:
            for payload, headers in messages:
                await t.publish("s", payload, headers=headers)
            await t.settled()
            record = t.handler(handle)
            results.append(
                (
                    log,
                    [repr(outcome) for outcome in record.settled],
                    [f"{type(e).__name__}: {e}" for e in record.errors],
                    [f"called={r.called} {r.outcome!r} {r.message!r}" for r in record.records],
                )
            )
    return results


async def test_a_handler_of_plain_dependencies_is_handled_in_line_and_a_wrapped_one_is_not() -> (
    None
):
    for middlewares, in_line in (((), True), ((Wrapping(),), False)):
        app = App("svc", middlewares=list(middlewares))
        broker = app.broker(MemoryBroker())
        broker.subscriber(MemoryStream("s"))(nasty_handler([]))
        async with serving(app) as running:
            dispatcher = running._runners[0].dispatcher
            assert dispatcher is not None
            assert dispatcher._payload_only is in_line


@pytest.mark.parametrize("fail", [None, "base", "tenant", "scoped", "fresh", "handler"])
async def test_a_dependency_that_raises_runs_the_failure_policy_as_on_the_general_path(
    fail: str | None,
) -> None:
    def make(log: list[str]) -> Callable[..., Any]:
        if fail != "handler":
            return nasty_handler(log, fail)

        def first(order: Order) -> int:
            log.append("first")
            return order.id

        async def with_one(order: Order, f: Annotated[int, Depends(first)]) -> None:
            log.append(f"handler {f}")
            raise ValueError("handler failed")

        return with_one

    payload = b'{"id": 1, "customer": "c"}'
    in_line, general = await run_both_ways(
        make, [(payload, {"x-tenant": "acme"}), (payload, {})], max_attempts=2
    )
    assert in_line == general
    if fail is not None:
        assert any("failed" in error for error in in_line[2])


async def test_a_decode_error_in_a_dependency_runs_the_decode_policy_as_on_the_general_path() -> (
    None
):
    def make(log: list[str]) -> Callable[..., Any]:
        def count(n: Annotated[int, Header("x-count")]) -> int:
            log.append(f"count {n}")
            return n

        async def handle(order: Order, c: Annotated[int, Depends(count)]) -> None:
            log.append(f"handler {c}")

        return handle

    payload = b'{"id": 1, "customer": "c"}'
    in_line, general = await run_both_ways(
        make, [(payload, {"x-count": "3"}), (payload, {}), (payload, {"x-count": "x"})]
    )
    assert in_line == general
    assert in_line[0] == ["count 3", "handler 3"]
    assert len(in_line[2]) == 2  # the missing header, and the one that is no integer


async def test_a_value_returned_and_a_retry_are_concluded_as_on_the_general_path() -> None:
    def make(log: list[str]) -> Callable[..., Any]:
        def who(order: Order) -> str:
            log.append(f"who {order.id}")
            return order.customer

        async def handle(order: Order, w: Annotated[str, Depends(who)]) -> Any:
            log.append(f"handler {order.id} {w}")
            return retry() if order.id == 1 else None

        return handle

    in_line, general = await run_both_ways(
        make,
        [(b'{"id": 1, "customer": "a"}', {}), (b'{"id": 2, "customer": "b"}', {})],
        max_attempts=3,
    )
    assert in_line == general
    assert in_line[0].count("handler 1 a") == 3  # retried up to the attempts cap


async def test_overrides_replace_a_plain_dependency_on_the_in_line_path() -> None:
    def real(order: Order) -> str:
        raise AssertionError("the real one is never called in tests")

    def fake(order: Order) -> str:
        return f"fake {order.id}"

    seen: list[str] = []
    app = App("svc")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("s"))
    async def handle(order: Order, w: Annotated[str, Depends(real)]) -> None:
        seen.append(w)

    async with app.test(raise_errors=True, dependency_overrides={real: fake}) as t:
        await t.publish("s", b'{"id": 5, "customer": "c"}')
    assert seen == ["fake 5"]


async def test_a_delivery_made_stale_while_an_async_dependency_runs_is_not_handled(
    autojump_clock: trio.abc.Clock,
) -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    for n in range(1, 6):
        broker.hub.append("s", str(n).encode(), {})
    solving: list[int] = []
    handled: list[int] = []
    first_solving = trio.Event()

    async def slow(n: int) -> int:
        solving.append(n)
        if n == 1:
            first_solving.set()
            await trio.sleep(1)  # the seek comes meanwhile
        return n

    @broker.subscriber(MemoryStream("s").replay(), buffer=4)
    async def handle(n: int, s: Annotated[int, Depends(slow)]) -> None:
        handled.append(n)

    with trio.fail_after(60):
        async with serving(app) as running:
            await first_solving.wait()
            await Seeker(running._runners[0].driver).seek(Position.sequence(4))
            await running.wait_stopped()
    assert handled == [4, 5]  # 1 was solved, then found stale: its handler never ran
    assert solving[0] == 1


async def test_a_generator_dependency_still_gets_a_scope_and_its_cleanup() -> None:
    closed: list[int] = []

    async def session(order: Order) -> AsyncGenerator[int, None]:
        try:
            yield order.id
        finally:
            closed.append(order.id)

    app = App("svc")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("s"))
    async def handle(order: Order, s: Annotated[int, Depends(session)]) -> None:
        assert s == order.id

    async with app.test(raise_errors=True) as t:
        await t.publish("s", b'{"id": 8, "customer": "c"}')
    assert closed == [8]
