"""The compiled decoder: msgspec decodes a payload type in one step where it decodes exactly as
the general path converts, and whatever it refuses goes the general way, so what is accepted,
what it becomes and the error a bad payload gets are the general path's."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec
import pydantic
import pytest

from trio_streams.core.codec import (
    DecodeError,
    _compiled_decoder,
    _general_decoder,
    decoder_for,
)


@dataclass
class Item:
    sku: str
    qty: int


@dataclass
class Order:
    id: int
    amount: float
    items: list[Item] = field(default_factory=list)
    note: str | None = None


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Tag(msgspec.Struct):
    name: str


@dataclass
class Tree:
    value: int
    children: list[Tree] = field(default_factory=list)


@dataclass
class Checked:
    qty: int

    def __post_init__(self) -> None:
        if self.qty < 0:
            raise ValueError("qty must not be negative")


@dataclass
class Rich:
    colour: Colour
    level: Level
    ref: uuid.UUID
    day: dt.date
    at: dt.time
    tags: set[str]
    pair: tuple[int, str]
    rest: tuple[float, ...]
    kind: Literal["a", "b"]
    extra: dict[str, int]
    struct: Tag
    anything: Any = None


#: Types msgspec decodes as the general path converts: compiled.
COMPILED: list[Any] = [
    Order,
    Item,
    Tree,
    Rich,
    dict[str, Order],
    list[Item],
    int,
    list[str],
]

GOOD: list[tuple[Any, bytes]] = [
    (Order, b'{"id": 1, "amount": 2, "items": [{"sku": "a", "qty": 3}], "extra": 1}'),
    (Order, b'{"id": 1, "amount": 2.5, "note": null}'),
    (Tree, b'{"value": 1, "children": [{"value": 2}, {"value": 3, "children": []}]}'),
    (Checked, b'{"qty": 0}'),
    (
        Rich,
        b'{"colour": "red", "level": 2, "ref": "12345678-1234-5678-1234-567812345678",'
        b' "day": "2026-01-02", "at": "03:04:05", "tags": ["x", "y"], "pair": [1, "one"],'
        b' "rest": [1, 2.5], "kind": "b", "extra": {"k": 1}, "struct": {"name": "n"},'
        b' "anything": [1, {"a": null}]}',
    ),
    (dict[str, Order], b'{"a": {"id": 1, "amount": 1}}'),
    (list[Item], b'[{"sku": "s", "qty": 1}]'),
    (int, b"12345678901234567890123"),
    (float, b"12345678901234567890123"),
    (list[str], b'["text"]'),
]

BAD: list[tuple[Any, bytes]] = [
    (Order, b'{"id": "1", "amount": 2}'),
    (Order, b'{"id": 1.0, "amount": 2}'),
    (Order, b'{"id": true, "amount": 2}'),
    (Order, b'{"amount": 2}'),
    (Order, b'{"id": 1, "amount": 2, "items": [{"sku": "a", "qty": "3"}]}'),
    (Order, b'{"id": 1, "amount": 2, "items": [{"sku": "a"}]}'),
    (Order, b"[1, 2]"),
    (Order, b"{not json"),
    (Order, b'{"id": 1, "amount": 2}trailing'),
    (Order, b"\xff\xfe"),
    (Checked, b'{"qty": -1}'),
    (Tree, b'{"value": 1, "children": [{"value": "x"}]}'),
    (Rich, b'{"colour": "green"}'),
    (list[Item], b'[{"sku": 1, "qty": 1}]'),
    (int, b'"1"'),
]


def _name(annotation: Any) -> str:
    return getattr(annotation, "__name__", repr(annotation))


@pytest.mark.parametrize("annotation", COMPILED, ids=_name)
def test_a_payload_type_msgspec_decodes_exactly_gets_a_compiled_decoder(annotation: Any) -> None:
    assert _compiled_decoder(annotation) is not None


@pytest.mark.parametrize(("annotation", "payload"), GOOD, ids=lambda v: _name(v)[:30])
def test_what_the_compiled_decoder_accepts_equals_what_the_general_path_makes(
    annotation: Any, payload: bytes
) -> None:
    decoded = decoder_for(annotation)(payload)
    expected = _general_decoder(annotation)(payload)
    assert decoded == expected
    assert type(decoded) is type(expected)


@pytest.mark.parametrize(("annotation", "payload"), BAD, ids=lambda v: _name(v)[:30])
def test_a_bad_payload_gets_the_general_paths_error_naming_the_path(
    annotation: Any, payload: bytes
) -> None:
    with pytest.raises(DecodeError) as general:
        _general_decoder(annotation)(payload)
    with pytest.raises(DecodeError) as compiled:
        decoder_for(annotation)(payload)
    assert str(compiled.value) == str(general.value)
    assert compiled.value.reason == general.value.reason


def test_a_field_error_still_names_its_path_and_what_was_expected() -> None:
    with pytest.raises(DecodeError, match=r"\$\.items\[0\]\.qty: expected an integer, got str"):
        decoder_for(Order)(b'{"id": 1, "amount": 2, "items": [{"sku": "a", "qty": "3"}]}')


# ---- types left to the general path: msgspec would decode them differently ------------------


@dataclass
class OwnInit:
    qty: int

    def __init__(self, qty: int) -> None:
        self.qty = qty * 10


@dataclass
class NotInInit:
    qty: int
    seen: int = field(init=False, default=5)


@dataclass
class WithInitVar:
    qty: int
    scale: dataclasses.InitVar[int] = 1

    def __post_init__(self, scale: int) -> None:
        self.qty *= scale


@dataclass
class Stamped:
    at: dt.datetime


@dataclass
class Priced:
    price: decimal.Decimal


@dataclass
class Either:
    value: float | int


class Model(pydantic.BaseModel):
    id: int


@dataclass
class Holder:
    model: Model


LEFT: list[tuple[Any, bytes]] = [
    (OwnInit, b'{"qty": 1}'),
    (NotInInit, b'{"qty": 1, "seen": 9}'),
    (WithInitVar, b'{"qty": 2}'),
    (Stamped, b'{"at": "2026-01-02T03:04:05+00:00"}'),
    (Priced, b'{"price": 1.1}'),
    (Either, b'{"value": 1}'),
    (Holder, b'{"model": {"id": 1}}'),
    # A __post_init__ is user code: a payload the compiled decoder refused would run it twice.
    (Checked, b'{"qty": 0}'),
]


@pytest.mark.parametrize(("annotation", "payload"), LEFT, ids=lambda v: _name(v)[:30])
def test_a_type_msgspec_would_decode_differently_is_left_to_the_general_path(
    annotation: Any, payload: bytes
) -> None:
    assert _compiled_decoder(annotation) is None
    assert decoder_for(annotation)(payload) == _general_decoder(annotation)(payload)


def test_a_dataclass_with_its_own_init_is_built_by_that_init() -> None:
    assert decoder_for(OwnInit)(b'{"qty": 1}').qty == 10


def test_a_field_left_out_of_init_keeps_its_default_whatever_the_payload_says() -> None:
    assert decoder_for(NotInInit)(b'{"qty": 1, "seen": 9}').seen == 5


def test_a_post_init_runs_once_per_decode_whether_it_accepts_or_refuses() -> None:
    calls: list[int] = []

    @dataclass
    class Counted:
        qty: int

        def __post_init__(self) -> None:
            calls.append(self.qty)
            if self.qty < 0:
                raise ValueError("negative")

    decode = decoder_for(Counted)
    assert decode(b'{"qty": 1}') == Counted(1)
    with pytest.raises(DecodeError):
        decode(b'{"qty": -1}')
    assert calls == [1, 1, -1]  # the equality's own Counted(1), and one run per decode
