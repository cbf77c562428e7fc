import datetime as dt
import decimal
import enum
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec
import pydantic
import pytest

from trio_streams.core.codec import DecodeError, EncodeError, decoder_for, encode


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


class Model(pydantic.BaseModel):
    id: int
    name: str


class Struct(msgspec.Struct):
    id: int
    tags: list[str]


def test_bytes_are_passed_as_they_arrived() -> None:
    assert decoder_for(bytes)(b"\xff\x00") == b"\xff\x00"


def test_str_is_utf8_and_bad_utf8_is_a_decode_error() -> None:
    assert decoder_for(str)("héllo".encode()) == "héllo"
    with pytest.raises(DecodeError, match="UTF-8"):
        decoder_for(str)(b"\xff")


def test_json_into_a_nested_dataclass() -> None:
    order = decoder_for(Order)(b'{"id": 1, "amount": 2, "items": [{"sku": "a", "qty": 3}]}')
    assert order == Order(1, 2.0, [Item("a", 3)])
    assert isinstance(order.amount, float)


def test_a_mismatch_names_the_path_and_what_was_expected() -> None:
    with pytest.raises(DecodeError, match=r"\$\.items\[1\]\.qty: expected an integer, got str"):
        decoder_for(Order)(
            b'{"id": 1, "amount": 2, "items": [{"sku": "a", "qty": 3}, {"sku": "b", "qty": "x"}]}'
        )


def test_a_missing_required_field_is_named() -> None:
    with pytest.raises(DecodeError) as error:
        decoder_for(Order)(b'{"id": 1}')
    assert str(error.value) == (
        "cannot decode payload: $: Object missing required field `amount` of Order"
    )


def test_a_missing_field_deep_inside_is_named_with_where_it_is_missing() -> None:
    with pytest.raises(DecodeError) as error:
        decoder_for(Order)(b'{"id": 1, "amount": 2, "items": [{"sku": "a"}]}')
    assert str(error.value) == (
        "cannot decode payload: $.items[0]: Object missing required field `qty` of Item"
    )


def test_a_field_given_as_null_is_still_said_to_be_null() -> None:
    with pytest.raises(DecodeError, match=r"\$\.id: expected an integer, got null$"):
        decoder_for(Order)(b'{"id": null, "amount": 2}')


def test_invalid_json_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="not valid JSON"):
        decoder_for(dict)(b"{nope")


def test_booleans_are_not_integers() -> None:
    with pytest.raises(DecodeError, match="expected an integer"):
        decoder_for(int)(b"true")


@pytest.mark.parametrize(
    ("annotation", "payload", "expected"),
    [
        (dict, b'{"a": 1}', {"a": 1}),
        (list[int], b"[1, 2]", [1, 2]),
        (dict[str, float], b'{"a": 1}', {"a": 1.0}),
        (tuple[int, str], b'[1, "x"]', (1, "x")),
        (tuple[int, ...], b"[1, 2, 3]", (1, 2, 3)),
        (set[str], b'["a", "a"]', {"a"}),
        (Literal["x", "y"], b'"y"', "y"),
        (Colour, b'"red"', Colour.RED),
        (
            dt.datetime,
            b'"2024-01-02T03:04:05+00:00"',
            dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
        ),
        (int | None, b"null", None),
        (Any, b'{"x": [1]}', {"x": [1]}),
    ],
)
def test_json_values(annotation: Any, payload: bytes, expected: Any) -> None:
    assert decoder_for(annotation)(payload) == expected


def test_pydantic_models_decode_with_pydantic() -> None:
    assert decoder_for(Model)(b'{"id": 1, "name": "x"}') == Model(id=1, name="x")
    with pytest.raises(DecodeError, match=r"\$\.id"):
        decoder_for(Model)(b'{"id": "nope", "name": "x"}')


def test_msgspec_structs_decode_with_msgspec() -> None:
    assert decoder_for(Struct)(b'{"id": 1, "tags": ["a"]}') == Struct(1, ["a"])
    with pytest.raises(DecodeError, match="Expected `int`"):
        decoder_for(Struct)(b'{"id": "x", "tags": []}')


def test_unsupported_annotations_are_refused_when_the_decoder_is_built() -> None:
    with pytest.raises(TypeError, match="cannot decode"):
        decoder_for(complex)
    with pytest.raises(TypeError, match="string keys"):
        decoder_for(dict[int, str])


def test_encode_round_trips_each_kind() -> None:
    order = Order(1, 2.5, [Item("a", 1)])
    assert decoder_for(Order)(encode(order)) == order
    assert encode(b"raw") == b"raw"
    assert encode("text") == b"text"
    assert encode({"é": [1, None]}) == '{"é":[1,null]}'.encode()
    assert decoder_for(Model)(encode(Model(id=1, name="n"))) == Model(id=1, name="n")
    assert decoder_for(Struct)(encode(Struct(2, ["t"]))) == Struct(2, ["t"])
    assert encode(Colour.RED) == b'"red"'


def test_encode_refuses_what_json_cannot_hold() -> None:
    with pytest.raises(TypeError, match="cannot encode object"):
        encode(object())
    with pytest.raises(
        EncodeError, match=r"cannot encode tuple as a payload: \$\[0\]: complex is not encodable"
    ):
        encode((1j,))


def test_nan_and_infinities_encode_as_null_as_javascript_does() -> None:
    assert encode([float("nan"), float("inf"), -float("inf")]) == b"[null,null,null]"


class Status(enum.IntEnum):
    OPEN = 1


@dataclass
class Line:
    sku: str
    price: decimal.Decimal
    tags: frozenset[str]


@dataclass
class Everything:
    id: uuid.UUID
    total: decimal.Decimal
    at: dt.datetime
    on: dt.date
    cutoff: dt.time
    window: dt.timedelta
    seen: set[int]
    colour: Colour
    status: Status
    blob: bytes
    lines: list[Line]
    model: Model
    struct: Struct


EVERYTHING = Everything(
    id=uuid.UUID("12345678-1234-5678-1234-567812345678"),
    total=decimal.Decimal("10.10"),
    at=dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC),
    on=dt.date(2024, 2, 29),
    cutoff=dt.time(17, 30),
    window=dt.timedelta(minutes=90),
    seen={3, 1, 2},
    colour=Colour.RED,
    status=Status.OPEN,
    blob=b"\x00\xff",
    lines=[Line("a", decimal.Decimal("0.1"), frozenset({"x"}))],
    model=Model(id=1, name="m"),
    struct=Struct(2, ["t"]),
)


@pytest.mark.parametrize(
    ("annotation", "value"),
    [
        (uuid.UUID, uuid.UUID("12345678-1234-5678-1234-567812345678")),
        (decimal.Decimal, decimal.Decimal("1234567890.0000000001")),
        (dt.datetime, dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)),
        (dt.datetime, dt.datetime(2024, 1, 2, 3, 4, 5)),
        (dt.date, dt.date(2024, 2, 29)),
        (dt.time, dt.time(23, 59, 59, 999)),
        (dt.timedelta, dt.timedelta(days=1, seconds=5)),
        (set[str], {"a", "b"}),
        (frozenset[int], frozenset({1, 2})),
        (Colour, Colour.RED),
        (Status, Status.OPEN),
        (list[bytes], [b"\x00", b"\xff\xfe"]),
        (dict[str, uuid.UUID], {"k": uuid.UUID(int=7)}),
        (Line, Line("a", decimal.Decimal("2.50"), frozenset({"x", "y"}))),
        (Everything, EVERYTHING),
    ],
)
def test_every_type_round_trips_through_encode_and_decode(annotation: Any, value: Any) -> None:
    assert decoder_for(annotation)(encode(value)) == value


def test_a_pydantic_model_with_those_types_round_trips() -> None:
    class Payment(pydantic.BaseModel):
        id: uuid.UUID
        amount: decimal.Decimal
        at: dt.datetime

    payment = Payment(
        id=uuid.UUID(int=1), amount=decimal.Decimal("9.99"), at=dt.datetime(2024, 1, 1)
    )
    assert decoder_for(Payment)(encode(payment)) == payment
    assert decoder_for(dict[str, Payment])(encode({"p": payment})) == {"p": payment}


def test_a_value_that_cannot_be_encoded_names_the_path_of_the_part_that_cannot() -> None:
    @dataclass
    class Receipt:
        id: int
        lines: list[dict[str, Any]]

    with pytest.raises(
        EncodeError, match=r"cannot encode Receipt as a payload: \$\.lines\[1\]\.gw"
    ) as caught:
        encode(Receipt(1, [{"gw": "ok"}, {"gw": object()}]))
    assert caught.value.path == "$.lines[1].gw"
    assert "object is not encodable" in str(caught.value)


def test_a_bad_leaf_value_is_a_decode_error_naming_its_path() -> None:
    with pytest.raises(DecodeError, match=r"\$\.id: expected a UUID string, got str 'nope'"):
        decoder_for(Everything)(b'{"id": "nope"}')
    with pytest.raises(DecodeError, match=r"\$\[0\]: expected a base64 string, got int 5"):
        decoder_for(list[bytes])(b"[5]")
