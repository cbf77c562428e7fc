from dataclasses import dataclass
from typing import Annotated

import pytest

from trio_streams import (
    ConfigurationError,
    Context,
    DecodeError,
    Depends,
    Header,
    Headers,
    Position,
)
from trio_streams.core.delivery import Delivery
from trio_streams.core.depends import DependencyScope
from trio_streams.core.driver import Seeker
from trio_streams.core.handler import analyse


@dataclass
class Order:
    id: int


def delivery(payload: bytes = b'{"id": 1}', headers: dict[str, str] | None = None) -> Delivery:
    return Delivery(
        "orders", payload, headers or {}, position=Position.sequence(4, stream="orders")
    )


async def test_payload_is_decoded_by_its_annotation() -> None:
    async def handle(order: Order) -> None: ...

    handler = analyse(handle)
    assert await handler.arguments(delivery(), None) == [Order(1)]
    assert not handler.needs_context


async def test_an_unannotated_payload_is_bytes() -> None:
    async def handle(payload) -> None: ...  # type: ignore[no-untyped-def]

    assert await analyse(handle).arguments(delivery(b"\x00"), None) == [b"\x00"]


async def test_headers_convert_to_their_annotation() -> None:
    async def handle(
        order: Order,
        count: Annotated[int, Header("x-count")],
        flag: bool = Header("x-flag"),  # type: ignore[assignment]
        missing: Annotated[str | None, Header()] = None,
        raw: Annotated[bytes, Header("x-raw")] = b"",
    ) -> None: ...

    handler = analyse(handle)
    args = await handler.arguments(
        delivery(headers={"x-count": "3", "x-flag": "yes", "x-raw": "é"}), None
    )
    assert args == [Order(1), 3, True, None, "é".encode()]


async def test_a_missing_required_header_is_reported_as_a_header_it_cannot_read() -> None:
    async def handle(order: Order, count: Annotated[int, Header("x-count")]) -> None: ...

    with pytest.raises(DecodeError) as raised:
        await analyse(handle).arguments(delivery(), None)
    assert str(raised.value) == (
        "cannot read header 'x-count' (from 'orders'): the message has no such header"
    )
    assert raised.value.header == "x-count"


async def test_a_header_that_does_not_convert_is_reported_as_a_header_it_cannot_read() -> None:
    async def handle(order: Order, count: Annotated[int, Header("x-count")]) -> None: ...

    with pytest.raises(DecodeError) as raised:
        await analyse(handle).arguments(delivery(headers={"x-count": "many"}), None)
    assert str(raised.value).startswith("cannot read header 'x-count' (from 'orders'): ")
    assert "payload" not in str(raised.value)


async def test_all_headers_position_and_user_extractors() -> None:
    def tenant(ctx: Context) -> str:
        return ctx.headers["tenant"]

    async def constant() -> int:
        return 42

    async def handle(
        order: Order,
        headers: Headers,
        where: Position,
        who: Annotated[str, Depends(tenant)],
        answer: int = Depends(constant),  # type: ignore[assignment]
    ) -> None: ...

    handler = analyse(handle)
    assert handler.needs_context
    d = delivery(headers={"tenant": "acme"})

    class FakeContext:
        headers = d.headers

    args = await handler.arguments(d, FakeContext(), scope=DependencyScope())  # type: ignore[arg-type]
    assert args == [Order(1), {"tenant": "acme"}, Position.sequence(4, stream="orders"), "acme", 42]


def test_context_and_seeker_parameters_need_the_context() -> None:
    async def handle(order: Order, ctx: Context, seeker: Seeker) -> None: ...

    assert analyse(handle).needs_context


def test_a_parameter_that_cannot_be_filled_is_refused_at_mount() -> None:
    async def handle(order: Order, mystery: int) -> None: ...

    with pytest.raises(ConfigurationError, match="parameter 'mystery': cannot tell what to pass"):
        analyse(handle)


def test_plain_functions_are_refused() -> None:
    def handle(order: Order) -> None: ...

    with pytest.raises(ConfigurationError, match="must be an `async def`"):
        analyse(handle)  # type: ignore[arg-type]


def test_a_handler_needs_a_payload_parameter() -> None:
    async def handle() -> None: ...

    with pytest.raises(ConfigurationError, match="first parameter for the payload"):
        analyse(handle)


def test_an_undecodable_payload_type_is_refused_at_mount() -> None:
    async def handle(value: complex) -> None: ...

    with pytest.raises(ConfigurationError, match="cannot decode a payload into"):
        analyse(handle)


def test_batch_handlers_take_a_list_and_optionally_contexts() -> None:
    async def good(orders: list[Order], contexts: list[Context]) -> None: ...

    handler = analyse(good, batch=True)
    assert handler.is_batch and handler.needs_context

    async def not_a_list(order: Order) -> None: ...

    with pytest.raises(ConfigurationError, match="must be list"):
        analyse(not_a_list, batch=True)

    async def extra(orders: list[Order], flag: Annotated[str, Header()]) -> None: ...

    with pytest.raises(ConfigurationError, match="optionally list\\[Context\\]"):
        analyse(extra, batch=True)
