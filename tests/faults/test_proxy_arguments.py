"""The fault proxy refuses bad arguments when a fault is asked for, never later, and a predicate
that raises surfaces to the test instead of passing for an injected fault."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import trio

from trio_streams.redis.client import connect
from trio_streams.testing.faults import FaultProxy, ProxyError
from trio_streams.testing.faults.plan import ProxyConnection
from trio_streams.testing.servers import RedisServer

#: Seconds any single step may take before the test fails instead of hanging.
STEP = 10

BAD_CALLS: list[tuple[str, Callable[[FaultProxy], object], str]] = [
    ("cut_after bytes=nan", lambda p: p.cut_after(bytes=math.nan), "bytes"),  # type: ignore[arg-type]
    ("cut_after bytes=1.5", lambda p: p.cut_after(bytes=1.5), "bytes"),  # type: ignore[arg-type]
    ("cut_after bytes='5'", lambda p: p.cut_after(bytes="5"), "bytes"),  # type: ignore[arg-type]
    ("cut_after bytes=True", lambda p: p.cut_after(bytes=True), "bytes"),
    ("cut_after bytes=0", lambda p: p.cut_after(bytes=0), "bytes"),
    ("cut_after commands=nan", lambda p: p.cut_after(commands=math.nan), "commands"),  # type: ignore[arg-type]
    ("cut_after commands=-1", lambda p: p.cut_after(commands=-1), "commands"),
    ("drip chunk=1.5", lambda p: p.drip(chunk=1.5), "chunk"),  # type: ignore[arg-type]
    ("drip chunk=0", lambda p: p.drip(chunk=0), "chunk"),
    ("drip every=nan", lambda p: p.drip(every=math.nan), "every"),
    ("drip every=inf", lambda p: p.drip(every=math.inf), "every"),
    ("drip every=-1", lambda p: p.drip(every=-1), "every"),
    ("delay to_server=nan", lambda p: p.delay(to_server=math.nan), "to_server"),
    ("delay to_client=inf", lambda p: p.delay(to_client=math.inf), "to_client"),
    ("delay to_server='1'", lambda p: p.delay(to_server="1"), "to_server"),  # type: ignore[arg-type]
    ("delay to_client=-0.5", lambda p: p.delay(to_client=-0.5), "to_client"),
    ("cut match=3", lambda p: p.cut(match=3), "match"),  # type: ignore[arg-type]
    ("blackhole match='x'", lambda p: p.blackhole(match="x"), "match"),  # type: ignore[arg-type]
    ("refuse_new match=1", lambda p: p.refuse_new(match=1), "match"),  # type: ignore[arg-type]
    ("reset_mid_reply match=1", lambda p: p.reset_mid_reply(match=1), "match"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("label", "call", "name"), BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
async def test_every_argument_of_every_fault_is_checked_when_the_fault_is_asked_for(
    proxy: FaultProxy, label: str, call: Callable[[FaultProxy], object], name: str
) -> None:
    with pytest.raises(ProxyError, match=name):
        call(proxy)
    assert proxy.faults == []  # nothing was set


async def test_a_fault_given_a_bad_argument_leaves_the_proxy_serving(proxy: FaultProxy) -> None:
    for _label, call, _name in BAD_CALLS:
        with pytest.raises(ProxyError):
            call(proxy)
    async with connect(proxy.url) as redis:
        with trio.fail_after(STEP):
            assert await redis.execute("PING") == b"PONG"
    assert sum(proxy.injected.values()) == 0


async def test_no_pump_spins_without_a_checkpoint_whatever_its_state(proxy: FaultProxy) -> None:
    # A fault whose count cannot be reached (set behind the checks' back) leaves the pump with
    # nothing to forward: it must still yield, so a timeout around the test fires.
    fault = proxy.cut_after(bytes=5)
    fault.after_bytes = math.nan  # type: ignore[assignment]
    async with connect(proxy.url) as redis:
        with trio.move_on_after(0.5) as scope:
            await redis.execute("PING")
    assert scope.cancelled_caught


async def test_a_predicate_that_raises_surfaces_from_the_proxy_naming_the_predicate(
    server: RedisServer,
) -> None:
    def broken(connection: ProxyConnection) -> bool:
        raise ZeroDivisionError("a bug in the test")

    async def use() -> None:
        async with FaultProxy.in_front_of(server) as proxy, connect(proxy.url) as redis:
            await redis.execute("PING")
            proxy.blackhole(match=broken)
            await redis.execute("PING")  # cancelled by the proxy's failure
            await trio.sleep_forever()

    with (
        trio.fail_after(STEP),
        pytest.raises(ProxyError, match=r"broken.*blackhole.*Zero") as caught,
    ):
        await use()
    assert isinstance(caught.value.__cause__, ZeroDivisionError)


async def test_a_predicate_that_raises_when_the_fault_is_called_raises_from_the_call(
    proxy: FaultProxy,
) -> None:
    def broken(connection: ProxyConnection) -> Any:
        raise KeyError("nope")

    async with connect(proxy.url) as redis:
        await redis.execute("PING")
        with pytest.raises(ProxyError, match=r"broken.*cut.*KeyError") as caught:
            proxy.cut(match=broken)
        assert isinstance(caught.value.__cause__, KeyError)


async def test_a_refusing_predicate_that_raises_surfaces_from_the_proxy(
    server: RedisServer,
) -> None:
    async def use() -> None:
        async with FaultProxy.in_front_of(server) as proxy:
            proxy.refuse_new(match=lambda connection: 1 / 0 > 0)
            async with connect(proxy.url) as redis:
                await redis.execute("PING")
            await trio.sleep_forever()

    with trio.fail_after(STEP), pytest.raises(ProxyError, match=r"refuse_new.*ZeroDivision"):
        await use()
