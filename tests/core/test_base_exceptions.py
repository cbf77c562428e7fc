"""A ``BaseException`` that is not a cancellation, raised by a handler (plain, with
arguments, or a batch one): the failure policy never sees it, the subscription stops and the
app fails with an error naming the handler; a cancellation passes as it is."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from trio_streams import App, AppFailed, Context, MemoryBroker, MemoryStream
from trio_streams.core._escapes import escaped
from trio_streams.core.errors import BaseExceptionRaised


def _fails_with(app: App, broker: MemoryBroker) -> AppFailed:
    @app.after_startup
    async def feed() -> None:
        await broker.publish("s", 1)

    with pytest.raises(AppFailed) as failed:
        app.run_until_stopped()
    return failed.value


@pytest.mark.parametrize("shape", ["plain", "with_context", "batch"])
def test_a_handler_that_calls_sys_exit_fails_the_app_naming_the_handler(shape: str) -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    retried: list[int] = []

    if shape == "plain":

        @broker.subscriber(MemoryStream("s"), name="s")
        async def leave(n: int) -> None:
            retried.append(n)
            sys.exit(3)

    elif shape == "with_context":

        @broker.subscriber(MemoryStream("s"), name="s")
        async def leave(n: int, ctx: Context) -> None:  # type: ignore[misc]
            retried.append(n)
            sys.exit(3)

    else:

        @broker.subscriber(MemoryStream("s"), name="s", batch=2, max_wait=0.1)
        async def leave(numbers: list[int]) -> None:  # type: ignore[misc]
            retried.append(numbers[0])
            sys.exit(3)

    failure = _fails_with(app, broker)
    assert "leave of subscription 's' raised SystemExit(3)" in str(failure)
    assert retried == [1]  # the failure policy did not retry it


def test_a_cancellation_keyboard_interrupt_or_exception_is_not_turned_into_a_failure() -> None:
    for error in (
        KeyboardInterrupt(),
        GeneratorExit(),
        ValueError("x"),
        BaseExceptionGroup("g", [SystemExit(1), KeyboardInterrupt()]),
    ):
        assert escaped(error, "handler h") is None


def test_a_group_of_one_exit_names_the_exit_itself() -> None:
    found = escaped(BaseExceptionGroup("g", [BaseExceptionGroup("h", [SystemExit(2)])]), "task t")
    assert isinstance(found, BaseExceptionRaised)
    assert str(found) == "task t raised SystemExit(2)"


def test_a_lifespan_that_calls_sys_exit_fails_the_run_instead_of_exiting_the_interpreter() -> None:
    app = App("svc")
    app.broker(MemoryBroker())

    @app.lifespan
    @asynccontextmanager
    async def resources() -> AsyncIterator[None]:
        if app.name == "svc":  # always: the yield below makes this a generator
            sys.exit(5)
        yield

    with pytest.raises(AppFailed) as failed:
        app.run_until_stopped()
    assert "raised SystemExit(5)" in str(failed.value)
