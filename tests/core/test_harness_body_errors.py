"""An error raised by the body of ``async with app.test() as t:`` comes out as itself, not
wrapped in the exception groups of the harness's nurseries; several errors stay a group."""

from __future__ import annotations

import pytest
import trio

from trio_streams import App, AppFailed, MemoryBroker, MemoryStream
from trio_streams.core.groups import leaves


def shop() -> App:
    app = App("shop")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("orders"), name="handle")
    async def handle(n: int) -> None: ...

    return app


async def test_a_failed_assertion_in_the_test_body_comes_out_as_itself() -> None:
    app = shop()
    with pytest.raises(AssertionError) as caught:  # noqa: PT012 - the body is the point
        async with app.test() as t:
            await t.publish("orders", 1)
            assert t.handler("handle").call_count == 2, "the body's own assertion"
    assert type(caught.value) is AssertionError
    assert "the body's own assertion" in str(caught.value)


async def test_a_group_of_one_from_a_nursery_of_the_body_comes_out_as_its_error() -> None:
    app = shop()

    async def check() -> None:
        raise AssertionError("inside the body's nursery")

    with pytest.raises(AssertionError, match="inside the body's nursery") as caught:
        async with app.test(), trio.open_nursery() as nursery:
            nursery.start_soon(check)
    assert type(caught.value) is AssertionError


async def test_an_error_of_the_body_and_a_failure_of_the_app_stay_together_in_a_group() -> None:
    app = shop()
    failing = trio.Event()

    @app.task
    async def breaks() -> None:
        failing.set()
        raise RuntimeError("the app's own failure")

    with pytest.raises(BaseExceptionGroup) as caught:  # noqa: PT012 - the body is the point
        async with app.test():
            await failing.wait()
            await trio.lowlevel.checkpoint()
            raise KeyError("the body's error")
    kinds = {type(e) for e in leaves(caught.value)}
    assert kinds == {KeyError, AppFailed}, caught.value
